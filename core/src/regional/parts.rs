//! A global limit's split as core's quotas: every region's floor and home's pool, each a
//! quota of the global limit's kind for a call of one unit, built from [`super::split`]'s
//! numbers. The model checker runs them and the run on real processes installs them; the
//! service's region mode builds its own region's parts from the same numbers as the client
//! library's algorithms (it takes fixed windows, sliding windows, token buckets and GCRA).

use super::split::{Regions, SplitError, gcra_rate, split_bucket, split_window};
use crate::concurrency::{ConcurrencyParams, MAX_STORED_HOLDERS};
use crate::gcra::GcraParams;
use crate::kinds::Quota;
use crate::sliding_log::{MAX_STORED_ENTRIES, SlidingLogParams};
use crate::token_bucket::TokenBucketParams;
use crate::window::WindowParams;

/// A global limit split into quotas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Region `i`'s floor, on the region's clock (`None`: its share rounds to nothing).
    pub floors: Vec<Option<Quota>>,
    /// Home's pool, on home's clock (`None`: nothing left to lease).
    pub pool: Option<Quota>,
    /// Units the pre-pay took from the pool's capacity (0: carryover, or a window kind).
    pub prepay: u64,
    /// A bucket pool's refill interval (token bucket, GCRA): it refills at most one unit per
    /// this (`None`: a window kind, or a pool without rate). `⌈T/interval⌉` is the most it
    /// refills in a lease's lifetime `T`: the pre-pay, and carryover's bound.
    pub pool_interval_ns: Option<u64>,
}

/// Splits `global` among `regions` (`prepay_lifetime_ns`: the lease lifetime `T` a bucket's
/// pool pre-pays; `None`: carryover):
/// - a fixed or sliding window, a sliding log, an in-flight limit: floors of `⌊L·f·w/W⌋`
///   ([`split_window`]), the pool `L − Σ floors`, the global's window or ttl. A floor's
///   sliding window or sliding log window and its in-flight holders' ttl are derated
///   `⌈·(1 + ρ)⌉` (a span of `W` of home's time lasts at most that on the region's clock);
///   a fixed window floor keeps its region's aligned windows. The pool is the limit as home
///   holds it: the lease agent asks a sliding log pool with its window lengthened by `T`,
///   and an in-flight pool's slots for `T`;
/// - a token bucket or GCRA: [`split_bucket`] (GCRA's capacity its burst `max_burst + 1`,
///   its interval the emission interval), a GCRA part's rate by [`gcra_rate`] over the
///   global's period.
///
/// Refused only when the split is ([`SplitError::Invalid`], or a floor rate that cannot be
/// stated); a part that rounds to nothing, or that its kind's parameters refuse, is `None`.
pub fn split_quota(
    global: &Quota,
    regions: &Regions<'_>,
    prepay_lifetime_ns: Option<u64>,
) -> Result<Parts, SplitError> {
    let windowed = |limit: u64,
                    window_us: u64,
                    build: &dyn Fn(u64, u64) -> Option<Quota>,
                    derate: bool|
     -> Result<Parts, SplitError> {
        let split = split_window(limit, regions)?;
        let floor_window_us = if derate {
            regions.derated(window_us)
        } else {
            Some(window_us)
        };
        let floors = split
            .floors
            .iter()
            .map(|floor| {
                floor_window_us
                    .filter(|_| *floor > 0)
                    .and_then(|window_us| build(*floor, window_us))
            })
            .collect();
        let pool = (split.pool > 0)
            .then(|| build(split.pool, window_us))
            .flatten();
        Ok(Parts {
            floors,
            pool,
            prepay: 0,
            pool_interval_ns: None,
        })
    };
    match global {
        Quota::FixedWindow(params) => windowed(
            params.limit(),
            params.window_us(),
            &|limit, window_us| {
                WindowParams::new(limit, window_us, 1)
                    .ok()
                    .map(Quota::FixedWindow)
            },
            false,
        ),
        Quota::SlidingWindow(params) => windowed(
            params.limit(),
            params.window_us(),
            &|limit, window_us| {
                WindowParams::new(limit, window_us, 1)
                    .ok()
                    .map(Quota::SlidingWindow)
            },
            true,
        ),
        Quota::SlidingLog(params) => windowed(
            params.limit(),
            params.window_us(),
            &|limit, window_us| {
                SlidingLogParams::new(limit, window_us, 1, MAX_STORED_ENTRIES)
                    .ok()
                    .map(Quota::SlidingLog)
            },
            true,
        ),
        Quota::Concurrency(params) => windowed(
            params.limit(),
            params.ttl_us(),
            &|limit, ttl_us| {
                ConcurrencyParams::new(limit, ttl_us, MAX_STORED_HOLDERS)
                    .ok()
                    .map(|params| Quota::Concurrency(Box::new(params)))
            },
            true,
        ),
        Quota::TokenBucket(params) => bucket(
            params.capacity(),
            params.interval_ns(),
            prepay_lifetime_ns,
            regions,
            &|capacity, interval_ns| {
                TokenBucketParams::from_interval(capacity, interval_ns, 1)
                    .ok()
                    .map(Quota::TokenBucket)
            },
        ),
        Quota::Gcra(params) => {
            let period_s = u64::try_from(params.period_s()).unwrap_or(0);
            bucket(
                params.limit(),
                u64::try_from(params.interval_ns()).unwrap_or(0),
                prepay_lifetime_ns,
                regions,
                &|capacity, interval_ns| {
                    let (count, period_s) = gcra_rate(interval_ns, period_s)?;
                    let max_burst = i64::try_from(capacity.checked_sub(1)?).ok()?;
                    let count = i64::try_from(count).ok()?;
                    let period_s = i64::try_from(period_s).ok()?;
                    GcraParams::new(max_burst, count, period_s, 1)
                        .ok()
                        .map(|params| Quota::Gcra(Box::new(params)))
                },
            )
        }
    }
}

