//! Each algorithm's true bound, as the README states it, and the checks that test it:
//!
//! - token bucket: `capacity + ⌊rate × Δ⌋` over any span Δ; GCRA: `max_burst + 1 +
//!   ⌊count × Δ / period⌋`;
//! - fixed window: `limit` per window aligned to the Unix epoch;
//! - sliding window: `limit` per aligned window, and `2 × limit − ⌈2 × limit / W⌉` (W in
//!   µs) in any span shorter than a window;
//! - sliding log: `limit` in any span shorter than its window;
//! - in-flight: `limit` holders at any instant.
//!
//! Nothing else is allowed for, but the server clock's millisecond (see
//! [`SERVER_CLOCK_MARGIN_US`]).

use crate::catalogue::Shape;

/// How far before a call's send instant the server may have stamped it: on Redis 7.0 the
/// module reads the wall clock in whole milliseconds, so a call executed at `t` is decided
/// as of `⌊t⌋ms > t − 1 ms`. Every host process and container shares the kernel's clock.
pub const SERVER_CLOCK_MARGIN_US: u64 = 1000;

/// What one algorithm admits at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// `burst + ⌊units × Δ / per_us⌋` over any span Δ (token bucket, GCRA).
    Refill { burst: u64, units: u64, per_us: u64 },
    /// `limit` per aligned window; a sliding window also at most its span limit in any span
    /// shorter than a window.
    Window {
        limit: u64,
        window_us: u64,
        sliding: bool,
    },
    /// `limit` in any span shorter than `window_us` (sliding log).
    Log { limit: u64, window_us: u64 },
    /// `limit` holders at once, each slot expiring `ttl_us` after it was taken.
    Holders { limit: u64, ttl_us: u64 },
}

/// One test of a bound over the decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// At most `burst + ⌊units × Δ / per_us⌋` in any span Δ, or with `max_span_us` at most
    /// `burst` in any span shorter than it (`units` 0).
    Span {
        burst: u64,
        units: u64,
        per_us: u64,
        max_span_us: Option<u64>,
    },
    /// At most `limit` in each window `[k × W, (k + 1) × W)`.
    Aligned { limit: u64, window_us: u64 },
    /// At most `limit` holders at once.
    Holders { limit: u64, ttl_us: u64 },
}

impl Bound {
    pub fn of(shape: Shape) -> Bound {
        match shape {
            Shape::TokenBucket { capacity, per_s } => Bound::Refill {
                burst: capacity,
                units: per_s,
                per_us: 1_000_000,
            },
            Shape::Gcra {
                max_burst,
                count,
                period_ms,
            } => Bound::Refill {
                burst: max_burst + 1,
                units: count,
                per_us: period_ms * 1000,
            },
            Shape::FixedWindow { limit, window_ms } => Bound::Window {
                limit,
                window_us: window_ms * 1000,
                sliding: false,
            },
            Shape::SlidingWindow { limit, window_ms } => Bound::Window {
                limit,
                window_us: window_ms * 1000,
                sliding: true,
            },
            Shape::SlidingLog { limit, window_ms } => Bound::Log {
                limit,
                window_us: window_ms * 1000,
            },
            Shape::Concurrency { limit, ttl_ms } => Bound::Holders {
                limit,
                ttl_us: ttl_ms * 1000,
            },
        }
    }

    /// The quota: the burst of a refill, the limit of the others.
    pub fn quota(self) -> u64 {
        match self {
            Bound::Refill { burst, .. } => burst,
            Bound::Window { limit, .. }
            | Bound::Log { limit, .. }
            | Bound::Holders { limit, .. } => limit,
        }
    }

    /// One replica's share, as the client's local fallback enforces it: the quota divided by
    /// `replicas` (rounded down), the refill `replicas` times slower; `None` when the share
    /// is below one unit (the replica admits nothing alone).
    pub fn share(self, replicas: u64) -> Option<Bound> {
        let replicas = replicas.max(1);
        let part = |quota: u64| Some(quota / replicas).filter(|share| *share > 0);
        Some(match self {
            Bound::Refill {
                burst,
                units,
                per_us,
            } => Bound::Refill {
                burst: part(burst)?,
                units,
                per_us: per_us * replicas,
            },
            Bound::Window {
                limit,
                window_us,
                sliding,
            } => Bound::Window {
                limit: part(limit)?,
                window_us,
                sliding,
            },
            Bound::Log { limit, window_us } => Bound::Log {
                limit: part(limit)?,
                window_us,
            },
            Bound::Holders { limit, ttl_us } => Bound::Holders {
                limit: part(limit)?,
                ttl_us,
            },
        })
    }

    /// Its checks.
    pub fn checks(self) -> Vec<Check> {
        match self {
            Bound::Refill {
                burst,
                units,
                per_us,
            } => vec![Check::Span {
                burst,
                units,
                per_us,
                max_span_us: None,
            }],
            Bound::Window {
                limit,
                window_us,
                sliding,
            } => {
                let mut checks = vec![Check::Aligned { limit, window_us }];
                if sliding {
                    checks.push(Check::Span {
                        burst: sliding_span_limit(limit, window_us),
                        units: 0,
                        per_us: 1,
                        max_span_us: Some(window_us),
                    });
                }
                checks
            }
            Bound::Log { limit, window_us } => vec![Check::Span {
                burst: limit,
                units: 0,
                per_us: 1,
                max_span_us: Some(window_us),
            }],
            Bound::Holders { limit, ttl_us } => vec![Check::Holders { limit, ttl_us }],
        }
    }
}

