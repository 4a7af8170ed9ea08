//! The global limits of the regions run, split by core's split (`core::regional::parts`,
//! the arithmetic the service's region mode and the model checker run): a fraction `f` into
//! static floors by region weight, the rest into home's pool (reduced by the pre-pay
//! `⌈r_p·T⌉` in the pre-paid mode), and the floor's arguments of `RL.REGIONAL`.

use std::time::Duration;

use redis_ratelimit_client::Algorithm;
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_core::regional::parts::{Parts, split_quota};
use redis_ratelimit_core::regional::split::Regions;
use redis_ratelimit_wire::encode::{self, Args};

use crate::catalogue::{Shape, algorithm_of};

/// The word of an in-flight floor's words the load replaces with each call's holder.
pub const HOLDER: &str = "{holder}";

/// How a limit's pool is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Token bucket, GCRA: the pool's capacity less `⌈r_p·T⌉`; held to 0 over-admitted.
    PrePaid,
    /// Token bucket, GCRA: the pool keeps its capacity; held to `min(2·Σk, ⌈r_p·T⌉)` (`r_p` the pool's rate).
    Carryover,
    /// Fixed window: leases end with the home window they were granted in; held to 0.
    HomeWindow,
    /// Sliding log, pool a log of window `W` stamped at the grant (leases are not stamped
    /// at their expiry yet): no bound is claimed, the figure is reported.
    LogAtGrant,
    /// In-flight: pooled slots leased as holders of home's pool living `T`, a leased slot
    /// given only to a call ending by the lease's end; held to 0 holders beyond `L`.
    Holders,
    /// Sliding log, pool a log of window `W + T` stamped at the grant: every leased unit
    /// counted for at least `W` after it was spent, the model's stand-in for entries stamped
    /// at the lease's expiry; held to 0.
    LogWidened,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::PrePaid => "pre-paid",
            Mode::Carryover => "carryover",
            Mode::HomeWindow => "leases end with the home window",
            Mode::LogAtGrant => "pool window W, stamped at the grant",
            Mode::LogWidened => "pool window W + T, stamped at the grant",
            Mode::Holders => "slots leased as pool holders living T",
        }
    }
}

/// The run's constants: region weights, `f`, `P`, `a`.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    /// Region weights (`w_i`), hot region first.
    pub weights: [u64; 3],
    /// `f` as a percentage.
    pub floor_percent: u64,
    pub period: Duration,
    pub margin: Duration,
}

impl Split {
    pub fn weight_total(&self) -> u64 {
        self.weights.iter().sum()
    }

    /// `T = P + a`.
    pub fn lifetime(&self) -> Duration {
        self.period + self.margin
    }

    /// The split's view of the regions: the clocks are one host's, `ρ = 0` (no derating).
    fn regions(&self) -> Regions<'_> {
        Regions {
            weights: &self.weights,
            floor_percent: self.floor_percent,
            drift_ppm: 0,
        }
    }
}

/// One global limit of the run.
#[derive(Clone, Debug)]
pub struct GlobalLimit {
    /// Its name: the keys' prefix.
    pub name: &'static str,
    /// The global limit, as the checker holds the merged log to it.
    pub shape: Shape,
    pub mode: Mode,
}

/// The run's limits: every algorithm of the model, both modes where they differ. Quotas of
/// 80 per 2 s (or 80 at 40/s), so that a region's floor is whole; an in-flight limit of 20
/// slots, each call holding its slot 300 ms (never released: its holder expires), so the
/// offered load keeps about 24 calls in flight, the hot region 17 beyond its floor of 7.
pub fn limits() -> Vec<GlobalLimit> {
    let bucket = Shape::TokenBucket {
        capacity: 80,
        per_s: 40,
    };
    let gcra = Shape::Gcra {
        max_burst: 79,
        count: 40,
        period_ms: 1000,
    };
    let fixed = Shape::FixedWindow {
        limit: 80,
        window_ms: 2000,
    };
    let log = Shape::SlidingLog {
        limit: 80,
        window_ms: 2000,
    };
    vec![
        GlobalLimit {
            name: "tb-prepaid",
            shape: bucket,
            mode: Mode::PrePaid,
        },
        GlobalLimit {
            name: "tb-carryover",
            shape: bucket,
            mode: Mode::Carryover,
        },
        GlobalLimit {
            name: "gcra-prepaid",
            shape: gcra,
            mode: Mode::PrePaid,
        },
        GlobalLimit {
            name: "gcra-carryover",
            shape: gcra,
            mode: Mode::Carryover,
        },
        GlobalLimit {
            name: "fixed",
            shape: fixed,
            mode: Mode::HomeWindow,
        },
        GlobalLimit {
            name: "slog-grant",
            shape: log,
            mode: Mode::LogAtGrant,
        },
        GlobalLimit {
            name: "slog-widened",
            shape: log,
            mode: Mode::LogWidened,
        },
        GlobalLimit {
            name: "inflight",
            shape: Shape::Concurrency {
                limit: 20,
                ttl_ms: 300,
            },
            mode: Mode::Holders,
        },
    ]
}

