//! How one global limit is split across regions (`docs/regions.md`, *Floors* and *Pre-paid
//! vs carryover*): a fraction `f` of it into static floors by region weight, the rest into
//! home's pool. Every quantity is rounded so that the parts never add up to more than the
//! whole: capacities (and window limits) rounded down, refill intervals rounded up, and the
//! pool gets only what the floors do not. Integer arithmetic only, in `u128` where products
//! could overflow, every result checked.
//!
//! The one split of a global limit. A split is every region's floor and home's pool
//! ([`split_window`], [`split_bucket`]); the service's region mode takes its own region's
//! share of it ([`WindowSplit::share`], [`BucketSplit::share`]), refusing one that leaves
//! it nothing, and builds its limits from the numbers; the model checker
//! (`regions-model/`) and the run on real processes (`chaos/src/regions/`) take every
//! region's parts as core's quotas ([`super::parts`]).

use core::fmt;

/// The scale of the fixed-point rates used to give the pool what the floors do not: a rate
/// of one token per `interval` ns is `⌊SCALE/interval⌋` (the global's, rounded down) or
/// `⌈SCALE/interval⌉` (a floor's, rounded up) tokens per `SCALE` ns, so the pool's rate is
/// never above the exact difference.
const SCALE: u128 = 1_000_000_000_000_000_000_000_000_000;

/// One million parts.
const PPM: u128 = 1_000_000;

/// The regions sharing a limit and how: every region's weight, the floor fraction `f` and
/// the clock drift `ρ` the floors are derated for.
#[derive(Clone, Copy, Debug)]
pub struct Regions<'a> {
    /// Every region's weight `w_i` (each at least 1).
    pub weights: &'a [u64],
    /// `f`, in percent (0 to 100).
    pub floor_percent: u64,
    /// `ρ`, parts per million: how far a region's clock may run fast of home's.
    pub drift_ppm: u64,
}

/// Why a limit cannot be split, or why a region's share of it is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// This region's floor capacity (or window limit) rounds to 0.
    FloorCapacityZero,
    /// This region's floor rate rounds to 0 (its refill interval would not fit).
    FloorRateZero,
    /// Home's pool gets no rate: the floors take all of it.
    PoolRateZero,
    /// The pre-pay `⌈r_p·T⌉` is at least the pool's whole capacity.
    PrePayEatsPool {
        /// The pre-pay, in units.
        prepay: u64,
        /// The pool's capacity before it.
        pool: u64,
    },
    /// A weight, index or parameter out of range (no regions, a weight of 0, `f` above
    /// 100, an interval of 0, a region not among the weights).
    Invalid,
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FloorCapacityZero => write!(f, "this region's floor capacity rounds to 0"),
            Self::FloorRateZero => write!(f, "this region's floor rate rounds to 0"),
            Self::PoolRateZero => write!(f, "home's pool gets no rate (the floors take it all)"),
            Self::PrePayEatsPool { prepay, pool } => write!(
                f,
                "the pre-pay of {prepay} units (the pool's refill over one lease lifetime) \
                 eats home's whole pool of {pool}"
            ),
            Self::Invalid => write!(f, "the split's parameters are out of range"),
        }
    }
}

/// A window limit's split (fixed window, sliding window, sliding log, in-flight slots): per
/// window, every region's floor and home's pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowSplit {
    /// Region `i`'s floor, `⌊L·f·w_i/W⌋` (0: its share rounds to nothing).
    pub floors: Vec<u64>,
    /// Home's pool, `L − Σ floors` (0: nothing to lease).
    pub pool: u64,
}

/// One region's share of a window limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowShare {
    /// This region's floor, `⌊L·f·w/W⌋`.
    pub floor: u64,
    /// Home's pool, `L − Σ floors` (0: nothing to lease).
    pub pool: u64,
}

impl WindowSplit {
    /// Region `own`'s share: refused when its floor rounds to 0.
    pub fn share(&self, own: usize) -> Result<WindowShare, SplitError> {
        let floor = *self.floors.get(own).ok_or(SplitError::Invalid)?;
        if floor == 0 {
            return Err(SplitError::FloorCapacityZero);
        }
        Ok(WindowShare {
            floor,
            pool: self.pool,
        })
    }
}

/// One region's floor of a bucket (token bucket, GCRA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketFloor {
    /// Its capacity, `⌊C·f·w/W⌋` (0: its share rounds to nothing).
    pub capacity: u64,
    /// Its refill interval on its own clock: the exact `I·W/(f·w)` rounded up, then derated
    /// `⌈·(1 + ρ)⌉` (`None`: `f` is 0, or the interval does not fit).
    pub interval_ns: Option<u64>,
}

