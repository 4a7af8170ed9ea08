//! The soak's limiters: every algorithm, several instances each (spread over the cluster's
//! slots by their hash tags), with parameters known to both the load generator (which builds
//! a policy for each) and the checker (which computes each one's bound), and each one's
//! fallback: most fail closed, some decide locally from their share, some fail open.

use std::time::Duration;

use redis_ratelimit_client::{Algorithm, Fallback, Lease, Limit, Policy, Rate};

/// One algorithm with its parameters, in units per second and milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `capacity` tokens, `per_s` a second.
    TokenBucket {
        capacity: u64,
        per_s: u64,
    },
    /// A burst of `max_burst + 1`, `count` per `period_ms`.
    Gcra {
        max_burst: u64,
        count: u64,
        period_ms: u64,
    },
    FixedWindow {
        limit: u64,
        window_ms: u64,
    },
    SlidingWindow {
        limit: u64,
        window_ms: u64,
    },
    SlidingLog {
        limit: u64,
        window_ms: u64,
    },
    /// At most `limit` held at once.
    Concurrency {
        limit: u64,
        ttl_ms: u64,
    },
}

/// A limiter of the soak: its name (also its policy's name and hash tag), shape, lease and
/// fallback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoakLimiter {
    pub name: String,
    pub shape: Shape,
    /// Units claimed per lease (`None`: every check goes to the store).
    pub lease: Option<u64>,
    /// What a check does when the store cannot decide.
    pub fallback: Fallback,
}

/// How long an admitted in-flight check holds its slot before releasing it.
pub const HOLD: Duration = Duration::from_millis(200);

/// The limiters that decide locally from their share when the store is out of reach, and
/// those that admit everything then; the others fail closed.
const LOCAL: [&str; 8] = [
    "tb0",
    "gcra0",
    "fixed1",
    "sliding0",
    "log0",
    "inflight0",
    "leased0",
    "tb4",
];
const OPEN: [&str; 3] = ["tb2", "sliding2", "log3"];

/// Every limiter of the soak.
pub fn limiters() -> Vec<SoakLimiter> {
    let mut all = Vec::new();
    let mut add = |prefix: &str, shapes: &[Shape], lease: Option<u64>| {
        for (index, shape) in shapes.iter().enumerate() {
            let name = format!("{prefix}{index}");
            let fallback = if LOCAL.contains(&name.as_str()) {
                Fallback::Local
            } else if OPEN.contains(&name.as_str()) {
                Fallback::Open
            } else {
                Fallback::Closed
            };
            all.push(SoakLimiter {
                name,
                shape: *shape,
                lease,
                fallback,
            });
        }
    };
    add(
        "tb",
        &[
            Shape::TokenBucket {
                capacity: 10,
                per_s: 5,
            },
            Shape::TokenBucket {
                capacity: 3,
                per_s: 10,
            },
            Shape::TokenBucket {
                capacity: 20,
                per_s: 2,
            },
            // Slow to refill: its key outlives the run by up to 30 s, for the replicas'
            // comparison after the traffic stops.
            Shape::TokenBucket {
                capacity: 90,
                per_s: 3,
            },
            // Busy: most of the soak's traffic.
            Shape::TokenBucket {
                capacity: 40,
                per_s: 50,
            },
        ],
        None,
    );
    add(
        "gcra",
        &[
            Shape::Gcra {
                max_burst: 4,
                count: 5,
                period_ms: 1000,
            },
            Shape::Gcra {
                max_burst: 0,
                count: 10,
                period_ms: 1000,
            },
        ],
        None,
    );
    add(
        "fixed",
        &[
            Shape::FixedWindow {
                limit: 10,
                window_ms: 2000,
            },
            Shape::FixedWindow {
                limit: 25,
                window_ms: 5000,
            },
            Shape::FixedWindow {
                limit: 60,
                window_ms: 1000,
            },
        ],
        None,
    );
    add(
        "sliding",
        &[
            Shape::SlidingWindow {
                limit: 10,
                window_ms: 2000,
            },
            Shape::SlidingWindow {
                limit: 25,
                window_ms: 5000,
            },
            Shape::SlidingWindow {
                limit: 60,
                window_ms: 1000,
            },
        ],
        None,
    );
    add(
        "log",
        &[
            Shape::SlidingLog {
                limit: 10,
                window_ms: 2000,
            },
            Shape::SlidingLog {
                limit: 20,
                window_ms: 3000,
            },
            Shape::SlidingLog {
                limit: 60,
                window_ms: 30_000,
            },
            Shape::SlidingLog {
                limit: 50,
                window_ms: 1000,
            },
        ],
        None,
    );
    add(
        "inflight",
        &[
            Shape::Concurrency {
                limit: 3,
                ttl_ms: 5000,
            },
            Shape::Concurrency {
                limit: 1,
                ttl_ms: 5000,
            },
        ],
        None,
    );
    add(
        "leased",
        &[
            Shape::TokenBucket {
                capacity: 30,
                per_s: 15,
            },
            Shape::TokenBucket {
                capacity: 10,
                per_s: 5,
            },
        ],
        Some(4),
    );
    all
}

