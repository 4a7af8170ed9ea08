//! Units of time used by the algorithms, and the one rounding rule for durations.

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
pub fn ceil_ms(ns: impl Into<i128>) -> u64 {
    let ns: i128 = ns.into();
    if ns <= 0 {
        return 0;
    }
    match u64::try_from(ns) {
        // The usual case: a 64-bit division by a constant, which compiles to a multiplication.
        Ok(small) => small.div_ceil(NS_PER_MS),
        Err(_) => u64::try_from(ns.div_ceil_positive(i128::from(NS_PER_MS))).unwrap_or(u64::MAX),
    }
}

/// `div_ceil` for a positive divisor (the std method is not yet stable for signed integers).
trait DivCeilPositive {
    fn div_ceil_positive(self, divisor: Self) -> Self;
}

impl DivCeilPositive for i128 {
    fn div_ceil_positive(self, divisor: i128) -> i128 {
        let quotient = self.div_euclid(divisor);
        if self.rem_euclid(divisor) == 0 {
            quotient
        } else {
            quotient.saturating_add(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_whole_milliseconds() {
        assert_eq!(ceil_ms(-5), 0);
        assert_eq!(ceil_ms(0), 0);
        assert_eq!(ceil_ms(1), 1);
        assert_eq!(ceil_ms(1_000_000), 1);
        assert_eq!(ceil_ms(1_000_001), 2);
        assert_eq!(ceil_ms(i128::MAX), u64::MAX);
    }
}
