//! A lease of `granted` tokens expressed as the token bucket Envoy 1.40 builds from an
//! assignment, so that Envoy admits at most `granted` requests under it however long it
//! lives (at most its TTL, whole seconds).
//!
//! What Envoy 1.40 does with a `token_bucket` (docs/rlqs.md, *How Envoy 1.40 applies a
//! token bucket*): its `AtomicTokenBucketImpl` holds at most `max_tokens`, starts with
//! `max_tokens` (the first) or with `max_tokens ×` the fraction the replaced bucket still
//! held, and refills at `rate = tokens_per_fill / whole seconds of fill_interval` (a fill
//! interval under 1 s divides by 0: an endless rate). Over a life of `L` seconds it admits
//! at most `max_tokens + rate × L` requests, so a lease keeps that at most `granted`.

/// Seconds of refill a full lease holds (`max_tokens ÷ rate`, about): most of a lease is
/// its `max_tokens`, admitted at once, so little of it is unspent when it is replaced
/// before its TTL; and Envoy starts a bucket full only when this is under its monotonic
/// clock (the host's uptime), else empty.
const BURST_SECONDS: u64 = 20;

/// One assignment's token bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub max_tokens: u32,
    pub tokens_per_fill: u32,
    /// Whole seconds (Envoy reads only those).
    pub fill_interval_seconds: i64,
}

impl Shape {
    /// The most Envoy admits under this bucket over `life_seconds`.
    pub fn most_admitted(&self, life_seconds: u64) -> u64 {
        let fill_seconds = u64::try_from(self.fill_interval_seconds.max(1)).unwrap_or(1);
        let refill = u64::from(self.tokens_per_fill)
            .saturating_mul(life_seconds)
            .checked_div(fill_seconds)
            .unwrap_or(u64::MAX);
        u64::from(self.max_tokens).saturating_add(refill)
    }
}

/// The bucket for `granted` tokens and an assignment living at most `life_seconds` (at
/// least 1): `max_tokens + tokens_per_fill × life ÷ fill_interval ≤ granted`, most of it
/// at once. `None` for 0 tokens.
pub fn shape(granted: u64, life_seconds: u64) -> Option<Shape> {
    let granted = granted.min(u64::from(u32::MAX));
    if granted == 0 {
        return None;
    }
    let life_seconds = life_seconds.max(1);
    // A refill of `per_second` every second, the rest (at least 1) at once.
    let per_second = granted.div_ceil(life_seconds.saturating_add(BURST_SECONDS));
    let at_once = granted.saturating_sub(per_second.saturating_mul(life_seconds));
    if at_once >= 1 {
        return Some(Shape {
            max_tokens: u32::try_from(at_once).ok()?,
            tokens_per_fill: u32::try_from(per_second).ok()?,
            fill_interval_seconds: 1,
        });
    }
    // Too few tokens for a refill every second: all at once, and one token per
    // `life + 1` seconds, which refills less than one token over the life.
    Some(Shape {
        max_tokens: u32::try_from(granted).ok()?,
        tokens_per_fill: 1,
        fill_interval_seconds: i64::try_from(life_seconds.saturating_add(1)).ok()?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::shape;

    #[test]
    fn envoy_admits_at_most_the_tokens_granted_and_most_of_them_at_once() {
        for life in [1, 2, 3, 10, 3600] {
            for granted in (1..200).chain([1_000, 100_000, u64::from(u32::MAX) + 5]) {
                let bucket = shape(granted, life).unwrap();
                assert!(
                    bucket.most_admitted(life) <= granted,
                    "{granted} {life}: {bucket:?}"
                );
                assert!(bucket.max_tokens >= 1 && bucket.tokens_per_fill >= 1);
                assert!(bucket.fill_interval_seconds >= 1);
            }
        }
        assert_eq!(shape(0, 2), None);
        // 20 tokens for 2 s: 18 at once, 1 a second.
        let twenty = shape(20, 2).unwrap();
        assert_eq!((twenty.max_tokens, twenty.tokens_per_fill), (18, 1));
        assert_eq!(twenty.most_admitted(2), 20);
        // Too few for a refill every second.
        let two = shape(2, 2).unwrap();
        assert_eq!((two.max_tokens, two.fill_interval_seconds), (2, 3));
    }
}
