//! A global limit and its split: a fraction `f` into static floors by region weight, the rest
//! into a pool at home, each one of core's own quotas.

use redis_ratelimit_core::concurrency::{ConcurrencyParams, MAX_STORED_HOLDERS};
use redis_ratelimit_core::gcra::{GcraParams, emission_interval_ns};
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_core::sliding_log::{MAX_STORED_ENTRIES, SlidingLogParams};
use redis_ratelimit_core::token_bucket::TokenBucketParams;
use redis_ratelimit_core::window::WindowParams;

use crate::check::{Bound, span_limit};

/// Nanoseconds per second.
const NS_PER_S: u128 = 1_000_000_000;
/// Parts per million.
const PPM: u128 = 1_000_000;

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

/// The fraction `num / den` of the quota given to the floors (`num <= den`, `den >= 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fraction {
    pub num: u64,
    pub den: u64,
}

/// How the pool pays for leases outliving the instant they were granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The pool's capacity is reduced by `⌈r_p × T⌉` (0 over-admission).
    PrePaid,
    /// The pool keeps its full capacity (over-admission at most `min(R × 2k, ⌈r_p × T⌉)`).
    Carryover,
}

/// The quotas of one global limit across regions (each for a call of one unit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Region `i`'s floor (`None`: its share rounds to nothing), in the region's clock.
    pub floors: Vec<Option<Quota>>,
    /// The pool at home (`None`: nothing left to lease), in home's clock.
    pub pool: Option<Quota>,
    /// Units the pre-pay took from the pool's capacity (0 in carryover mode).
    pub prepaid_units: u64,
    /// Whether a lease ends at the end of home's current window (fixed window).
    pub window_us: Option<u64>,
}

