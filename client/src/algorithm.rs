//! The algorithms a limit can use, their parameters, and the two forms they take: the
//! arguments the module's commands expect, and the integer parameters of the shared core
//! (the local fallback and the in-memory store run the very same arithmetic as the server).

use std::fmt;
use std::time::Duration;

use redis_ratelimit_core::concurrency::{ConcurrencyParams, MAX_STORED_HOLDERS};
use redis_ratelimit_core::gcra::GcraParams;
use redis_ratelimit_core::number::Decimal;
use redis_ratelimit_core::sliding_log::{MAX_STORED_ENTRIES, SlidingLogParams};
use redis_ratelimit_core::time::{MAX_WINDOW_US, MIN_WINDOW_US};
use redis_ratelimit_core::token_bucket::TokenBucketParams;
use redis_ratelimit_core::window::WindowParams;

/// Why an algorithm's parameters are refused (the same rules the module applies, checked
/// when the policy is built rather than on the first request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgorithmError(String);

impl fmt::Display for AlgorithmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AlgorithmError {}

fn refuse<T>(message: impl Into<String>) -> Result<T, AlgorithmError> {
    Err(AlgorithmError(message.into()))
}

/// A refill rate in tokens per second, kept as the exact decimal text sent to the server.
///
/// Keeping the text (not a float) means the server and the local fallback parse the same
/// number and derive the same integer refill interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rate {
    text: String,
    interval_ns: u64,
}

impl Rate {
    /// A rate written as a decimal (`"0.5"`, `"10"`, `"2.5e3"`), at most 1e9 per second.
    pub fn per_second(text: &str) -> Result<Self, AlgorithmError> {
        let Ok(decimal) = Decimal::parse_positive(text.as_bytes()) else {
            return refuse(format!("rate must be a positive decimal (got '{text}')"));
        };
        if decimal.exceeds_power_of_ten(9) {
            return refuse(format!(
                "rate must be at most 1e9 per second (got '{text}')"
            ));
        }
        match decimal.ceil_reciprocal(1_000_000_000) {
            Some(interval_ns) => Ok(Self {
                text: text.to_string(),
                interval_ns: interval_ns.max(1),
            }),
            None => refuse(format!("rate is too slow (got '{text}')")),
        }
    }

    /// `tokens` per `period`: one token every `ceil(period / tokens)` nanoseconds, exactly
    /// (100 per minute is one every 600 ms, 60 a day one every 1440 s).
    pub fn per(tokens: u64, period: Duration) -> Result<Self, AlgorithmError> {
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        match period_ns
            .checked_div(tokens)
            .map(|_| period_ns.div_ceil(tokens))
        {
            Some(interval_ns) if interval_ns > 0 => Self::every(interval_ns),
            _ => refuse(format!("{tokens} tokens per {period:?} is not a rate")),
        }
    }

    /// One token every `interval_ns` nanoseconds.
    ///
    /// The server takes a decimal rate and derives `ceil(1e9 / rate)` ns per token, and most
    /// intervals have no exact decimal rate (one token per 1440 s is 0.000694…/s). So this
    /// writes the shortest decimal whose derived interval is exactly `interval_ns`: the rate
    /// `1e9 / interval_ns` rounded up to as many digits as that takes.
    pub fn every(interval_ns: u64) -> Result<Self, AlgorithmError> {
        let wanted = u128::from(interval_ns.max(1));
        for decimals in 0..=30u32 {
            let Some(scaled) = 10u128
                .checked_pow(decimals)
                .and_then(|scale| scale.checked_mul(1_000_000_000))
            else {
                break;
            };
            let digits = scaled.div_ceil(wanted);
            let rate = Self::per_second(&decimal_text(digits, decimals))?;
            if u128::from(rate.interval_ns) == wanted {
                return Ok(rate);
            }
        }
        refuse(format!(
            "no decimal rate gives one token every {interval_ns} ns"
        ))
    }

    /// The decimal text sent to the server.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Nanoseconds to refill one token: `ceil(1e9 / rate)`, as the server computes it.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.text)
    }
}