/// A bucket's split (token bucket, GCRA): every region's floor and home's pool, capacities
/// and one-token refill intervals (ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketSplit {
    /// Region `i`'s floor.
    pub floors: Vec<BucketFloor>,
    /// Home's pool capacity before the pre-pay: `C − Σ floors`.
    pub pool_whole: u64,
    /// Home's pool refill interval: one token per this, a rate never above `r − Σ r_i`
    /// (`None`: the floors take all of the rate).
    pub pool_interval_ns: Option<u64>,
    /// The pre-pay subtracted from the pool's capacity, `⌈T/pool_interval⌉` (0: carryover,
    /// or a pool without rate).
    pub prepay: u64,
}

/// One region's share of a bucket, as the service's region mode takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketShare {
    /// This region's floor capacity, `⌊C·f·w/W⌋`.
    pub floor_capacity: u64,
    /// This region's floor refill interval on its own clock: the exact `I·W/(f·w)`
    /// rounded up, then derated `⌈·(1 + ρ)⌉`.
    pub floor_interval_ns: u64,
    /// Home's pool capacity: `C − Σ floors`, less the pre-pay when pre-paid.
    pub pool_capacity: u64,
    /// Home's pool refill interval: one token per this, a rate never above `r − Σ r_i`.
    pub pool_interval_ns: u64,
    /// The pre-pay subtracted from the pool's capacity, `⌈T/pool_interval⌉` (0: carryover).
    pub prepay: u64,
}

impl BucketSplit {
    /// Home's pool capacity: what the floors leave, less the pre-pay (`None`: nothing left).
    pub fn pool_capacity(&self) -> Option<u64> {
        self.pool_whole
            .checked_sub(self.prepay)
            .filter(|left| *left > 0)
    }

    /// Region `own`'s share: refused when its floor's capacity or rate rounds to 0, when the
    /// pool has no rate, or when the pre-pay leaves it nothing.
    pub fn share(&self, own: usize) -> Result<BucketShare, SplitError> {
        let floor = self.floors.get(own).ok_or(SplitError::Invalid)?;
        if floor.capacity == 0 {
            return Err(SplitError::FloorCapacityZero);
        }
        let floor_interval_ns = floor.interval_ns.ok_or(SplitError::FloorRateZero)?;
        let pool_interval_ns = self.pool_interval_ns.ok_or(SplitError::PoolRateZero)?;
        let pool_capacity = self.pool_capacity().ok_or(SplitError::PrePayEatsPool {
            prepay: self.prepay,
            pool: self.pool_whole,
        })?;
        Ok(BucketShare {
            floor_capacity: floor.capacity,
            floor_interval_ns,
            pool_capacity,
            pool_interval_ns,
            prepay: self.prepay,
        })
    }
}

impl Regions<'_> {
    fn total_weight(&self) -> Result<u128, SplitError> {
        if self.weights.is_empty() || self.weights.contains(&0) || self.floor_percent > 100 {
            return Err(SplitError::Invalid);
        }
        Ok(self.weights.iter().map(|w| u128::from(*w)).sum())
    }

    /// `⌊x·f·w/(100·W)⌋`.
    fn floor_part(&self, x: u64, weight: u64, total: u128) -> u64 {
        let numerator = u128::from(x)
            .saturating_mul(u128::from(self.floor_percent))
            .saturating_mul(u128::from(weight));
        let part = numerator
            .checked_div(total.saturating_mul(100))
            .unwrap_or(0);
        u64::try_from(part).unwrap_or(u64::MAX).min(x)
    }

    /// A floor's refill interval before derating: `⌈I·100·W/(f·w)⌉` (`None`: `f` is 0 or it
    /// does not fit).
    fn floor_interval(&self, interval_ns: u64, weight: u64, total: u128) -> Option<u128> {
        let numerator = u128::from(interval_ns)
            .checked_mul(100)?
            .checked_mul(total)?;
        let denominator = u128::from(self.floor_percent).checked_mul(u128::from(weight))?;
        if denominator == 0 {
            return None;
        }
        Some(numerator.div_ceil(denominator))
    }

    /// `⌈d·(1 + ρ)⌉`: a duration `d` a region measures on its own clock (a floor's refill
    /// interval, a floor's window or holder ttl), so that it never lasts less of home's time
    /// than `d` (`None`: it does not fit).
    pub fn derated(&self, duration: u64) -> Option<u64> {
        u128::from(duration)
            .checked_mul(PPM.saturating_add(u128::from(self.drift_ppm)))
            .map(|scaled| scaled.div_ceil(PPM))
            .and_then(|derated| u64::try_from(derated).ok())
    }
}