impl GlobalLimit {
    /// The limit split by core (`None` in the lease lifetime: carryover, or a window kind).
    pub fn parts(&self, split: &Split) -> Parts {
        let global = algorithm_of(self.shape).expect("the run's limits are valid");
        let prepay_lifetime_ns = (self.mode == Mode::PrePaid)
            .then(|| u64::try_from(split.lifetime().as_nanos()).unwrap_or(u64::MAX));
        split_quota(global.as_quota(), &split.regions(), prepay_lifetime_ns)
            .expect("the run's split is valid")
    }

    /// Region `region`'s floor (the run's quotas give every region one).
    pub fn floor(&self, split: &Split, region: usize) -> Quota {
        self.parts(split)
            .floors
            .swap_remove(region)
            .expect("the run's floors are whole")
    }

    /// Home's pool: what the floors do not get, less the pre-pay.
    pub fn pool(&self, split: &Split) -> Quota {
        self.parts(split).pool.expect("the run's pools are whole")
    }

    /// `RL.REGIONAL`'s floor words for region `region`: its algorithm and its parameters as
    /// the module takes them (an in-flight floor's holder the word [`HOLDER`]).
    pub fn floor_words(&self, split: &Split, region: usize) -> Vec<String> {
        let floor = self.floor(split, region);
        let mut words = Args::default();
        encode::params(&floor, &mut words);
        let mut words: Vec<String> =
            std::iter::once(floor.kind().command_name().unwrap_or_default().as_bytes())
                .chain(words.iter())
                .map(|word| String::from_utf8_lossy(word).into_owned())
                .collect();
        // The holder is each call's own: the load puts it in place of `HOLDER`.
        if matches!(floor, Quota::Concurrency(_)) {
            words.insert(2, HOLDER.into());
        }
        words
    }

    /// The pool as the agent asks it for grants (a sliding log's window lengthened by `T`
    /// in [`Mode::LogWidened`]; an in-flight pool's slots are asked for `T` by the agent
    /// whatever ttl the pool has).
    pub fn pool_algorithm(&self, split: &Split) -> Algorithm {
        let pool = match self.pool(split) {
            Quota::SlidingLog(log) if self.mode == Mode::LogWidened => {
                let window = Duration::from_micros(log.window_us()) + split.lifetime();
                return Algorithm::sliding_log(log.limit(), window)
                    .expect("the run's pools are valid limits");
            }
            pool => pool,
        };
        let mut words = Args::default();
        encode::params(&pool, &mut words);
        let words: Vec<String> = words
            .iter()
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        Algorithm::from_arguments(pool.kind(), &words).expect("the run's pools are valid limits")
    }

    /// What the checker allows beyond the global limit: `Some(0)` for the exact modes, the
    /// carryover's `min(2·Σk, ⌈r_p·T⌉)` (`r_p` the pool's rate), `None` where no bound is
    /// claimed.
    pub fn allowed_excess(&self, split: &Split, lease_units: &[u64]) -> Option<u64> {
        match self.mode {
            Mode::PrePaid | Mode::HomeWindow | Mode::LogWidened | Mode::Holders => Some(0),
            Mode::LogAtGrant => None,
            Mode::Carryover => {
                let lifetime_ns = u64::try_from(split.lifetime().as_nanos()).unwrap_or(u64::MAX);
                let refill = self
                    .parts(split)
                    .pool_interval_ns
                    .map_or(0, |interval_ns| lifetime_ns.div_ceil(interval_ns));
                Some(refill.min(2 * lease_units.iter().sum::<u64>()))
            }
        }
    }
}

/// One unit's refill interval of a refilling kind (token bucket, GCRA), ns.
fn refill_interval_ns(quota: &Quota) -> Option<u64> {
    match quota {
        Quota::TokenBucket(bucket) => Some(bucket.interval_ns()),
        Quota::Gcra(cell) => u64::try_from(cell.interval_ns()).ok(),
        _ => None,
    }
}

/// The window (a window kind's) or the hold (an in-flight limit's) a quota counts per.
fn window(quota: &Quota) -> Duration {
    match quota {
        Quota::FixedWindow(params) | Quota::SlidingWindow(params) => {
            Duration::from_micros(params.window_us())
        }
        Quota::SlidingLog(log) => Duration::from_micros(log.window_us()),
        Quota::Concurrency(slots) => Duration::from_micros(slots.ttl_us()),
        Quota::TokenBucket(_) | Quota::Gcra(_) => Duration::ZERO,
    }
}

