//! How one limit is shared by this region: `core::regional::split`'s split of it, this
//! region's share of it ([`RegionConfig::split`]): its floor, decided in its own Redis by
//! `RL.REGIONAL`, and home's pool, which the agent leases from. A fixed window of `L` per
//! unit is this region's floor of `⌊L·f·w/W⌋` per unit and home's pool (key `pool_prefix` +
//! the limit's key) `L − Σ floors`; a token bucket or GCRA is a floor of capacity
//! `⌊C·f·w/W⌋` refilling at most `f·r·w/W` (its interval rounded up, derated for drift) and
//! a pool of what the floors leave, less `⌈r_p·T⌉` when pre-paid (0 over-admission;
//! carryover keeps the capacity, within `min(R·2k, ⌈r_p·T⌉)`); a sliding window splits as a
//! fixed window (its pool's leases end with the home window, so the regions admit no more
//! than one sliding window's own bound, clocks aligned). An in-flight limit, or a split that
//! rounds to 0, is refused.

use std::time::Duration;

use redis_ratelimit_client::algorithm::AlgorithmError;
use redis_ratelimit_client::{Algorithm, Rate};
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_core::regional::split::{
    Regions, SplitError, gcra_rate, split_bucket, split_window,
};

use crate::config::{PoolMode, RegionConfig};

/// How one limit is shared: this region's floor and home's pool (`None`: home's share is
/// empty, nothing to lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// This region's own limiter (its Redis, `RL.REGIONAL`'s floor).
    pub floor: Algorithm,
    /// Home's pool, as the agent asks it.
    pub pool: Option<Algorithm>,
}

/// Why a limit cannot be shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The algorithm has no regional form in the service.
    Kind(Kind),
    /// The split (`core::regional::split`) refuses it.
    Split(SplitError),
    /// A part cannot be built as an algorithm (its parameters out of the server's bounds).
    Part(&'static str, String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kind(kind) => write!(
                f,
                "a region's limits are fixed_window, sliding_window, token_bucket or gcra, not {}",
                kind.config_name()
            ),
            Self::Split(error) => write!(f, "{error}"),
            Self::Part(part, error) => write!(f, "this region's {part} cannot be built: {error}"),
        }
    }
}