/// Splits a window limit of `limit` units per window: every region's floor and home's pool.
pub fn split_window(limit: u64, regions: &Regions<'_>) -> Result<WindowSplit, SplitError> {
    let total = regions.total_weight()?;
    let floors: Vec<u64> = regions
        .weights
        .iter()
        .map(|w| regions.floor_part(limit, *w, total))
        .collect();
    let pool = limit.saturating_sub(
        floors
            .iter()
            .fold(0u64, |sum, floor| sum.saturating_add(*floor)),
    );
    Ok(WindowSplit { floors, pool })
}

/// Splits a bucket of `capacity` refilled one token every `interval_ns` (GCRA: `burst =
/// max_burst + 1`, the emission interval) among the regions; `prepay_lifetime_ns` is the
/// lease lifetime `T` to pre-pay (`None`: carryover, the pool keeps its capacity).
pub fn split_bucket(
    capacity: u64,
    interval_ns: u64,
    prepay_lifetime_ns: Option<u64>,
    regions: &Regions<'_>,
) -> Result<BucketSplit, SplitError> {
    let total = regions.total_weight()?;
    if interval_ns == 0 || capacity == 0 {
        return Err(SplitError::Invalid);
    }
    let mut floors = Vec::with_capacity(regions.weights.len());
    // Every floor's rate, from its interval rounded up (its rate rounded down).
    let mut floors_rate: u128 = 0;
    for weight in regions.weights {
        let exact = match regions.floor_interval(interval_ns, *weight, total) {
            Some(exact) => {
                floors_rate = floors_rate.saturating_add(SCALE.div_ceil(exact.max(1)));
                Some(exact)
            }
            // No floors: the pool takes the whole rate.
            None if regions.floor_percent == 0 => None,
            // A floor whose rate cannot be stated cannot be left out of the pool's.
            None => return Err(SplitError::FloorRateZero),
        };
        floors.push(BucketFloor {
            capacity: regions.floor_part(capacity, *weight, total),
            interval_ns: exact
                .and_then(|exact| u64::try_from(exact).ok())
                .and_then(|exact| regions.derated(exact)),
        });
    }
    // The pool: the global rate rounded down, less every floor's rounded up.
    let pool_interval_ns = SCALE
        .checked_div(u128::from(interval_ns))
        .and_then(|global| global.checked_sub(floors_rate))
        .filter(|rate| *rate > 0)
        .and_then(|rate| u64::try_from(SCALE.div_ceil(rate)).ok());
    let floored = floors
        .iter()
        .fold(0u64, |sum, floor| sum.saturating_add(floor.capacity));
    let prepay = match (prepay_lifetime_ns, pool_interval_ns) {
        (Some(lifetime_ns), Some(pool_interval_ns)) => lifetime_ns.div_ceil(pool_interval_ns),
        _ => 0,
    };
    Ok(BucketSplit {
        floors,
        pool_whole: capacity.saturating_sub(floored),
        pool_interval_ns,
        prepay,
    })
}

/// The longest GCRA period (seconds) whose nanoseconds a double holds exactly (`2^53` ns),
/// so that the emission interval's float division is of exact operands.
pub const MAX_EXACT_GCRA_PERIOD_S: u64 = 9_007_199;

/// The units a GCRA rate chosen by [`gcra_rate`] aims for per period: its count is rounded
/// down, so at least this many keep the rate within 0.1 % of the part's when they fit.
const GCRA_PRECISION: u64 = 1_000;

