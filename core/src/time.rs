//! Units of time used by the algorithms, and the rounding rules they share: durations a client
//! is told round up (waiting them is enough), key expiries round up (a key never expires while
//! its state still matters).

/// Nanoseconds per microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_SECOND: u64 = 1_000_000_000;
/// Microseconds per millisecond.
pub const US_PER_MS: u64 = 1_000;
/// Microseconds per second.
pub const US_PER_SECOND: u64 = 1_000_000;

/// Latest server time (Unix µs) the algorithms compute with: 2^62 ns, in the year 2116.
///
/// Later clocks are clamped to it. The bound leaves room for `now + 100 years` of refill in
/// an `i64` of nanoseconds, so stored instants never overflow.
pub const MAX_NOW_US: i64 = (1 << 62) / 1_000;

/// Milliseconds in `ns` nanoseconds, rounded up; 0 for zero or negative durations.
///
/// Every duration a client is told to wait is rounded up, so that waiting it is enough.
pub fn ceil_ms_from_ns(ns: impl Into<i128>) -> u64 {
    ceil_ms_in(ns.into(), NS_PER_MS)
}

/// Milliseconds in `us` microseconds, rounded up; 0 for zero or negative durations.
///
/// The same rounding as [`ceil_ms_from_ns`], for the algorithms that count in microseconds.
pub fn ceil_ms_from_us(us: impl Into<i128>) -> u64 {
    ceil_ms_in(us.into(), US_PER_MS)
}

/// Whole milliseconds, rounded up, in `duration` units of which `per_ms` make a millisecond.
#[inline]
fn ceil_ms_in(duration: i128, per_ms: u64) -> u64 {
    if duration <= 0 {
        return 0;
    }
    match u64::try_from(duration) {
        // The usual case: a 64-bit division by a constant (once inlined), which compiles to a
        // multiplication.
        Ok(small) => small.div_ceil(per_ms),
        Err(_) => u64::try_from(ceil_div(duration, i128::from(per_ms))).unwrap_or(u64::MAX),
    }
}

/// The key expiry (Unix ms) of a state that is indistinguishable from a missing key from the
/// Unix nanosecond `instant_ns` on.
///
/// Rounded up, so a key never expires while its state still matters; at least 1, because an
/// expiry of 0 would mean none.
pub fn expiry_ms_from_ns(instant_ns: impl Into<i128>) -> i64 {
    expiry_ms_in(instant_ns.into(), NS_PER_MS)
}

/// [`expiry_ms_from_ns`] for an instant in Unix microseconds.
pub fn expiry_ms_from_us(instant_us: impl Into<i128>) -> i64 {
    expiry_ms_in(instant_us.into(), US_PER_MS)
}

/// The Unix millisecond holding `instant` (in units of which `per_ms` make a millisecond),
/// rounded up, saturating, at least 1.
#[inline]
fn expiry_ms_in(instant: i128, per_ms: u64) -> i64 {
    saturating_i64(ceil_div(instant, i128::from(per_ms))).max(1)
}

/// `⌈numerator / divisor⌉` for a positive divisor, saturating (the std method is not yet
/// stable for signed integers).
pub(crate) fn ceil_div(numerator: i128, divisor: i128) -> i128 {
    let quotient = numerator.div_euclid(divisor);
    if numerator.rem_euclid(divisor) == 0 {
        quotient
    } else {
        quotient.saturating_add(1)
    }
}

