//! A global limit shared by every region: its parameters, the same limit as core's quota
//! ([`GlobalLimit::quota`], what the split divides) and what the whole system may admit at
//! most ([`GlobalLimit::bound`]).

use redis_ratelimit_core::concurrency::{ConcurrencyParams, MAX_STORED_HOLDERS};
use redis_ratelimit_core::gcra::{GcraParams, emission_interval_ns};
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_core::sliding_log::{MAX_STORED_ENTRIES, SlidingLogParams};
use redis_ratelimit_core::token_bucket::TokenBucketParams;
use redis_ratelimit_core::window::WindowParams;

use crate::check::Bound;

/// Nanoseconds per second.
const NS_PER_S: u64 = 1_000_000_000;

/// One limit shared by every region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalLimit {
    /// `capacity` tokens refilled at `per_second` tokens a second.
    TokenBucket { capacity: u64, per_second: u64 },
    /// redis-cell's GCRA: bursts of `max_burst + 1`, `count` units per `period_s` seconds.
    Gcra {
        max_burst: u64,
        count: u64,
        period_s: u64,
    },
    /// `limit` units per window of `window_us`, aligned to the Unix epoch of home's clock.
    FixedWindow { limit: u64, window_us: u64 },
    /// core's sliding window counter: `limit` units per window of `window_us` as estimated
    /// from the previous window's count, windows aligned to the Unix epoch of home's clock.
    SlidingWindow { limit: u64, window_us: u64 },
    /// `limit` units in any span shorter than `window_us`.
    SlidingLog { limit: u64, window_us: u64 },
    /// `limit` calls in flight at once, each holding its slot at most `hold_us`.
    InFlight { limit: u64, hold_us: u64 },
}

impl GlobalLimit {
    /// The limit as core's quota, for a call of one unit: what one server alone would hold,
    /// and what the split divides (a token bucket of `per_second` refills one token every
    /// `⌈1e9/per_second⌉` ns, as core derives it from a rate).
    pub fn quota(self) -> Quota {
        match self {
            GlobalLimit::TokenBucket {
                capacity,
                per_second,
            } => Quota::TokenBucket(
                TokenBucketParams::from_interval(capacity, NS_PER_S.div_ceil(per_second), 1)
                    .expect("a valid token bucket"),
            ),
            GlobalLimit::Gcra {
                max_burst,
                count,
                period_s,
            } => {
                let [max_burst, count, period_s] =
                    [max_burst, count, period_s].map(|n| i64::try_from(n).expect("an i64"));
                Quota::Gcra(Box::new(
                    GcraParams::new(max_burst, count, period_s, 1).expect("a valid GCRA"),
                ))
            }
            GlobalLimit::FixedWindow { limit, window_us } => Quota::FixedWindow(
                WindowParams::new(limit, window_us, 1).expect("a valid fixed window"),
            ),
            GlobalLimit::SlidingWindow { limit, window_us } => Quota::SlidingWindow(
                WindowParams::new(limit, window_us, 1).expect("a valid sliding window"),
            ),
            GlobalLimit::SlidingLog { limit, window_us } => Quota::SlidingLog(
                SlidingLogParams::new(limit, window_us, 1, MAX_STORED_ENTRIES)
                    .expect("a valid sliding log"),
            ),
            GlobalLimit::InFlight { limit, hold_us } => Quota::Concurrency(Box::new(
                ConcurrencyParams::new(limit, hold_us, MAX_STORED_HOLDERS)
                    .expect("a valid in-flight limit"),
            )),
        }
    }

    /// What the whole system may admit at most (the check of [`crate::check`]).
    pub fn bound(self) -> Bound {
        match self {
            GlobalLimit::TokenBucket {
                capacity,
                per_second,
            } => Bound::Refill {
                burst: capacity,
                units: per_second,
                per_ns: 1_000_000_000,
            },
            GlobalLimit::Gcra {
                max_burst,
                count,
                period_s,
            } => Bound::Refill {
                burst: max_burst + 1,
                units: 1,
                per_ns: gcra_interval_ns(count, period_s),
            },
            GlobalLimit::FixedWindow { limit, window_us } => Bound::Aligned { limit, window_us },
            GlobalLimit::SlidingWindow { limit, window_us } => {
                Bound::Estimator { limit, window_us }
            }
            GlobalLimit::SlidingLog { limit, window_us } => Bound::Log { limit, window_us },
            GlobalLimit::InFlight { limit, .. } => Bound::Holders { limit },
        }
    }
}

/// redis-cell's emission interval of `count` per `period_s` (core's own computation).
pub fn gcra_interval_ns(count: u64, period_s: u64) -> u64 {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let period = i64::try_from(period_s).unwrap_or(i64::MAX);
    emission_interval_ns(count, period)
        .ok()
        .and_then(|interval| u64::try_from(interval).ok())
        .unwrap_or(u64::MAX)
}