impl SoakLimiter {
    /// The client library's algorithm for it.
    pub fn algorithm(&self) -> Result<Algorithm, String> {
        algorithm_of(self.shape).map_err(|error| format!("{}: {error}", self.name))
    }

    /// The key its policy checks.
    pub fn key(&self) -> String {
        format!("soak:{{{}}}", self.name)
    }

    /// Its policy: one limit on [`key`](Self::key), its fallback, a `timeout` per store
    /// call, no deny cache (every check reaches the store: more traffic under the faults).
    /// Its limit has `shape`: its own, or the parameters a planted bug puts instead
    /// ([`Plant::shape`](crate::plant::Plant::shape); the checker still holds it to the true
    /// ones).
    pub fn policy(&self, timeout: Duration, shape: Shape) -> Result<Policy, String> {
        let algorithm = algorithm_of(shape).map_err(|error| format!("{}: {error}", self.name))?;
        // The template escapes braces: the key is `soak:{<name>}`.
        let template = format!("soak:{{{{{}}}}}", self.name);
        let limit = Limit::new(&self.name, algorithm, &template).map_err(|e| e.to_string())?;
        let mut builder = Policy::builder(&self.name)
            .limit(limit)
            .fallback(self.fallback)
            .timeout(timeout)
            .deny_cache(false);
        if let Some(units) = self.lease {
            builder = builder.lease(Lease::new(units));
        }
        builder.build().map_err(|error| error.to_string())
    }

    /// The most units a client's leases hold at once (a claim grows to 4 × its units for a
    /// hot key), or 0 without leases.
    pub fn lease_max_units(&self) -> u64 {
        self.lease.map_or(0, |units| Lease::new(units).max_units)
    }

    /// Whether a check of it takes an in-flight slot.
    pub fn in_flight(&self) -> bool {
        matches!(self.shape, Shape::Concurrency { .. })
    }

    /// The costs a check may ask for (in-flight and leased checks ask for one unit).
    pub fn max_cost(&self) -> u64 {
        if self.in_flight() || self.lease.is_some() {
            1
        } else {
            2
        }
    }

    /// Its rate, the load the soak offers it at 1×: `units` per `per_ms` (for an in-flight
    /// limit, `limit` arrivals per [`HOLD`], which keeps `limit` slots busy).
    pub fn rate(&self) -> (u64, u64) {
        match self.shape {
            Shape::TokenBucket { per_s, .. } => (per_s, 1000),
            Shape::Gcra {
                count, period_ms, ..
            } => (count, period_ms),
            Shape::FixedWindow { limit, window_ms }
            | Shape::SlidingWindow { limit, window_ms }
            | Shape::SlidingLog { limit, window_ms } => (limit, window_ms),
            Shape::Concurrency { limit, .. } => {
                (limit, u64::try_from(HOLD.as_millis()).unwrap_or(u64::MAX))
            }
        }
    }
}

/// The client library's algorithm of `shape` (one unit per call).
pub fn algorithm_of(shape: Shape) -> Result<Algorithm, String> {
    let ms = Duration::from_millis;
    match shape {
        Shape::TokenBucket { capacity, per_s } => Algorithm::token_bucket_with_rate(
            capacity,
            Rate::per(per_s, Duration::from_secs(1)).map_err(|e| e.to_string())?,
        ),
        Shape::Gcra {
            max_burst,
            count,
            period_ms,
        } => Algorithm::gcra(max_burst, count, ms(period_ms)),
        Shape::FixedWindow { limit, window_ms } => Algorithm::fixed_window(limit, ms(window_ms)),
        Shape::SlidingWindow { limit, window_ms } => {
            Algorithm::sliding_window(limit, ms(window_ms))
        }
        Shape::SlidingLog { limit, window_ms } => Algorithm::sliding_log(limit, ms(window_ms)),
        Shape::Concurrency { limit, ttl_ms } => Algorithm::concurrency(limit, ms(ttl_ms)),
    }
    .map_err(|error| error.to_string())
}

/// The Sentinel test's one limiter: a counter that never runs out (a fixed window of a
/// billion an hour), so every admitted call is one increment the new primary must hold.
pub fn counter() -> Vec<SoakLimiter> {
    vec![SoakLimiter {
        name: "counter".into(),
        shape: Shape::FixedWindow {
            limit: COUNTER_LIMIT,
            window_ms: 3_600_000,
        },
        lease: None,
        fallback: Fallback::Closed,
    }]
}

/// The counter's limit.
pub const COUNTER_LIMIT: u64 = 1_000_000_000;