/// One rate-limiting algorithm with its parameters (the cost is per call, not here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// `RL.TOKENBUCKET`: up to `capacity` tokens, refilled continuously at `rate`.
    TokenBucket {
        /// Largest burst, and the quota advertised in `RateLimit-Policy`.
        capacity: u64,
        /// Refill rate.
        rate: Rate,
    },
    /// `RL.SLIDING`: the sliding-window counter (approximate; see the module's README).
    SlidingWindow {
        /// Units per window.
        limit: u64,
        /// Window length (whole microseconds, at least 1 ms).
        window: Duration,
    },
    /// `RL.FIXED`: windows aligned to the Unix epoch.
    FixedWindow {
        /// Units per window.
        limit: u64,
        /// Window length (whole microseconds, at least 1 ms).
        window: Duration,
    },
    /// `RL.SLIDINGLOG`: the exact sliding window (memory grows with the limit).
    SlidingLog {
        /// Units per window (at most the server's `ratelimit.max-log-entries`).
        limit: u64,
        /// Window length (whole microseconds, at least 1 ms).
        window: Duration,
    },
    /// An in-flight limit (`RL.ACQUIRE` / `RL.RELEASE`): at most `limit` requests at once,
    /// each holding its slot until released or `ttl` after it was taken. A request takes one
    /// slot whatever its cost.
    Concurrency {
        /// Requests in flight at once.
        limit: u64,
        /// How long a slot is held if never released (a crashed caller's slot frees itself);
        /// whole milliseconds, at least 1 ms.
        ttl: Duration,
    },
    /// GCRA as `CL.THROTTLE`: `max_burst + 1` units at once, `count` per `period`.
    Gcra {
        /// Burst beyond the first unit.
        max_burst: u64,
        /// Units per period.
        count: u64,
        /// The period (whole seconds, as `CL.THROTTLE` takes it).
        period: Duration,
    },
}