impl RegionConfig {
    /// The split's view of the weights: every region's.
    fn regions<'a>(&self, weights: &'a [u64]) -> Regions<'a> {
        Regions {
            weights,
            floor_percent: self.floor_percent,
            drift_ppm: u64::from(self.drift_ppm),
        }
    }

    /// This region's index among the weights (past them when it has none: the file's
    /// reading refuses that, and a share of it is refused as invalid).
    fn own(&self) -> usize {
        self.weights
            .keys()
            .position(|name| *name == self.region)
            .unwrap_or(usize::MAX)
    }

    /// `T = P + a` in ns, the pre-pay's span (`None`: carryover).
    fn prepay_lifetime_ns(&self) -> Option<u64> {
        let lifetime = self.period.saturating_add(self.margin).as_nanos();
        (self.pool_mode == PoolMode::PrePaid).then(|| u64::try_from(lifetime).unwrap_or(u64::MAX))
    }

    /// Splits the limit `global` into this region's floor and home's pool, by
    /// `core::regional::split` (the floors by weight, capacities rounded down, intervals
    /// rounded up and the floor's derated by `ρ`, the pool given what the floors do not,
    /// less the pre-pay when pre-paid): fixed windows, token buckets and GCRA.
    pub fn split(&self, global: &Algorithm) -> Result<Parts, Refusal> {
        let weights: Vec<u64> = self.weights.values().copied().collect();
        let regions = self.regions(&weights);
        let built = |part: &'static str, algorithm: Result<Algorithm, AlgorithmError>| {
            algorithm.map_err(|error| Refusal::Part(part, error.to_string()))
        };
        match global.as_quota() {
            // A sliding window is split as a fixed window: the same window, the floors by
            // weight and the pool what they leave (the regions model's split, clocks aligned);
            // the agent ends its pool's leases with the home window they were granted in.
            Quota::FixedWindow(_) | Quota::SlidingWindow(_) => {
                let window = global.window();
                let part = |limit: u64| match global.as_quota() {
                    Quota::SlidingWindow(_) => Algorithm::sliding_window(limit, window),
                    _ => Algorithm::fixed_window(limit, window),
                };
                let share = split_window(global.quota(), &regions)
                    .and_then(|split| split.share(self.own()))
                    .map_err(Refusal::Split)?;
                let floor = built("floor", part(share.floor))?;
                let pool = (share.pool > 0)
                    .then(|| built("pool", part(share.pool)))
                    .transpose()?;
                Ok(Parts { floor, pool })
            }
            Quota::TokenBucket(params) => {
                let share = split_bucket(
                    params.capacity(),
                    params.interval_ns(),
                    self.prepay_lifetime_ns(),
                    &regions,
                )
                .and_then(|split| split.share(self.own()))
                .map_err(Refusal::Split)?;
                let bucket = |capacity: u64, interval_ns: u64| {
                    Algorithm::token_bucket_with_rate(capacity, Rate::every(interval_ns)?)
                };
                Ok(Parts {
                    floor: built(
                        "floor",
                        bucket(share.floor_capacity, share.floor_interval_ns),
                    )?,
                    pool: Some(built(
                        "pool",
                        bucket(share.pool_capacity, share.pool_interval_ns),
                    )?),
                })
            }
            Quota::Gcra(params) => {
                let interval_ns = u64::try_from(params.interval_ns()).unwrap_or(0);
                let period_s = u64::try_from(params.period_s()).unwrap_or(0);
                let share = split_bucket(
                    params.limit(),
                    interval_ns,
                    self.prepay_lifetime_ns(),
                    &regions,
                )
                .and_then(|split| split.share(self.own()))
                .map_err(Refusal::Split)?;
                // A rate of `count` per a whole number of seconds whose emission interval is
                // at least the part's.
                let gcra = |capacity: u64, interval_ns: u64, zero: SplitError| {
                    let (count, period_s) =
                        gcra_rate(interval_ns, period_s).ok_or(Refusal::Split(zero))?;
                    let period = Duration::from_secs(period_s);
                    built(
                        "pool",
                        Algorithm::gcra(capacity.saturating_sub(1), count, period),
                    )
                };
                Ok(Parts {
                    floor: gcra(
                        share.floor_capacity,
                        share.floor_interval_ns,
                        SplitError::FloorRateZero,
                    )
                    .map_err(|refusal| match refusal {
                        Refusal::Part(_, error) => Refusal::Part("floor", error),
                        other => other,
                    })?,
                    pool: Some(gcra(
                        share.pool_capacity,
                        share.pool_interval_ns,
                        SplitError::PoolRateZero,
                    )?),
                })
            }
            _ => Err(Refusal::Kind(global.kind())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::config::{GOOD_REGION_FILE, parse_region};

    #[test]
    fn a_limit_splits_into_this_regions_floor_and_homes_pool() {
        let region = parse_region(GOOD_REGION_FILE).unwrap();
        let hour = Duration::from_secs(3_600);
        // 100 at 50 %: floors 25 (eu), 12 (us), 12 (ap); the pool 100 − 49.
        let window = region
            .split(&Algorithm::fixed_window(100, hour).unwrap())
            .unwrap();
        assert_eq!(window.floor, Algorithm::fixed_window(25, hour).unwrap());
        assert_eq!(
            window.pool,
            Some(Algorithm::fixed_window(51, hour).unwrap())
        );
        assert_eq!(
            region.split(&Algorithm::fixed_window(1, hour).unwrap()),
            Err(Refusal::Split(SplitError::FloorCapacityZero))
        );
        // A sliding window splits alike, its parts sliding windows.
        let sliding = region
            .split(&Algorithm::sliding_window(100, hour).unwrap())
            .unwrap();
        assert_eq!(sliding.floor, Algorithm::sliding_window(25, hour).unwrap());
        assert_eq!(
            sliding.pool,
            Some(Algorithm::sliding_window(51, hour).unwrap())
        );
        // A bucket of 100 at 10/s: the floor 25 at 2.5/s; the pool 51 at 5/s less the
        // pre-pay ⌈5 × 1.25⌉ = 7 (T = 1250 ms).
        let bucket = Algorithm::token_bucket_with_rate(100, Rate::per_second("10").unwrap());
        let parts = region.split(&bucket.unwrap()).unwrap();
        let expected = |capacity, rate| {
            Algorithm::token_bucket_with_rate(capacity, Rate::per_second(rate).unwrap()).unwrap()
        };
        assert_eq!(parts.floor, expected(25, "2.5"));
        assert_eq!(parts.pool, Some(expected(44, "5")));
        let carryover = RegionConfig {
            pool_mode: PoolMode::Carryover,
            ..region.clone()
        };
        let bucket = Algorithm::token_bucket_with_rate(100, Rate::per_second("10").unwrap());
        assert_eq!(
            carryover.split(&bucket.unwrap()).unwrap().pool,
            Some(expected(51, "5"))
        );
        // GCRA: 100 at once, 10 per second: the floor 25 at 2.5 per s (1000 per 400 s, a
        // count per whole seconds), the pool 44 at 5 per s (1000 per 200 s).
        let gcra = region
            .split(&Algorithm::gcra(99, 10, Duration::from_secs(1)).unwrap())
            .unwrap();
        let seconds = Duration::from_secs;
        assert_eq!(
            gcra.floor,
            Algorithm::gcra(24, 1_000, seconds(400)).unwrap()
        );
        assert_eq!(
            gcra.pool,
            Some(Algorithm::gcra(43, 1_000, seconds(200)).unwrap())
        );
    }
}