/// A GCRA rate of `count` per `period` seconds whose emission interval
/// (`trunc(period·1e9/count)`, as `crate::gcra::emission_interval_ns` computes it) is at
/// least `interval_ns`: the period is `period_s` times the smallest factor giving a count of
/// at least 1000 (within [`MAX_EXACT_GCRA_PERIOD_S`]), and the count `⌊period·1e9/interval⌋`
/// (`None`: below 1 even at the longest period).
///
/// The real quotient `period·1e9/count` is at least `interval_ns`, an integer, and the
/// operands are exact doubles, so its rounding to the nearest double and the truncation never
/// fall below it.
pub fn gcra_rate(interval_ns: u64, period_s: u64) -> Option<(u64, u64)> {
    if interval_ns == 0 || period_s == 0 || period_s > MAX_EXACT_GCRA_PERIOD_S {
        return None;
    }
    // The factor for a count of at least GCRA_PRECISION: ⌈precision·interval/(period·1e9)⌉.
    let wanted = u128::from(GCRA_PRECISION).checked_mul(u128::from(interval_ns))?;
    let period_ns = u128::from(period_s).checked_mul(1_000_000_000)?;
    let factor = wanted.div_ceil(period_ns).max(1);
    let longest = u128::from(MAX_EXACT_GCRA_PERIOD_S.checked_div(period_s)?);
    let period = u128::from(period_s).checked_mul(factor.min(longest))?;
    let count = period
        .checked_mul(1_000_000_000)?
        .checked_div(u128::from(interval_ns))?;
    let count = u64::try_from(count).ok().filter(|count| *count > 0)?;
    Some((count, u64::try_from(period).ok()?))
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    clippy::unwrap_used,
    clippy::indexing_slicing
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use proptest::test_runner::TestCaseError;

    fn regions(weights: &[u64], floor_percent: u64, drift_ppm: u64) -> Regions<'_> {
        Regions {
            weights,
            floor_percent,
            drift_ppm,
        }
    }

    /// Region 0's share of a window limit.
    fn window_share(limit: u64, r: &Regions<'_>) -> Result<WindowShare, SplitError> {
        split_window(limit, r)?.share(0)
    }

    /// Region 0's share of a bucket.
    fn bucket_share(
        capacity: u64,
        interval_ns: u64,
        lifetime_ns: Option<u64>,
        r: &Regions<'_>,
    ) -> Result<BucketShare, SplitError> {
        split_bucket(capacity, interval_ns, lifetime_ns, r)?.share(0)
    }

    #[test]
    fn a_bucket_splits_as_the_docs_say() {
        // 100 tokens at 10/s (one per 100 ms), weights 2:1:1, f = 50 %, T = 1.25 s.
        let share = bucket_share(
            100,
            100_000_000,
            Some(1_250_000_000),
            &regions(&[2, 1, 1], 50, 0),
        )
        .unwrap();
        // Floors 25, 12, 12; rates 2.5, 1.25, 1.25 per s; the pool 51 at 5/s less ⌈5·1.25⌉.
        assert_eq!(share.floor_capacity, 25);
        assert_eq!(share.floor_interval_ns, 400_000_000);
        assert_eq!(share.pool_interval_ns, 200_000_000);
        assert_eq!(share.prepay, 7);
        assert_eq!(share.pool_capacity, 51 - 7);
        let drifting =
            bucket_share(100, 100_000_000, None, &regions(&[2, 1, 1], 50, 1_000)).unwrap();
        assert_eq!(drifting.floor_interval_ns, 400_400_000, "derated by 1 + ρ");
        assert_eq!(
            (drifting.pool_capacity, drifting.prepay),
            (51, 0),
            "carryover"
        );
    }

    #[test]
    fn every_refusal() {
        let r = regions(&[1, 1], 50, 0);
        assert_eq!(window_share(3, &r), Err(SplitError::FloorCapacityZero));
        assert_eq!(
            bucket_share(3, 1, None, &r),
            Err(SplitError::FloorCapacityZero)
        );
        assert_eq!(
            bucket_share(10, 1, None, &regions(&[1, 1], 0, 0)),
            Err(SplitError::FloorCapacityZero)
        );
        assert_eq!(
            bucket_share(10, 1_000, None, &regions(&[1, 1], 100, 0)),
            Err(SplitError::PoolRateZero)
        );
        // 10 at one per 100 ms; the pool 6 at 5/s; T = 2 s pre-pays 10.
        assert_eq!(
            bucket_share(10, 100_000_000, Some(2_000_000_000), &r),
            Err(SplitError::PrePayEatsPool {
                prepay: 10,
                pool: 6
            })
        );
        assert_eq!(
            split_window(10, &regions(&[], 50, 0)),
            Err(SplitError::Invalid)
        );
        assert_eq!(
            split_window(10, &regions(&[0, 1], 50, 0)),
            Err(SplitError::Invalid)
        );
        assert_eq!(
            split_window(10, &r).and_then(|split| split.share(2)),
            Err(SplitError::Invalid)
        );
    }

    #[test]
    fn a_split_refused_to_a_region_still_gives_every_part() {
        // f = 0: no floors, the pool the whole bucket at the whole rate.
        let pooled =
            split_bucket(10, 100_000_000, Some(400_000_000), &regions(&[1, 1], 0, 0)).unwrap();
        let no_floor = BucketFloor {
            capacity: 0,
            interval_ns: None,
        };
        assert_eq!(pooled.floors, [no_floor, no_floor]);
        assert_eq!(
            (
                pooled.pool_capacity(),
                pooled.pool_interval_ns,
                pooled.prepay
            ),
            (Some(6), Some(100_000_000), 4)
        );
        // A region whose floor rounds to 0 keeps its place; its rate is still reserved.
        let small = split_window(3, &regions(&[2, 1], 50, 0)).unwrap();
        assert_eq!((small.floors.as_slice(), small.pool), (&[1, 0][..], 2));
        // The pre-pay eats the pool: no pool left to lease.
        let eaten = split_bucket(
            10,
            100_000_000,
            Some(2_000_000_000),
            &regions(&[1, 1], 50, 0),
        )
        .unwrap();
        assert_eq!(
            (eaten.pool_whole, eaten.prepay, eaten.pool_capacity()),
            (6, 10, None)
        );
    }

    #[test]
    fn a_gcra_rate_keeps_the_interval_at_least_the_target() {
        // 2.5 a second: 1000 per 400 s.
        assert_eq!(gcra_rate(400_000_000, 1), Some((1_000, 400)));
        assert_eq!(gcra_rate(1_000_000, 1), Some((1_000, 1)));
        // One a year is no rate within 2^53 ns.
        assert_eq!(gcra_rate(31_536_000_000_000_000, 1), None);
        for (interval_ns, period_s) in [(333_333_334, 1), (7, 3_600), (86_400_000_000_000, 86_400)]
        {
            let (count, period_s) = gcra_rate(interval_ns, period_s).unwrap();
            let real = crate::gcra::emission_interval_ns(count as i64, period_s as i64).unwrap();
            assert!(
                real as u64 >= interval_ns,
                "{interval_ns} {period_s}: {real}"
            );
        }
    }

    /// `Σ I/J_i + I/I_p ≤ 1` exactly (every region's floor interval `J_i`, the pool's
    /// `I_p`), by cross-multiplying (`None`: the products overflow, the case is skipped).
    fn rates_fit(interval_ns: u64, floors: &[u128], pool: u64) -> Option<bool> {
        let mut denominators: Vec<u128> = floors.to_vec();
        denominators.push(u128::from(pool));
        let product = denominators
            .iter()
            .try_fold(1u128, |acc, d| acc.checked_mul(*d))?;
        let mut sum: u128 = 0;
        for d in &denominators {
            sum = sum.checked_add((product / d).checked_mul(u128::from(interval_ns))?)?;
        }
        Some(sum <= product)
    }

    /// What [`holds`] checked of a bucket split.
    #[derive(Debug, PartialEq, Eq)]
    enum Checked {
        /// The split refused.
        Refused,
        /// Split, every property held; the rates compared exactly (`false`: the exact
        /// comparison's products overflow u128, the rest checked).
        Split { rates: bool },
    }

    /// Every property of the window and bucket splits of one case: the parts never add up
    /// to more than the whole, the floor derated, the pre-pay covering `T`.
    fn holds(
        capacity: u64,
        interval_ns: u64,
        lifetime_ns: Option<u64>,
        r: &Regions<'_>,
        own: usize,
    ) -> Result<Checked, TestCaseError> {
        let weights = r.weights;
        let window = split_window(capacity, r).unwrap();
        prop_assert_eq!(window.floors.len(), weights.len());
        prop_assert!(window.floors.iter().sum::<u64>() + window.pool <= capacity);
        if let Ok(share) = window.share(own) {
            prop_assert!(share.floor >= 1);
        }
        let Ok(share) =
            split_bucket(capacity, interval_ns, lifetime_ns, r).and_then(|split| split.share(own))
        else {
            return Ok(Checked::Refused);
        };
        let total: u128 = weights.iter().map(|w| u128::from(*w)).sum();
        let floors: Vec<u128> = weights
            .iter()
            .map(|w| r.floor_interval(interval_ns, *w, total).unwrap())
            .collect();
        let capacities: u64 = weights
            .iter()
            .map(|w| r.floor_part(capacity, *w, total))
            .sum();
        prop_assert!(capacities + share.pool_capacity + share.prepay <= capacity);
        prop_assert!(share.pool_capacity >= 1 && share.floor_capacity >= 1);
        // The floor's interval, derated, lasts at least the undrifted one × (1 + ρ).
        prop_assert!(
            u128::from(share.floor_interval_ns) * PPM
                >= floors[own] * (PPM + u128::from(r.drift_ppm))
        );
        // Each floor's interval is at least the exact one: J·f·w ≥ I·100·W.
        for (w, j) in weights.iter().zip(&floors) {
            prop_assert!(
                j * u128::from(r.floor_percent) * u128::from(*w)
                    >= u128::from(interval_ns) * 100 * total
            );
        }
        let fit = rates_fit(interval_ns, &floors, share.pool_interval_ns);
        prop_assert!(
            fit != Some(false),
            "Σ floor rates + pool rate > the global rate"
        );
        // The pre-pay covers the pool's refill over T.
        if let Some(t) = lifetime_ns {
            prop_assert!(
                u128::from(share.prepay) * u128::from(share.pool_interval_ns) >= u128::from(t)
            );
        } else {
            prop_assert_eq!(share.prepay, 0);
        }
        Ok(Checked::Split {
            rates: fit.is_some(),
        })
    }

    /// A grid of small cases, every one checked and many of them split pre-paid with the
    /// rates compared exactly (so the properties are not vacuous).
    #[test]
    fn a_grid_of_splits_holds_and_is_not_vacuous() {
        let mut exact_prepaid = 0;
        for weights in [&[1u64][..], &[1, 1], &[2, 1, 1], &[70, 20, 10], &[3, 7]] {
            for own in 0..weights.len() {
                for floor_percent in [0, 1, 33, 50, 99, 100] {
                    for drift_ppm in [0, 1_000, 50_000] {
                        let r = Regions {
                            weights,
                            floor_percent,
                            drift_ppm,
                        };
                        for capacity in [1, 7, 100, 10_007] {
                            for interval_ns in [1, 3, 1_000, 999_983, 100_000_000] {
                                for intervals in [None, Some(0), Some(1), Some(3)] {
                                    let lifetime = intervals.map(|n: u64| n * interval_ns);
                                    let checked = holds(capacity, interval_ns, lifetime, &r, own)
                                        .unwrap_or_else(|error| panic!("{error}"));
                                    if lifetime.is_some()
                                        && checked == (Checked::Split { rates: true })
                                    {
                                        exact_prepaid += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(exact_prepaid > 1_000, "{exact_prepaid}");
    }

    proptest! {
        #[test]
        fn the_parts_never_exceed_the_whole(
            weights in proptest::collection::vec(1u64..1_000, 1..4),
            own in 0usize..3,
            floor_percent in 0u64..=100,
            drift_ppm in 0u64..100_000,
            capacity in 1u64..1_000_000,
            interval_ns in 1u64..10_000_000,
            lifetime_intervals in proptest::option::of(0u64..1_000),
        ) {
            let own = own % weights.len();
            let r = Regions { weights: &weights, floor_percent, drift_ppm };
            let lifetime_ns = lifetime_intervals.map(|n| n * interval_ns);
            holds(capacity, interval_ns, lifetime_ns, &r, own)?;
        }

        /// Small weights and intervals: the rates' exact comparison never overflows.
        #[test]
        fn the_rates_never_exceed_the_global_rate(
            weights in proptest::collection::vec(1u64..10, 1..4),
            own in 0usize..3,
            floor_percent in 1u64..=100,
            drift_ppm in 0u64..100_000,
            capacity in 1u64..10_000,
            interval_ns in 1u64..1_000_000,
        ) {
            let own = own % weights.len();
            let r = Regions { weights: &weights, floor_percent, drift_ppm };
            let checked = holds(capacity, interval_ns, None, &r, own)?;
            prop_assert!(checked != Checked::Split { rates: false }, "the exact comparison overflowed");
        }

        #[test]
        fn a_gcra_rate_never_shortens_the_interval(
            interval_ns in 1u64..100_000_000_000_000,
            period_s in 1u64..100_000,
        ) {
            if let Some((count, period_s)) = gcra_rate(interval_ns, period_s) {
                prop_assert!(period_s <= MAX_EXACT_GCRA_PERIOD_S);
                let real = crate::gcra::emission_interval_ns(
                    i64::try_from(count).unwrap(),
                    i64::try_from(period_s).unwrap(),
                ).unwrap();
                prop_assert!(u64::try_from(real).unwrap() >= interval_ns);
            }
        }
    }
}
