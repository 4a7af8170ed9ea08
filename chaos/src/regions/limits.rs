//! The global limits of the regions run, split as `docs/regions.md` splits them: a fraction
//! `f` into static floors by region weight, the rest into home's pool (reduced by the
//! pre-pay `⌈r_p·T⌉` in the pre-paid mode), and the floor's arguments of `RL.REGIONAL`.

use std::time::Duration;

use redis_ratelimit_client::{Algorithm, Rate};

use crate::catalogue::Shape;

/// The word of an in-flight floor's words the load replaces with each call's holder.
pub const HOLDER: &str = "{holder}";

/// How a limit's pool is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Token bucket, GCRA: the pool's capacity less `⌈r_p·T⌉`; held to 0 over-admitted.
    PrePaid,
    /// Token bucket, GCRA: the pool keeps its capacity; held to `min(2·Σk, ⌈(1 − f)·r·T⌉)`.
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

    /// `⌊x·f·w_i/W⌋`.
    fn floor_part(&self, x: u64, region: usize) -> u64 {
        x * self.floor_percent * self.weights[region] / (100 * self.weight_total())
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
    /// The quota (a bucket's burst, a window's limit) and the rate per second of a
    /// refilling kind (0 for windows).
    fn quota_and_rate(&self) -> (u64, u64) {
        match self.shape {
            Shape::TokenBucket { capacity, per_s } => (capacity, per_s),
            Shape::Gcra {
                max_burst,
                count,
                period_ms,
            } => (max_burst + 1, count * 1000 / period_ms),
            Shape::FixedWindow { limit, .. }
            | Shape::SlidingWindow { limit, .. }
            | Shape::SlidingLog { limit, .. }
            | Shape::Concurrency { limit, .. } => (limit, 0),
        }
    }

    fn window(&self) -> Duration {
        match self.shape {
            Shape::FixedWindow { window_ms, .. }
            | Shape::SlidingWindow { window_ms, .. }
            | Shape::SlidingLog { window_ms, .. }
            | Shape::Concurrency {
                ttl_ms: window_ms, ..
            } => Duration::from_millis(window_ms),
            Shape::TokenBucket { .. } | Shape::Gcra { .. } => Duration::ZERO,
        }
    }

    /// Region `region`'s floor: (quota, rate per second).
    pub fn floor(&self, split: &Split, region: usize) -> (u64, u64) {
        let (quota, rate) = self.quota_and_rate();
        (
            split.floor_part(quota, region),
            split.floor_part(rate, region),
        )
    }

    /// `RL.REGIONAL`'s floor words for region `region` (the clocks are one host's: ρ = 0,
    /// so no derating).
    pub fn floor_words(&self, split: &Split, region: usize) -> Vec<String> {
        let (quota, rate) = self.floor(split, region);
        let window_s = format!("{}", self.window().as_secs_f64());
        match self.shape {
            Shape::TokenBucket { .. } => {
                vec!["TOKENBUCKET".into(), quota.to_string(), rate.to_string()]
            }
            Shape::Gcra { .. } => vec![
                "GCRA".into(),
                (quota - 1).to_string(),
                rate.to_string(),
                "1".into(),
            ],
            Shape::FixedWindow { .. } => vec!["FIXED".into(), quota.to_string(), window_s],
            Shape::SlidingWindow { .. } => vec!["SLIDING".into(), quota.to_string(), window_s],
            Shape::SlidingLog { .. } => vec!["SLIDINGLOG".into(), quota.to_string(), window_s],
            // The holder is each call's own: the load puts it in place of `HOLDER`.
            Shape::Concurrency { ttl_ms, .. } => vec![
                "CONCURRENCY".into(),
                quota.to_string(),
                HOLDER.into(),
                ttl_ms.to_string(),
            ],
        }
    }

    /// The pool: (quota, rate per second): what the floors do not get, less the pre-pay.
    pub fn pool(&self, split: &Split) -> (u64, u64) {
        let (quota, rate) = self.quota_and_rate();
        let floors: u64 = (0..3).map(|region| self.floor(split, region).0).sum();
        let floor_rates: u64 = (0..3).map(|region| self.floor(split, region).1).sum();
        let pool_rate = rate - floor_rates;
        let mut pool_quota = quota - floors;
        if self.mode == Mode::PrePaid {
            pool_quota -= self.prepay(split);
        }
        (pool_quota, pool_rate)
    }

    /// `⌈r_p·T⌉`.
    pub fn prepay(&self, split: &Split) -> u64 {
        let (_, rate) = self.quota_and_rate();
        let floor_rates: u64 = (0..3).map(|region| self.floor(split, region).1).sum();
        let lifetime_ms = u64::try_from(split.lifetime().as_millis()).unwrap_or(u64::MAX);
        ((rate - floor_rates) * lifetime_ms).div_ceil(1000)
    }

    /// The pool as the agent asks it for grants.
    pub fn pool_algorithm(&self, split: &Split) -> Algorithm {
        let (quota, rate) = self.pool(split);
        let built = match self.shape {
            Shape::TokenBucket { .. } => Rate::per_second(&rate.to_string())
                .and_then(|rate| Algorithm::token_bucket_with_rate(quota, rate)),
            Shape::Gcra { .. } => Algorithm::gcra(quota - 1, rate, Duration::from_secs(1)),
            Shape::FixedWindow { .. } => Algorithm::fixed_window(quota, self.window()),
            // The agent asks its slots for `T` whatever ttl the pool was given.
            Shape::Concurrency { .. } => Algorithm::concurrency(quota, self.window()),
            _ => {
                let window = if self.mode == Mode::LogWidened {
                    self.window() + split.lifetime()
                } else {
                    self.window()
                };
                Algorithm::sliding_log(quota, window)
            }
        };
        built.expect("the run's pools are valid limits")
    }

    /// What the checker allows beyond the global limit: `Some(0)` for the exact modes, the
    /// carryover's `min(2·Σk, ⌈(1 − f)·r·T⌉)`, `None` where no bound is claimed.
    pub fn allowed_excess(&self, split: &Split, lease_units: &[u64]) -> Option<u64> {
        match self.mode {
            Mode::PrePaid | Mode::HomeWindow | Mode::LogWidened | Mode::Holders => Some(0),
            Mode::LogAtGrant => None,
            Mode::Carryover => {
                let (_, rate) = self.quota_and_rate();
                let lifetime_ms = u64::try_from(split.lifetime().as_millis()).unwrap_or(u64::MAX);
                let refill =
                    (rate * (100 - split.floor_percent) * lifetime_ms).div_ceil(100 * 1000);
                Some(refill.min(2 * lease_units.iter().sum::<u64>()))
            }
        }
    }

    /// What a limiter of `(quota, rate)` of this kind surely admits over `run` under
    /// continuous demand: a refilling kind's burst plus its refill, a window kind's quota
    /// per whole window the run spans.
    pub fn supply(&self, (quota, rate): (u64, u64), run: Duration) -> u64 {
        let run_ms = u64::try_from(run.as_millis()).unwrap_or(u64::MAX);
        match self.shape {
            Shape::TokenBucket { .. } | Shape::Gcra { .. } => quota + rate * run_ms / 1000,
            _ => {
                let window_ms = u64::try_from(self.window().as_millis()).unwrap_or(1).max(1);
                quota * (run_ms / window_ms)
            }
        }
    }
}