/// The units a limiter of `quota` holds at once: a bucket's capacity or burst, a window's
/// limit, an in-flight limit's slots.
pub fn units(quota: &Quota) -> u64 {
    quota.advertised_quota()
}

/// What a refilling `quota` refills a second, to the nearest unit (0 for the window kinds):
/// for sizing the leases.
pub fn per_second(quota: &Quota) -> u64 {
    refill_interval_ns(quota).map_or(0, |interval_ns| {
        (1_000_000_000 + interval_ns / 2) / interval_ns.max(1)
    })
}

/// What a limiter of `quota` supplies over `length` pro rata: as [`supply`] for a
/// refilling kind, a window kind's quota per window counted in fractions of a window (the
/// spans a region could reach home are not whole windows).
pub fn supply_pro_rata(quota: &Quota, length: Duration) -> u64 {
    match refill_interval_ns(quota) {
        Some(_) => supply(quota, length),
        None => {
            let length_ms = u64::try_from(length.as_millis()).unwrap_or(u64::MAX);
            let window_ms = u64::try_from(window(quota).as_millis()).unwrap_or(1).max(1);
            units(quota) * length_ms / window_ms
        }
    }
}

/// What a limiter of `quota` surely admits over `run` under continuous demand: a refilling
/// kind's burst plus its refill, a window kind's quota per whole window the run spans.
pub fn supply(quota: &Quota, run: Duration) -> u64 {
    let run_ns = u64::try_from(run.as_nanos()).unwrap_or(u64::MAX);
    match refill_interval_ns(quota) {
        Some(interval_ns) => units(quota) + run_ns / interval_ns.max(1),
        None => {
            let window_ns = u64::try_from(window(quota).as_nanos()).unwrap_or(1).max(1);
            units(quota) * (run_ns / window_ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regions::SPLIT;

    fn limit(name: &str) -> GlobalLimit {
        limits()
            .into_iter()
            .find(|limit| limit.name == name)
            .unwrap()
    }

    /// The run's quotas of 80 (at 40/s, or per 2 s) and 20 slots, weights 70/20/10, `f` =
    /// 50 %, `T` = 900 ms: the floors 28, 8 and 4 (7, 2, 1 slots), the bucket floors at 14,
    /// 4 and 2 a second, the pool 40 at 20/s (10 slots), pre-paid `⌈20/s × 0.9 s⌉ = 18`.
    #[test]
    fn the_runs_limits_split_as_core_splits_them() {
        let words = |name: &str| {
            (0..3)
                .map(|region| limit(name).floor_words(&SPLIT, region).join(" "))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            words("tb-prepaid"),
            ["TOKENBUCKET 28 14", "TOKENBUCKET 8 4", "TOKENBUCKET 4 2"]
        );
        // A GCRA part's rate is a count per whole seconds, its interval never shorter than
        // the part's: 1007 per 72 s for 14 a second.
        assert_eq!(
            words("gcra-prepaid"),
            ["GCRA 27 1007 72", "GCRA 7 1000 250", "GCRA 3 1000 500"]
        );
        assert_eq!(
            words("fixed"),
            ["FIXED 28 2.000000", "FIXED 8 2.000000", "FIXED 4 2.000000"]
        );
        assert_eq!(
            words("inflight"),
            [
                "CONCURRENCY 7 {holder} 300",
                "CONCURRENCY 2 {holder} 300",
                "CONCURRENCY 1 {holder} 300"
            ]
        );
        let pool = |name: &str| limit(name).pool_algorithm(&SPLIT).wire_args().join(" ");
        assert_eq!(pool("tb-prepaid"), "22 20");
        assert_eq!(pool("tb-carryover"), "40 20");
        assert_eq!(pool("gcra-prepaid"), "21 1000 50");
        assert_eq!(pool("slog-grant"), "40 2.000000");
        assert_eq!(pool("slog-widened"), "40 2.900000");
        assert_eq!(pool("inflight"), "10 300");
        assert_eq!(limit("tb-prepaid").parts(&SPLIT).prepay, 18);
        // Carryover: `min(2·Σk, ⌈r_p·T⌉)`.
        assert_eq!(
            limit("tb-carryover").allowed_excess(&SPLIT, &[8, 40]),
            Some(18)
        );
        assert_eq!(
            limit("gcra-carryover").allowed_excess(&SPLIT, &[2, 3]),
            Some(10)
        );
        assert_eq!(
            limit("tb-prepaid").allowed_excess(&SPLIT, &[8, 40]),
            Some(0)
        );
    }
}