/// The sliding window's bound over any span shorter than one window: `2L − ⌈2L / W⌉`, W in
/// µs (the README's error bound, attained by a burst at the very end of a window).
pub fn sliding_span_limit(limit: u64, window_us: u64) -> u64 {
    (2 * limit).saturating_sub((2 * limit).div_ceil(window_us.max(1)))
}

impl Check {
    /// Its bound for a span of `span_us` (constant but for a refill).
    pub fn bound(self, span_us: u64) -> u64 {
        match self {
            Check::Span {
                burst,
                units,
                per_us,
                ..
            } => {
                let refill = u128::from(units) * u128::from(span_us) / u128::from(per_us.max(1));
                burst.saturating_add(u64::try_from(refill).unwrap_or(u64::MAX))
            }
            Check::Aligned { limit, .. } | Check::Holders { limit, .. } => limit,
        }
    }

    /// The README's over-admission for one fault that loses writes on the limiter's
    /// primary, as this check counts it: what the limiter admits in the exposure T (a full
    /// burst plus the refill over T), a limit per aligned window, a span's bound, every holder.
    pub fn write_loss(self, exposure_us: u64) -> u64 {
        match self {
            Check::Span {
                max_span_us: None, ..
            } => self.bound(exposure_us),
            Check::Span { burst, .. } => burst,
            Check::Aligned { limit, .. } | Check::Holders { limit, .. } => limit,
        }
    }

    /// The first number of the check's bound: the units it allows over the shortest span.
    pub fn burst(self) -> u64 {
        self.bound(0)
    }

    /// The check in words.
    pub fn describe(self) -> String {
        match self {
            Check::Span {
                burst,
                units,
                per_us,
                max_span_us: None,
            } => format!("{burst} + {} × span", rate(units, per_us)),
            Check::Span {
                burst,
                max_span_us: Some(span_us),
                ..
            } => format!("{burst} in any span under {}", seconds(span_us)),
            Check::Aligned { limit, window_us } => {
                format!("{limit} per aligned {} window", seconds(window_us))
            }
            Check::Holders { limit, .. } => format!("{limit} holders at once"),
        }
    }
}

/// `5/s`, `5/3 s`.
pub fn rate(units: u64, per_us: u64) -> String {
    if per_us == 1_000_000 {
        format!("{units}/s")
    } else {
        format!("{units}/{}", seconds(per_us))
    }
}

/// `2 s`, `0.5 s`, `30 s`.
pub fn seconds(us: u64) -> String {
    if us.is_multiple_of(1_000_000) {
        format!("{} s", us / 1_000_000)
    } else {
        format!("{} s", us as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_the_readme() {
        let bucket = Bound::of(Shape::TokenBucket {
            capacity: 10,
            per_s: 5,
        });
        let [span] = bucket.checks()[..] else {
            panic!()
        };
        assert_eq!(span.bound(0), 10);
        assert_eq!(span.bound(999_999), 14);
        assert_eq!(span.bound(1_000_000), 15);
        // T = 3.5 s: a burst plus 17.5 tokens.
        assert_eq!(span.write_loss(3_500_000), 27);
        assert_eq!(span.describe(), "10 + 5/s × span");

        let sliding = Bound::of(Shape::SlidingWindow {
            limit: 10,
            window_ms: 2000,
        });
        let checks = sliding.checks();
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].describe(), "10 per aligned 2 s window");
        assert_eq!(checks[1].describe(), "19 in any span under 2 s");
        assert_eq!(checks[1].write_loss(3_500_000), 19);

        let gcra = Bound::of(Shape::Gcra {
            max_burst: 4,
            count: 5,
            period_ms: 1000,
        });
        assert_eq!(gcra.checks()[0].bound(2_000_000), 15);
    }

    #[test]
    fn a_share_is_the_quota_over_the_replicas() {
        let bucket = Bound::of(Shape::TokenBucket {
            capacity: 10,
            per_s: 5,
        });
        let share = bucket.share(3).unwrap();
        assert_eq!(
            share,
            Bound::Refill {
                burst: 3,
                units: 5,
                per_us: 3_000_000
            }
        );
        // 3 + 5/3 per second: 8 after 3 s.
        assert_eq!(share.checks()[0].bound(3_000_000), 8);
        let gate = Bound::of(Shape::Concurrency {
            limit: 1,
            ttl_ms: 5000,
        });
        assert_eq!(gate.share(3), None);
        let sliding = Bound::of(Shape::SlidingWindow {
            limit: 25,
            window_ms: 5000,
        });
        let shared = sliding.share(3).unwrap().checks();
        assert_eq!(shared.len(), sliding.checks().len());
        assert_eq!(shared[0].burst(), 8);
        assert_eq!(shared[1].burst(), 15);
    }
}