/// Splits `limit`: `fraction` into floors by `weights`, derated for clock drift up to
/// `rho_ppm`; the rest into the pool, whose leases live `lease_us` (T).
pub fn split(
    limit: GlobalLimit,
    fraction: Fraction,
    weights: &[u64],
    rho_ppm: u64,
    mode: Mode,
    lease_us: u64,
) -> Split {
    let total_weight = u128::from(weights.iter().sum::<u64>().max(1));
    let (num, den) = (u128::from(fraction.num), u128::from(fraction.den.max(1)));
    let share = |quota: u64, weight: u64| {
        u64::try_from(u128::from(quota) * num * u128::from(weight) / (den * total_weight))
            .unwrap_or(0)
    };
    let rho = u128::from(rho_ppm);
    match limit {
        GlobalLimit::TokenBucket {
            capacity,
            per_second,
        } => {
            let rate = u128::from(per_second);
            let floors: Vec<Option<Quota>> = weights
                .iter()
                .map(|weight| {
                    let floor_capacity = share(capacity, *weight);
                    let floor_rate = rate * num * u128::from(*weight);
                    if floor_capacity == 0 || floor_rate == 0 {
                        return None;
                    }
                    // 1e9 × den × W / (rate × num × w), rounded up, then derated by 1 + ρ.
                    let interval = (NS_PER_S * den * total_weight).div_ceil(floor_rate);
                    let local = (interval * (PPM + rho)).div_ceil(PPM);
                    bucket(floor_capacity, local)
                })
                .collect();
            let floor_capacity: u64 = weights.iter().map(|w| share(capacity, *w)).sum();
            let pool_rate = rate * (den - num.min(den));
            let prepaid_units = match mode {
                Mode::PrePaid => {
                    u64::try_from((pool_rate * u128::from(lease_us)).div_ceil(den * PPM))
                        .unwrap_or(u64::MAX)
                }
                Mode::Carryover => 0,
            };
            let pool_capacity = capacity
                .saturating_sub(floor_capacity)
                .saturating_sub(prepaid_units);
            let pool = (pool_rate > 0 && pool_capacity > 0)
                .then(|| bucket(pool_capacity, (NS_PER_S * den).div_ceil(pool_rate)))
                .flatten();
            Split {
                floors,
                pool,
                prepaid_units,
                window_us: None,
            }
        }
        GlobalLimit::Gcra {
            max_burst,
            count,
            period_s,
        } => {
            let burst = max_burst + 1;
            let interval = u128::from(gcra_interval_ns(count, period_s));
            let floors: Vec<Option<Quota>> = weights
                .iter()
                .map(|weight| {
                    let floor_burst = share(burst, *weight);
                    let floor_rate = num * u128::from(*weight);
                    if floor_burst == 0 || floor_rate == 0 {
                        return None;
                    }
                    let exact = (interval * den * total_weight).div_ceil(floor_rate);
                    cell(floor_burst, (exact * (PPM + rho)).div_ceil(PPM))
                })
                .collect();
            let floor_burst: u64 = weights.iter().map(|w| share(burst, *w)).sum();
            let pool_share = den - num.min(den);
            let prepaid_units = match mode {
                Mode::PrePaid => u64::try_from(
                    (u128::from(lease_us) * 1000 * pool_share).div_ceil(interval * den),
                )
                .unwrap_or(u64::MAX),
                Mode::Carryover => 0,
            };
            let pool_burst = burst
                .saturating_sub(floor_burst)
                .saturating_sub(prepaid_units);
            let pool = (pool_share > 0 && pool_burst > 0)
                .then(|| cell(pool_burst, (interval * den).div_ceil(pool_share)))
                .flatten();
            Split {
                floors,
                pool,
                prepaid_units,
                window_us: None,
            }
        }
        GlobalLimit::FixedWindow { limit, window_us } => {
            let floors = weights
                .iter()
                .map(|weight| fixed(share(limit, *weight), window_us))
                .collect();
            let floor_limit: u64 = weights.iter().map(|w| share(limit, *w)).sum();
            Split {
                floors,
                pool: fixed(limit - floor_limit, window_us),
                prepaid_units: 0,
                window_us: Some(window_us),
            }
        }
        GlobalLimit::SlidingWindow { limit, window_us } => {
            // A span of `W` home µs lasts at most `⌈W × (1 + ρ)⌉` on a region's clock, so a
            // floor's span bound covers it with its window derated to that.
            let local_window = derated(window_us, rho);
            let floors = weights
                .iter()
                .map(|weight| estimator(share(limit, *weight), local_window))
                .collect();
            let floor_limit: u64 = weights.iter().map(|w| share(limit, *w)).sum();
            // The pool is on home's clock; its leases end with the home window they were
            // granted in, as a fixed window's do.
            Split {
                floors,
                pool: estimator(limit - floor_limit, window_us),
                prepaid_units: 0,
                window_us: Some(window_us),
            }
        }
        GlobalLimit::SlidingLog { limit, window_us } => {
            let local_window = derated(window_us, rho);
            let floors = weights
                .iter()
                .map(|weight| log(share(limit, *weight), local_window))
                .collect();
            let floor_limit: u64 = weights.iter().map(|w| share(limit, *w)).sum();
            // A lease's entries are stamped at its expiry: an entry that counts from its
            // grant until `expiry + W` is an entry stamped at the grant in a window `W + T`.
            let pool_window = match mode {
                Mode::PrePaid => window_us + lease_us,
                Mode::Carryover => window_us,
            };
            Split {
                floors,
                pool: log(limit - floor_limit, pool_window),
                prepaid_units: 0,
                window_us: None,
            }
        }
        GlobalLimit::InFlight { limit, hold_us } => {
            // A floor's holder must outlive its call on the region's clock.
            let local_hold = derated(hold_us, rho);
            let floors = weights
                .iter()
                .map(|weight| slots(share(limit, *weight), local_hold))
                .collect();
            let floor_limit: u64 = weights.iter().map(|w| share(limit, *w)).sum();
            // Each leased slot is a holder of the pool that lives as long as the lease.
            Split {
                floors,
                pool: slots(limit - floor_limit, lease_us),
                prepaid_units: 0,
                window_us: None,
            }
        }
    }
}