impl Algorithm {
    /// A token bucket of `capacity` tokens that refills completely over `refill`
    /// (`capacity / refill` tokens per second): "100 requests per minute, bursts of 100".
    pub fn token_bucket(capacity: u64, refill: Duration) -> Result<Self, AlgorithmError> {
        // Named first: "0 tokens per 60 s is not a rate" would not say what to change.
        positive(capacity, "capacity")?;
        let algorithm = Self::TokenBucket {
            capacity,
            rate: Rate::per(capacity, refill)?,
        };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// A token bucket with an explicit rate.
    pub fn token_bucket_with_rate(capacity: u64, rate: Rate) -> Result<Self, AlgorithmError> {
        let algorithm = Self::TokenBucket { capacity, rate };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// A sliding-window counter of `limit` units per `window`.
    pub fn sliding_window(limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        let algorithm = Self::SlidingWindow { limit, window };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// Fixed windows of `limit` units per `window`, aligned to the Unix epoch.
    pub fn fixed_window(limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        let algorithm = Self::FixedWindow { limit, window };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// An exact sliding log of `limit` units per `window`.
    pub fn sliding_log(limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        let algorithm = Self::SlidingLog { limit, window };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// At most `limit` requests in flight at once; a slot not released is freed `ttl` after
    /// it was taken.
    pub fn concurrency(limit: u64, ttl: Duration) -> Result<Self, AlgorithmError> {
        let algorithm = Self::Concurrency { limit, ttl };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// GCRA with `CL.THROTTLE`'s parameters.
    pub fn gcra(max_burst: u64, count: u64, period: Duration) -> Result<Self, AlgorithmError> {
        let algorithm = Self::Gcra {
            max_burst,
            count,
            period,
        };
        algorithm.validate()?;
        Ok(algorithm)
    }

    /// Checks the parameters with the rules the server applies.
    pub fn validate(&self) -> Result<(), AlgorithmError> {
        match self.shape() {
            Ok(shape) => shape.params(1).map(|_| ()),
            Err(error) => Err(error),
        }
    }

    /// The command name the module knows the algorithm by (`RL.<name>`, `RL.MULTI`'s limit
    /// names, `RL.REFUND`'s algorithm argument).
    pub fn wire_name(&self) -> &'static str {
        match self {
            Self::TokenBucket { .. } => "TOKENBUCKET",
            Self::SlidingWindow { .. } => "SLIDING",
            Self::FixedWindow { .. } => "FIXED",
            Self::SlidingLog { .. } => "SLIDINGLOG",
            Self::Concurrency { .. } => "CONCURRENCY",
            Self::Gcra { .. } => "GCRA",
        }
    }

    /// The parameters after the key, as the module's commands take them.
    pub fn wire_args(&self) -> Vec<String> {
        match self {
            Self::TokenBucket { capacity, rate } => {
                vec![capacity.to_string(), rate.as_str().to_string()]
            }
            Self::SlidingWindow { limit, window }
            | Self::FixedWindow { limit, window }
            | Self::SlidingLog { limit, window } => vec![limit.to_string(), seconds(*window)],
            Self::Concurrency { limit, ttl } => {
                vec![limit.to_string(), ttl.as_millis().to_string()]
            }
            Self::Gcra {
                max_burst,
                count,
                period,
            } => vec![
                max_burst.to_string(),
                count.to_string(),
                period.as_secs().to_string(),
            ],
        }
    }

    /// The quota advertised for this limit: the most units it can ever admit at once.
    pub fn quota(&self) -> u64 {
        match self {
            Self::TokenBucket { capacity, .. } => *capacity,
            Self::SlidingWindow { limit, .. }
            | Self::FixedWindow { limit, .. }
            | Self::SlidingLog { limit, .. }
            | Self::Concurrency { limit, .. } => *limit,
            Self::Gcra { max_burst, .. } => max_burst.saturating_add(1),
        }
    }

    /// The time window over which [`quota`](Self::quota) applies: a window's length, or the
    /// time an empty bucket takes to refill completely.
    pub fn window(&self) -> Duration {
        self.shape().map_or(Duration::ZERO, Shape::window)
    }

    /// The integer form the core works with.
    pub(crate) fn shape(&self) -> Result<Shape, AlgorithmError> {
        Ok(match self {
            Self::TokenBucket { capacity, rate } => Shape::TokenBucket {
                capacity: positive(*capacity, "capacity")?,
                interval_ns: rate.interval_ns(),
            },
            Self::SlidingWindow { limit, window } => Shape::SlidingWindow {
                limit: positive(*limit, "limit")?,
                window_us: window_us(*window)?,
            },
            Self::FixedWindow { limit, window } => Shape::FixedWindow {
                limit: positive(*limit, "limit")?,
                window_us: window_us(*window)?,
            },
            Self::SlidingLog { limit, window } => Shape::SlidingLog {
                limit: positive(*limit, "limit")?,
                window_us: window_us(*window)?,
            },
            Self::Concurrency { limit, ttl } => {
                if ttl.subsec_nanos().checked_rem(1_000_000) != Some(0) {
                    return refuse(format!(
                        "an in-flight ttl is whole milliseconds (got {ttl:?})"
                    ));
                }
                Shape::Concurrency {
                    limit: positive(*limit, "limit")?,
                    ttl_us: window_us(*ttl)?,
                }
            }
            Self::Gcra {
                max_burst,
                count,
                period,
            } => {
                if period.subsec_nanos() != 0 || period.is_zero() {
                    return refuse("a GCRA period is a whole number of seconds (at least 1)");
                }
                let count = i64::try_from(positive(*count, "count")?).unwrap_or(i64::MAX);
                let period = i64::try_from(period.as_secs()).unwrap_or(i64::MAX);
                let max_burst = i64::try_from(*max_burst).unwrap_or(i64::MAX);
                match GcraParams::new(max_burst, count, period, 1) {
                    Ok(params) => Shape::Gcra {
                        max_burst,
                        interval_ns: params.interval_ns(),
                    },
                    Err(error) => return refuse(format!("GCRA parameters refused: {error:?}")),
                }
            }
        })
    }
}

fn positive(value: u64, name: &str) -> Result<u64, AlgorithmError> {
    if value == 0 {
        refuse(format!("{name} must be at least 1"))
    } else {
        Ok(value)
    }
}

fn window_us(window: Duration) -> Result<u64, AlgorithmError> {
    let us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    if window.subsec_nanos().checked_rem(1_000) != Some(0) {
        return refuse(format!("a window is whole microseconds (got {window:?})"));
    }
    if us < MIN_WINDOW_US {
        return refuse(format!("a window is at least 1 ms (got {window:?})"));
    }
    if us > MAX_WINDOW_US {
        return refuse(format!("a window is at most 100 years (got {window:?})"));
    }
    Ok(us)
}

/// `digits × 10^-decimals` written as a plain decimal (`1666666667`, 9 → `1.666666667`).
fn decimal_text(digits: u128, decimals: u32) -> String {
    let text = digits.to_string();
    let decimals = usize::try_from(decimals).unwrap_or(0);
    if decimals == 0 {
        return text;
    }
    let padded = format!("{text:0>width$}", width = decimals.saturating_add(1));
    let point = padded.len().saturating_sub(decimals);
    let (whole, fraction) = padded.split_at(point);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{fraction}")
    }
}

/// Seconds as the decimal the module parses, exact to the microsecond: `60.000000`.
fn seconds(window: Duration) -> String {
    format!("{}.{:06}", window.as_secs(), window.subsec_micros())
}

/// An algorithm in the core's integer terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    TokenBucket { capacity: u64, interval_ns: u64 },
    SlidingWindow { limit: u64, window_us: u64 },
    FixedWindow { limit: u64, window_us: u64 },
    SlidingLog { limit: u64, window_us: u64 },
    Concurrency { limit: u64, ttl_us: u64 },
    Gcra { max_burst: i64, interval_ns: i64 },
}

/// Validated core parameters of one call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CoreParams {
    TokenBucket(TokenBucketParams),
    SlidingWindow(WindowParams),
    FixedWindow(WindowParams),
    SlidingLog(SlidingLogParams),
    Concurrency(ConcurrencyParams),
    Gcra(GcraParams),
}

impl Shape {
    /// The limit this replica enforces alone when the store is unreachable: `1 / replicas`
    /// of the quota, rounded down, refilled `replicas` times slower, so the shares of all
    /// replicas never add up to more than the quota. `None` when the share is below one unit
    /// (nothing can be admitted locally).
    pub(crate) fn share(self, replicas: u64) -> Option<Shape> {
        let replicas = replicas.max(1);
        let part = |limit: u64| limit.checked_div(replicas).filter(|share| *share > 0);
        Some(match self {
            Shape::TokenBucket {
                capacity,
                interval_ns,
            } => Shape::TokenBucket {
                capacity: part(capacity)?,
                interval_ns: interval_ns.checked_mul(replicas)?,
            },
            Shape::SlidingWindow { limit, window_us } => Shape::SlidingWindow {
                limit: part(limit)?,
                window_us,
            },
            Shape::FixedWindow { limit, window_us } => Shape::FixedWindow {
                limit: part(limit)?,
                window_us,
            },
            Shape::SlidingLog { limit, window_us } => Shape::SlidingLog {
                limit: part(limit)?,
                window_us,
            },
            Shape::Concurrency { limit, ttl_us } => Shape::Concurrency {
                limit: part(limit)?,
                ttl_us,
            },
            Shape::Gcra {
                max_burst,
                interval_ns,
            } => {
                let limit = u64::try_from(max_burst).ok()?.checked_add(1)?;
                let share = i64::try_from(part(limit)?).ok()?;
                Shape::Gcra {
                    max_burst: share.checked_sub(1)?,
                    interval_ns: interval_ns.checked_mul(i64::try_from(replicas).ok()?)?,
                }
            }
        })
    }

    /// The core parameters for a call of `cost` units.
    pub(crate) fn params(self, cost: u64) -> Result<CoreParams, AlgorithmError> {
        let cost = cost.max(1);
        match self {
            Shape::TokenBucket {
                capacity,
                interval_ns,
            } => TokenBucketParams::from_interval(capacity, interval_ns, cost)
                .map(CoreParams::TokenBucket)
                .or_else(|_| refuse("capacity / rate must be at most 100 years")),
            Shape::SlidingWindow { limit, window_us } => WindowParams::new(limit, window_us, cost)
                .map(CoreParams::SlidingWindow)
                .or_else(|_| refuse("limit must be at most 4294967295")),
            Shape::FixedWindow { limit, window_us } => WindowParams::new(limit, window_us, cost)
                .map(CoreParams::FixedWindow)
                .or_else(|_| refuse("limit must be at most 4294967295")),
            Shape::SlidingLog { limit, window_us } => {
                SlidingLogParams::new(limit, window_us, cost, MAX_STORED_ENTRIES)
                    .map(CoreParams::SlidingLog)
                    .or_else(|_| refuse("a sliding log's limit is at most 10,000,000"))
            }
            Shape::Concurrency { limit, ttl_us } => {
                ConcurrencyParams::new(limit, ttl_us, MAX_STORED_HOLDERS)
                    .map(CoreParams::Concurrency)
                    .or_else(|_| refuse("an in-flight limit is at most 100,000 requests"))
            }
            Shape::Gcra {
                max_burst,
                interval_ns,
            } => GcraParams::from_interval(
                max_burst,
                interval_ns,
                i64::try_from(cost).unwrap_or(i64::MAX),
            )
            .map(CoreParams::Gcra)
            .or_else(|error| refuse(format!("GCRA parameters refused: {error:?}"))),
        }
    }

    /// The window the quota applies to: a window's length, the time an empty bucket (or
    /// GCRA) takes to refill completely; none for an in-flight limit.
    pub(crate) fn window(self) -> Duration {
        match self {
            Shape::TokenBucket {
                capacity,
                interval_ns,
            } => Duration::from_nanos(capacity.saturating_mul(interval_ns)),
            Shape::Gcra {
                max_burst,
                interval_ns,
            } => Duration::from_nanos(
                u64::try_from(max_burst.saturating_add(1).saturating_mul(interval_ns))
                    .unwrap_or(u64::MAX),
            ),
            Shape::SlidingWindow { window_us, .. }
            | Shape::FixedWindow { window_us, .. }
            | Shape::SlidingLog { window_us, .. } => Duration::from_micros(window_us),
            // Slots come back when requests end.
            Shape::Concurrency { .. } => Duration::ZERO,
        }
    }

    /// The limit (quota) of this shape.
    pub(crate) fn quota(self) -> u64 {
        match self {
            Shape::TokenBucket { capacity, .. } => capacity,
            Shape::SlidingWindow { limit, .. }
            | Shape::FixedWindow { limit, .. }
            | Shape::SlidingLog { limit, .. }
            | Shape::Concurrency { limit, .. } => limit,
            Shape::Gcra { max_burst, .. } => {
                u64::try_from(max_burst).unwrap_or(0).saturating_add(1)
            }
        }
    }

    /// How long until the limiter can admit at least one unit more than `remaining`, given a
    /// view `(remaining, reset_after)` of it: the `t` of the `RateLimit` header field.
    ///
    /// Exact for buckets (units come back one interval apart, the last one at
    /// `reset_after`) and fixed windows (all at the window's end); for the sliding
    /// algorithms it is `reset_after`, an upper bound (units may come back earlier).
    pub(crate) fn more_in(self, remaining: u64, reset_after: Duration) -> Duration {
        let quota = self.quota();
        if remaining >= quota {
            return Duration::ZERO;
        }
        let interval_ns = match self {
            Shape::TokenBucket { interval_ns, .. } => interval_ns,
            Shape::Gcra { interval_ns, .. } => u64::try_from(interval_ns).unwrap_or(0),
            // A slot comes back when a request ends, which nobody can tell in advance.
            Shape::Concurrency { .. } => return Duration::ZERO,
            _ => return reset_after,
        };
        // The missing units come back one interval apart, the last one at reset_after.
        let later_units = quota.saturating_sub(remaining).saturating_sub(1);
        let later = Duration::from_nanos(later_units.saturating_mul(interval_ns));
        reset_after.saturating_sub(later)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_quotas_give_the_exact_interval() {
        let per_minute = Rate::per(100, Duration::from_secs(60)).unwrap();
        assert_eq!(per_minute.as_str(), "1.666666667");
        assert_eq!(per_minute.interval_ns(), 600_000_000);
        let per_day = Rate::per(60, Duration::from_secs(86_400)).unwrap();
        assert_eq!(per_day.interval_ns(), 1_440_000_000_000);
        assert_eq!(Rate::per(10, Duration::from_secs(5)).unwrap().as_str(), "2");
        assert_eq!(
            Rate::per(1, Duration::from_secs(4)).unwrap().as_str(),
            "0.25"
        );
        let fast = Rate::per(3, Duration::from_millis(1)).unwrap();
        assert_eq!(fast.interval_ns(), 333_334);
        assert_eq!(Rate::every(1).unwrap().as_str(), "1000000000");
        assert!(Rate::per(0, Duration::from_secs(1)).is_err());
        assert!(Rate::per(1, Duration::ZERO).is_err());
    }

    #[test]
    fn every_interval_has_a_decimal_rate() {
        let intervals = [
            1,
            2,
            3,
            7,
            999,
            1_000_001,
            123_456_789,
            86_400_000_000_000,
            3_155_760_000_000_000_000,
        ];
        for interval_ns in intervals {
            let rate = Rate::every(interval_ns).unwrap();
            assert_eq!(rate.interval_ns(), interval_ns, "{interval_ns}: {rate}");
        }
    }

    #[test]
    fn the_interval_is_the_servers() {
        // ceil(1e9 / 3) = 333,333,334 ns, as the module rounds it.
        assert_eq!(Rate::per_second("3").unwrap().interval_ns(), 333_333_334);
        assert!(Rate::per_second("0").is_err());
        assert!(Rate::per_second("2e9").is_err());
        assert!(Rate::per_second("abc").is_err());
    }

    #[test]
    fn wire_arguments_follow_the_commands() {
        let bucket = Algorithm::token_bucket(10, Duration::from_secs(5)).unwrap();
        assert_eq!(
            (bucket.wire_name(), bucket.wire_args()),
            ("TOKENBUCKET", vec!["10".to_string(), "2".to_string()])
        );
        let window = Algorithm::fixed_window(5, Duration::from_millis(1500)).unwrap();
        assert_eq!(window.wire_args(), ["5", "1.500000"]);
        let gcra = Algorithm::gcra(4, 10, Duration::from_secs(60)).unwrap();
        assert_eq!(
            (gcra.wire_name(), gcra.wire_args()),
            (
                "GCRA",
                vec!["4".to_string(), "10".to_string(), "60".to_string()]
            )
        );
        assert_eq!(gcra.quota(), 5);
        assert_eq!(gcra.window(), Duration::from_secs(30));
    }

    #[test]
    fn invalid_parameters_are_refused_up_front() {
        assert!(Algorithm::fixed_window(0, Duration::from_secs(1)).is_err());
        assert!(Algorithm::fixed_window(1, Duration::from_micros(999)).is_err());
        assert!(Algorithm::fixed_window(1, Duration::from_nanos(1_000_000_001)).is_err());
        assert!(Algorithm::sliding_window(1 << 33, Duration::from_secs(1)).is_err());
        assert!(Algorithm::gcra(1, 1, Duration::from_millis(1500)).is_err());
        assert!(Algorithm::token_bucket(0, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn a_share_never_adds_up_to_more_than_the_quota() {
        let bucket = Algorithm::token_bucket(10, Duration::from_secs(10)).unwrap();
        let shape = bucket.shape().unwrap();
        assert_eq!(
            shape.share(3),
            Some(Shape::TokenBucket {
                capacity: 3,
                interval_ns: 3_000_000_000
            })
        );
        assert_eq!(shape.share(11), None, "less than one token each");
        let gcra = Algorithm::gcra(9, 1, Duration::from_secs(1)).unwrap();
        assert_eq!(
            gcra.shape().unwrap().share(2),
            Some(Shape::Gcra {
                max_burst: 4,
                interval_ns: 2_000_000_000
            })
        );
    }

    #[test]
    fn more_quota_comes_one_interval_at_a_time() {
        let shape = Algorithm::token_bucket(10, Duration::from_secs(10))
            .unwrap()
            .shape()
            .unwrap();
        // 7 of 10 left, full again in 2.5 s: the next token comes in 0.5 s.
        assert_eq!(
            shape.more_in(7, Duration::from_millis(2500)),
            Duration::from_millis(500)
        );
        assert_eq!(shape.more_in(10, Duration::ZERO), Duration::ZERO);
        let fixed = Algorithm::fixed_window(5, Duration::from_secs(60))
            .unwrap()
            .shape()
            .unwrap();
        assert_eq!(
            fixed.more_in(0, Duration::from_secs(42)),
            Duration::from_secs(42)
        );
    }
}