/// `value` as an `i64`, saturating at its bounds.
///
/// Instants and durations are computed in `i128`, so that no intermediate product can
/// overflow, and stored or replied as `i64`; every bound argued in the algorithms keeps them
/// in range, so saturating only says what would happen if one did not.
pub(crate) fn saturating_i64(value: impl Into<i128>) -> i64 {
    let value: i128 = value.into();
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// Shortest window a windowed limiter accepts: one millisecond.
///
/// Replies are in whole milliseconds, so a shorter window could not be waited out honestly.
pub const MIN_WINDOW_US: u64 = US_PER_MS;

/// Longest window a windowed limiter accepts: 100 Julian years, in microseconds.
///
/// With it, every instant a window computes (`MAX_NOW_US` plus two windows) stays far
/// inside an `i64` of microseconds and of milliseconds.
pub const MAX_WINDOW_US: u64 = 100 * 31_557_600 * US_PER_SECOND;

/// Start of the epoch-aligned window of `window_us` holding `now_us` (both in µs).
///
/// Windows are `[k × window_us, (k + 1) × window_us)` in Unix time, so a 60 s window starts
/// at every whole minute and a 86400 s window at midnight UTC: every node and client derives
/// the same boundaries from the clock alone, with nothing to agree on. A zero window is
/// treated as 1 µs; results below `i64::MIN` (only for negative `now_us`) saturate.
pub fn window_start_us(now_us: i64, window_us: u64) -> i64 {
    let window = i128::from(window_us.max(1));
    let start = i128::from(now_us).div_euclid(window).saturating_mul(window);
    i64::try_from(start).unwrap_or(i64::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_whole_milliseconds() {
        assert_eq!(ceil_ms_from_ns(-5), 0);
        assert_eq!(ceil_ms_from_ns(0), 0);
        assert_eq!(ceil_ms_from_ns(1), 1);
        assert_eq!(ceil_ms_from_ns(1_000_000), 1);
        assert_eq!(ceil_ms_from_ns(1_000_001), 2);
        assert_eq!(ceil_ms_from_ns(i128::MAX), u64::MAX);
        assert_eq!(ceil_ms_from_us(-5), 0);
        assert_eq!(ceil_ms_from_us(1), 1);
        assert_eq!(ceil_ms_from_us(1_000), 1);
        assert_eq!(ceil_ms_from_us(1_001), 2);
        assert_eq!(ceil_ms_from_us(i128::MAX), u64::MAX);
        assert_eq!(ceil_ms_from_us(i128::MAX / 1_000), u64::MAX);
    }

    #[test]
    fn expiries_round_up_and_are_never_zero() {
        assert_eq!(expiry_ms_from_ns(1_500_000), 2);
        assert_eq!(expiry_ms_from_ns(2_000_000), 2);
        assert_eq!(expiry_ms_from_ns(0), 1, "0 would mean no expiry");
        assert_eq!(expiry_ms_from_ns(-5_000_000), 1);
        assert_eq!(expiry_ms_from_ns(i128::MAX), i64::MAX);
        assert_eq!(
            expiry_ms_from_us(1_700_000_000_000_001i64),
            1_700_000_000_001
        );
        assert_eq!(
            expiry_ms_from_us(1_700_000_000_000_000i64),
            1_700_000_000_000
        );
        assert_eq!(expiry_ms_from_us(i64::MIN), 1);
        assert_eq!(ceil_div(-3, 2), -1);
        assert_eq!(ceil_div(i128::MAX, 2), i128::MAX / 2 + 1);
        assert_eq!(saturating_i64(i128::MIN), i64::MIN);
        assert_eq!(saturating_i64(u64::MAX), i64::MAX);
        assert_eq!(saturating_i64(-7i64), -7);
    }

    #[test]
    fn windows_align_to_the_epoch() {
        const SECOND: i64 = 1_000_000;
        assert_eq!(MAX_WINDOW_US, 3_155_760_000_000_000);
        let t = 1_700_000_000 * SECOND + 123_456; // 2023-11-14T22:13:20.123456Z
        assert_eq!(
            window_start_us(t, 60 * SECOND as u64),
            1_699_999_980 * SECOND
        );
        assert_eq!(
            window_start_us(t, 86_400 * SECOND as u64),
            1_699_920_000 * SECOND
        );
        assert_eq!(window_start_us(t, 1_000), t - 456);
        assert_eq!(window_start_us(1_500, 1_500), 1_500);
        assert_eq!(window_start_us(1_499, 1_500), 0);
        assert_eq!(window_start_us(0, MAX_WINDOW_US), 0);
        assert_eq!(
            window_start_us(-1, 1_000),
            -1_000,
            "negative times round down"
        );
        assert_eq!(window_start_us(7, 0), 7, "a zero window is one microsecond");
        assert_eq!(window_start_us(i64::MIN, 1_000), i64::MIN, "saturates");
        assert_eq!(window_start_us(i64::MAX, u64::MAX), 0);
        assert_eq!(
            window_start_us(MAX_NOW_US, MAX_WINDOW_US),
            MAX_WINDOW_US as i64
        );
    }
}