fn slots(limit: u64, ttl_us: u64) -> Option<Quota> {
    (limit > 0)
        .then(|| {
            ConcurrencyParams::new(limit, ttl_us, MAX_STORED_HOLDERS)
                .ok()
                .map(|params| Quota::Concurrency(Box::new(params)))
        })
        .flatten()
}

fn bucket(capacity: u64, interval_ns: u128) -> Option<Quota> {
    let interval_ns = u64::try_from(interval_ns).ok()?;
    TokenBucketParams::from_interval(capacity, interval_ns, 1)
        .ok()
        .map(Quota::TokenBucket)
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

/// A GCRA of bursts of `burst` and an emission interval of at least `interval_ns`: a
/// million units per a whole number of seconds makes its interval a whole number of µs,
/// rounded up.
fn cell(burst: u64, interval_ns: u128) -> Option<Quota> {
    let period_s = i64::try_from(interval_ns.div_ceil(1000)).ok()?;
    let max_burst = i64::try_from(burst - 1).ok()?;
    GcraParams::new(max_burst, 1_000_000, period_s, 1)
        .ok()
        .map(|params| Quota::Gcra(Box::new(params)))
}

fn fixed(limit: u64, window_us: u64) -> Option<Quota> {
    (limit > 0)
        .then(|| {
            WindowParams::new(limit, window_us, 1)
                .ok()
                .map(Quota::FixedWindow)
        })
        .flatten()
}

/// `duration_us` derated for a drift of `rho` ppm: `⌈duration × (1 + ρ)⌉`.
fn derated(duration_us: u64, rho: u128) -> u64 {
    u64::try_from((u128::from(duration_us) * (PPM + rho)).div_ceil(PPM)).unwrap_or(u64::MAX)
}

fn estimator(limit: u64, window_us: u64) -> Option<Quota> {
    (limit > 0)
        .then(|| {
            WindowParams::new(limit, window_us, 1)
                .ok()
                .map(Quota::SlidingWindow)
        })
        .flatten()
}

/// The regional bound of a sliding window split over any span of `W` home µs: the sum of
/// what each floor's and the pool's own estimator admits in one span of its window
/// ([`span_limit`]; a span of `W` home µs is within one of a floor's derated window).
///
/// At most the global estimator's `span_limit(L, W)` when no window is derated (ρ = 0: the
/// ceilings `⌈2·L_i/W⌉` add up to at least `⌈2·L/W⌉`) and whenever `2·L ≤ W` (every part
/// then pays a ceiling of 1); otherwise possibly above it by [`regional_span_excess`].
pub fn regional_span_limit(split: &Split) -> u64 {
    split
        .floors
        .iter()
        .chain(std::iter::once(&split.pool))
        .flatten()
        .map(|quota| match quota {
            Quota::SlidingWindow(params) => span_limit(params.limit(), params.window_us()),
            _ => 0,
        })
        .sum()
}

/// How far [`regional_span_limit`] exceeds the global estimator's span bound (0 unless the
/// floors' derated windows round their ceilings below the global's: `⌈2L/W⌉ − Σ⌈2L_i/W_i⌉
/// − ⌈2L_p/W⌉` when positive, which needs `2L > W`).
pub fn regional_span_excess(limit: GlobalLimit, split: &Split) -> u64 {
    match limit.bound() {
        Bound::Estimator { limit, window_us } => {
            regional_span_limit(split).saturating_sub(span_limit(limit, window_us))
        }
        _ => 0,
    }
}

fn log(limit: u64, window_us: u64) -> Option<Quota> {
    (limit > 0)
        .then(|| {
            SlidingLogParams::new(limit, window_us, 1, MAX_STORED_ENTRIES)
                .ok()
                .map(Quota::SlidingLog)
        })
        .flatten()
}
