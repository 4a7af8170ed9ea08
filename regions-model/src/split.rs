//! A global limit split across regions by core's own split (`core::regional::parts`, the
//! arithmetic the service's region mode runs): a fraction `f` into static floors by region
//! weight, derated for clock drift, the rest into a pool at home, pre-paid or carryover; the
//! pool as the lease agent asks it.

use redis_ratelimit_core::concurrency::{ConcurrencyParams, MAX_STORED_HOLDERS};
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_core::regional::parts::split_quota;
use redis_ratelimit_core::regional::split::Regions;
use redis_ratelimit_core::sliding_log::{MAX_STORED_ENTRIES, SlidingLogParams};

use crate::check::{Bound, span_limit};
use crate::limit::GlobalLimit;

/// How the pool pays for leases outliving the instant they were granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The pool's capacity is reduced by `⌈r_p × T⌉` (0 over-admission); a sliding log pool
    /// counts a lease's entries as stamped at its end (its window lengthened by `T`).
    PrePaid,
    /// The pool keeps its full capacity (over-admission at most `min(R × 2k, ⌈r_p × T⌉)`);
    /// a sliding log pool counts a lease's entries for `W` from the grant.
    Carryover,
}

/// The quotas of one global limit across regions (each for a call of one unit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Region `i`'s floor (`None`: its share rounds to nothing), in the region's clock.
    pub floors: Vec<Option<Quota>>,
    /// The pool at home as the agent asks it (`None`: nothing left to lease), in home's
    /// clock.
    pub pool: Option<Quota>,
    /// Units the pre-pay took from the pool's capacity (0 in carryover mode).
    pub prepaid_units: u64,
    /// Whether a lease ends at the end of home's current window (fixed and sliding window).
    pub window_us: Option<u64>,
    /// A bucket pool's refill interval (token bucket, GCRA; `None`: other kinds, or a pool
    /// without rate).
    pub pool_interval_ns: Option<u64>,
}

impl Split {
    /// `⌈r_p × T⌉`: the most a bucket pool refills in a lease's lifetime of `lease_us` (0
    /// for other kinds): the pre-pay, and the carryover's bound.
    pub fn pool_refill_units(&self, lease_us: u64) -> u64 {
        self.pool_interval_ns
            .map_or(0, |interval_ns| (lease_us * 1000).div_ceil(interval_ns))
    }
}

/// Splits `limit` by core's split: `floor_percent` into floors by `weights`, derated for
/// clock drift up to `rho_ppm`; the rest into the pool, whose leases live `lease_us` (T).
/// The pool is the one the agent asks: a sliding log pool, pre-paid, with its window
/// lengthened by `T` (its leases' entries as if stamped at their end); an in-flight pool's
/// slots as holders living `T`.
pub fn split(
    limit: GlobalLimit,
    floor_percent: u64,
    weights: &[u64],
    rho_ppm: u64,
    mode: Mode,
    lease_us: u64,
) -> Split {
    let regions = Regions {
        weights,
        floor_percent,
        drift_ppm: rho_ppm,
    };
    let prepay_lifetime_ns = (mode == Mode::PrePaid).then_some(lease_us * 1000);
    let parts = split_quota(&limit.quota(), &regions, prepay_lifetime_ns)
        .expect("the scenario's split is valid");
    let pool = match parts.pool {
        Some(Quota::SlidingLog(pool)) if mode == Mode::PrePaid => SlidingLogParams::new(
            pool.limit(),
            pool.window_us() + lease_us,
            1,
            MAX_STORED_ENTRIES,
        )
        .ok()
        .map(Quota::SlidingLog),
        Some(Quota::Concurrency(pool)) => {
            ConcurrencyParams::new(pool.limit(), lease_us, MAX_STORED_HOLDERS)
                .ok()
                .map(|params| Quota::Concurrency(Box::new(params)))
        }
        pool => pool,
    };
    let window_us = match limit {
        GlobalLimit::FixedWindow { window_us, .. }
        | GlobalLimit::SlidingWindow { window_us, .. } => Some(window_us),
        _ => None,
    };
    Split {
        floors: parts.floors,
        pool,
        prepaid_units: parts.prepay,
        window_us,
        pool_interval_ns: parts.pool_interval_ns,
    }
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