/// A bucket's parts: [`split_bucket`]'s capacities and intervals, each built by `build`.
fn bucket(
    capacity: u64,
    interval_ns: u64,
    prepay_lifetime_ns: Option<u64>,
    regions: &Regions<'_>,
    build: &dyn Fn(u64, u64) -> Option<Quota>,
) -> Result<Parts, SplitError> {
    let split = split_bucket(capacity, interval_ns, prepay_lifetime_ns, regions)?;
    let floors = split
        .floors
        .iter()
        .map(|floor| {
            floor
                .interval_ns
                .filter(|_| floor.capacity > 0)
                .and_then(|interval_ns| build(floor.capacity, interval_ns))
        })
        .collect();
    let pool = split
        .pool_capacity()
        .zip(split.pool_interval_ns)
        .and_then(|(capacity, interval_ns)| build(capacity, interval_ns));
    Ok(Parts {
        floors,
        pool,
        prepay: split.prepay,
        pool_interval_ns: split.pool_interval_ns,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::number::Decimal;

    const HALF_BY_2_1_1: Regions<'static> = Regions {
        weights: &[2, 1, 1],
        floor_percent: 50,
        drift_ppm: 0,
    };

    #[test]
    fn a_bucket_splits_into_quotas_of_its_kind() {
        let rate = Decimal::parse_positive(b"10").unwrap();
        let global = Quota::TokenBucket(TokenBucketParams::new(100, rate, 1).unwrap());
        let parts = split_quota(&global, &HALF_BY_2_1_1, Some(1_250_000_000)).unwrap();
        let bucket = |capacity, interval_ns| {
            Some(Quota::TokenBucket(
                TokenBucketParams::from_interval(capacity, interval_ns, 1).unwrap(),
            ))
        };
        // Floors 25, 12, 12 at 2.5, 1.25, 1.25 per s; the pool 51 at 5/s less ⌈5 × 1.25⌉.
        assert_eq!(
            parts.floors,
            [
                bucket(25, 400_000_000),
                bucket(12, 800_000_000),
                bucket(12, 800_000_000)
            ]
        );
        assert_eq!(parts.pool, bucket(44, 200_000_000));
        assert_eq!(
            (parts.prepay, parts.pool_interval_ns),
            (7, Some(200_000_000))
        );
    }

    #[test]
    fn a_gcra_part_is_a_count_per_whole_seconds() {
        let global = Quota::Gcra(Box::new(GcraParams::new(99, 10, 1, 1).unwrap()));
        let parts = split_quota(&global, &HALF_BY_2_1_1, Some(1_250_000_000)).unwrap();
        let gcra = |max_burst, count, period_s| {
            Some(Quota::Gcra(Box::new(
                GcraParams::new(max_burst, count, period_s, 1).unwrap(),
            )))
        };
        // As the service's: the floor 25 at 1000 per 400 s, the pool 44 at 1000 per 200 s.
        assert_eq!(parts.floors[0], gcra(24, 1_000, 400));
        assert_eq!(parts.pool, gcra(43, 1_000, 200));
    }

    #[test]
    fn window_floors_are_derated_for_drift_but_not_a_fixed_windows() {
        let regions = Regions {
            drift_ppm: 50_000,
            ..HALF_BY_2_1_1
        };
        let window = WindowParams::new(100, 1_000_000, 1).unwrap();
        let sliding = split_quota(&Quota::SlidingWindow(window), &regions, None).unwrap();
        let floor = sliding.floors[0].as_ref().unwrap();
        assert_eq!(
            (floor.advertised_quota(), floor.window().as_micros()),
            (25, 1_050_000)
        );
        let pool = sliding.pool.as_ref().unwrap();
        assert_eq!(
            (pool.advertised_quota(), pool.window().as_micros()),
            (51, 1_000_000)
        );
        let fixed = split_quota(&Quota::FixedWindow(window), &regions, None).unwrap();
        let floor = fixed.floors[0].as_ref().unwrap();
        assert_eq!(floor.window().as_micros(), 1_000_000);
        // f = 0: no floors, the whole limit pooled.
        let pooled = Regions {
            floor_percent: 0,
            ..regions
        };
        let parts = split_quota(&Quota::FixedWindow(window), &pooled, None).unwrap();
        assert_eq!(parts.floors, [None, None, None]);
        assert_eq!(parts.pool, Some(Quota::FixedWindow(window)));
    }
}
