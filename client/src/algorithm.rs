//! The algorithms a limit can use: an [`Algorithm`] is the core's [`Quota`] (the one the
//! server decides with, which the local fallback and the in-memory store run through the same
//! engine), built from the arguments the module's commands take and validated by the
//! server's own parser (`redis-ratelimit-wire`), so a limit is refused here exactly when the
//! server would refuse it, with the server's words. What a limit advertises, its window, a
//! replica's share and how its units come back are the core's facts of that quota.

use std::fmt;
use std::time::Duration;

use redis_ratelimit_core::concurrency::MAX_STORED_HOLDERS;
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_core::sliding_log::{MAX_STORED_ENTRIES, SlidingLogParams};
use redis_ratelimit_core::window::WindowParams;
use redis_ratelimit_wire::args::{self, Settings};
use redis_ratelimit_wire::encode::{self, Args};
use redis_ratelimit_wire::error::CommandError;

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

impl From<CommandError> for AlgorithmError {
    /// The server's text, without its error code (`ERR`).
    fn from(error: CommandError) -> Self {
        let text = error.to_string();
        match text.split_once(' ') {
            Some((code, detail)) if code.bytes().all(|b| b.is_ascii_uppercase()) => {
                AlgorithmError(detail.to_string())
            }
            _ => AlgorithmError(text),
        }
    }
}

/// The largest settings any server accepts: what the client checks against (a server may be
/// configured lower, and then refuses the call itself).
const SERVER_LIMITS: Settings = Settings {
    max_log_entries: MAX_STORED_ENTRIES,
    max_holders: MAX_STORED_HOLDERS,
};

/// A refill rate in tokens per second, given as decimal text (not a float), so that the
/// server and the local fallback derive the same integer refill interval from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rate {
    text: String,
    interval_ns: u64,
}

impl Rate {
    /// A rate written as a decimal (`"0.5"`, `"10"`, `"2.5e3"`), at most 1e9 per second:
    /// checked by the server's parser, with its words.
    pub fn per_second(text: &str) -> Result<Self, AlgorithmError> {
        let bucket = args::quota::token_bucket(&[b"1", text.as_bytes()])?;
        Ok(Self {
            text: text.to_string(),
            interval_ns: bucket.interval_ns(),
        })
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
    /// writes the shortest decimal whose derived interval is exactly `interval_ns`, as the
    /// commands carry it.
    pub fn every(interval_ns: u64) -> Result<Self, AlgorithmError> {
        Self::per_second(&encode::rate(interval_ns))
    }

    /// The decimal text this rate was written as.
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

/// One rate-limiting algorithm with its parameters (the cost is per call, not here): the
/// core's [`Quota`] for a call of one unit, valid by construction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Algorithm {
    quota: Quota,
}

impl Algorithm {
    /// `RL.TOKENBUCKET`: a token bucket of `capacity` tokens that refills completely over
    /// `refill` (`capacity / refill` tokens per second): "100 requests per minute, bursts of
    /// 100". The capacity is the quota advertised in `RateLimit-Policy`.
    pub fn token_bucket(capacity: u64, refill: Duration) -> Result<Self, AlgorithmError> {
        // The capacity first, by the server's rule: "0 tokens per 60 s is not a rate" would
        // not say what to change.
        args::positive_integer("capacity", capacity.to_string().as_bytes())
            .map_err(CommandError::from)?;
        Self::token_bucket_with_rate(capacity, Rate::per(capacity, refill)?)
    }

    /// A token bucket with an explicit rate.
    pub fn token_bucket_with_rate(capacity: u64, rate: Rate) -> Result<Self, AlgorithmError> {
        Self::from_arguments(Kind::TokenBucket, &[&capacity.to_string(), rate.as_str()])
    }

    /// `RL.SLIDING`: a sliding-window counter of `limit` units per `window` (approximate;
    /// see the module's README). The window is whole microseconds, at least 1 ms.
    pub fn sliding_window(limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        Self::windowed(Kind::SlidingWindow, limit, window)
    }

    /// `RL.FIXED`: fixed windows of `limit` units per `window`, aligned to the Unix epoch.
    pub fn fixed_window(limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        Self::windowed(Kind::FixedWindow, limit, window)
    }

    /// `RL.SLIDINGLOG`: an exact sliding log of `limit` units per `window` (memory grows
    /// with the limit, at most the server's `ratelimit.max-log-entries`).
    pub fn sliding_log(limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        Self::windowed(Kind::SlidingLog, limit, window)
    }

    /// An in-flight limit (`RL.ACQUIRE` / `RL.RELEASE`): at most `limit` requests at once,
    /// each holding its slot until released or `ttl` (whole milliseconds) after it was
    /// taken. A request takes one slot whatever its cost.
    pub fn concurrency(limit: u64, ttl: Duration) -> Result<Self, AlgorithmError> {
        let algorithm = Self::from_arguments(
            Kind::Concurrency,
            &[&limit.to_string(), &ttl.as_millis().to_string()],
        )?;
        if ttl.subsec_nanos().checked_rem(1_000_000) != Some(0) {
            return refuse(format!(
                "an in-flight ttl is whole milliseconds (got {ttl:?})"
            ));
        }
        Ok(algorithm)
    }

    /// GCRA as `CL.THROTTLE`: `max_burst + 1` units at once, `count` per `period` (whole
    /// seconds, as `CL.THROTTLE` takes it).
    pub fn gcra(max_burst: u64, count: u64, period: Duration) -> Result<Self, AlgorithmError> {
        let arguments = [max_burst, count, period.as_secs()].map(|n| n.to_string());
        let algorithm =
            Self::from_arguments(Kind::Gcra, &[&arguments[0], &arguments[1], &arguments[2]])?;
        if period.subsec_nanos() != 0 || period.is_zero() {
            return refuse("a GCRA period is a whole number of seconds (at least 1)");
        }
        Ok(algorithm)
    }

    /// The algorithm `kind` with the parameters its command takes after the key
    /// (`["10", "2"]`: a token bucket of 10 tokens refilled at 2 per second), validated by
    /// the server's parser, with its words.
    pub fn from_arguments(kind: Kind, arguments: &[&str]) -> Result<Self, AlgorithmError> {
        let arguments: Vec<&[u8]> = arguments
            .iter()
            .map(|argument| argument.as_bytes())
            .collect();
        let quota = args::quota::quota(kind, &arguments, SERVER_LIMITS)?;
        Ok(Self { quota })
    }

    /// A windowed algorithm of `limit` units per `window`: built from the numbers by the
    /// core's own checks (those the server's parser ends in), and only when they refuse it,
    /// written as the command's arguments for the parser's words.
    fn windowed(kind: Kind, limit: u64, window: Duration) -> Result<Self, AlgorithmError> {
        if let Some(quota) = windowed_quota(kind, limit, window) {
            return Ok(Self { quota });
        }
        let algorithm = Self::from_arguments(kind, &[&limit.to_string(), &seconds(window)])?;
        if window.subsec_nanos().checked_rem(1_000) != Some(0) {
            return refuse(format!("a window is whole microseconds (got {window:?})"));
        }
        Ok(algorithm)
    }

    /// The kind of limiter the module keeps for this algorithm.
    pub fn kind(&self) -> Kind {
        self.quota.kind()
    }

    /// The name configuration files give the algorithm (`token_bucket`).
    pub fn name(&self) -> &'static str {
        self.kind().config_name()
    }

    /// The core's quota, for a call of one unit.
    pub fn as_quota(&self) -> &Quota {
        &self.quota
    }

    /// Whether this is an in-flight limit: its quota counts requests at once, each holding a
    /// slot until released.
    pub fn is_in_flight(&self) -> bool {
        self.kind() == Kind::Concurrency
    }

    /// The name the module's commands know the algorithm by (`RL.MULTI`'s limit names,
    /// `RL.REFUND`'s algorithm argument).
    pub fn wire_name(&self) -> &'static str {
        self.kind().command_name().unwrap_or_default()
    }

    /// The parameters after the key, as the module's commands take them.
    pub fn wire_args(&self) -> Vec<String> {
        let mut arguments = Args::default();
        encode::params(&self.quota, &mut arguments);
        arguments
            .iter()
            .map(|argument| String::from_utf8_lossy(argument).into_owned())
            .collect()
    }

    /// The quota advertised for this limit: the most units it can ever admit at once.
    pub fn quota(&self) -> u64 {
        self.quota.advertised_quota()
    }

    /// The time window over which [`quota`](Self::quota) applies: a window's length, or the
    /// time an empty bucket takes to refill completely.
    pub fn window(&self) -> Duration {
        self.quota.window()
    }

    /// What one of `replicas` replicas enforces alone (see
    /// [`QuotaFacts::share`](redis_ratelimit_core::QuotaFacts::share)).
    pub(crate) fn share(&self, replicas: u64) -> Option<Quota> {
        self.quota.share(replicas)
    }
}

/// The quota of a windowed `kind` (`limit` units per `window`) when the server's parser
/// would take it: `limit` at least 1, `window` whole microseconds, then the core's bounds
/// (the parser's duration bounds are the core's); `None` for any other.
fn windowed_quota(kind: Kind, limit: u64, window: Duration) -> Option<Quota> {
    if limit == 0 || window.subsec_nanos().checked_rem(1_000) != Some(0) {
        return None;
    }
    let window_us = u64::try_from(window.as_micros()).ok()?;
    match kind {
        Kind::SlidingWindow => WindowParams::new(limit, window_us, 1)
            .ok()
            .map(Quota::SlidingWindow),
        Kind::FixedWindow => WindowParams::new(limit, window_us, 1)
            .ok()
            .map(Quota::FixedWindow),
        Kind::SlidingLog => {
            SlidingLogParams::new(limit, window_us, 1, SERVER_LIMITS.max_log_entries)
                .ok()
                .map(Quota::SlidingLog)
        }
        _ => None,
    }
}

/// Seconds as the decimal the module parses, exact to the microsecond: `60.000000`.
fn seconds(window: Duration) -> String {
    format!("{}.{:06}", window.as_secs(), window.subsec_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_from_numbers_are_the_parsers_windows() {
        let limits = [
            0,
            1,
            2,
            1_000,
            100_000,
            100_001,
            4_294_967_295,
            4_294_967_296,
            u64::MAX,
        ];
        let windows = [
            Duration::ZERO,
            Duration::from_nanos(999_999),
            Duration::from_micros(999),
            Duration::from_millis(1),
            Duration::from_nanos(1_000_500),
            Duration::from_micros(1_234_567),
            Duration::from_secs(60),
            Duration::from_secs(3_155_760_000),
            Duration::from_secs(3_155_760_000) + Duration::from_micros(1),
            Duration::MAX,
        ];
        let kinds = [Kind::SlidingWindow, Kind::FixedWindow, Kind::SlidingLog];
        let mut built = 0;
        for kind in kinds {
            for limit in limits {
                for window in windows {
                    let parsed =
                        Algorithm::from_arguments(kind, &[&limit.to_string(), &seconds(window)])
                            .ok()
                            .filter(|_| window.subsec_nanos() % 1_000 == 0)
                            .map(|algorithm| algorithm.quota);
                    let fast = windowed_quota(kind, limit, window);
                    assert_eq!(fast, parsed, "{kind:?} {limit} per {window:?}");
                    built += usize::from(fast.is_some());
                }
            }
        }
        assert!(built > 20, "{built}");
    }

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
        assert_eq!(Rate::per_second("2.5e3").unwrap().as_str(), "2.5e3");
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
    fn refusals_are_the_servers_own() {
        assert_eq!(
            Algorithm::fixed_window(0, Duration::from_secs(1))
                .unwrap_err()
                .to_string(),
            "limit must be greater than 0 (got '0')"
        );
        assert_eq!(
            Rate::per_second("2e9").unwrap_err().to_string(),
            "rate must be at most 1000000000 tokens per second (got '2e9')"
        );
        assert_eq!(
            Rate::per_second("abc").unwrap_err().to_string(),
            "rate must be a positive decimal number (got 'abc')"
        );
        let too_many = (Kind::SlidingWindow, ["8589934592", "1.000000"]);
        let too_long = (Kind::TokenBucket, ["18446744073709551615", "0.001"]);
        for (kind, arguments) in [too_many, too_long] {
            let bytes: Vec<&[u8]> = arguments.iter().map(|a| a.as_bytes()).collect();
            let server = args::quota::quota(kind, &bytes, SERVER_LIMITS)
                .unwrap_err()
                .to_string();
            let client = Algorithm::from_arguments(kind, &arguments)
                .unwrap_err()
                .to_string();
            assert_eq!(format!("ERR {client}"), server, "{kind:?}");
        }
        let too_many = Algorithm::sliding_window(1 << 33, Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            too_many.to_string(),
            "limit must be at most 4294967295 (got '8589934592')"
        );
    }

    #[test]
    fn the_clients_own_units_are_whole() {
        let refused = |result: Result<Algorithm, AlgorithmError>| result.unwrap_err().to_string();
        assert_eq!(
            refused(Algorithm::fixed_window(
                1,
                Duration::from_nanos(1_000_000_001)
            )),
            "a window is whole microseconds (got 1.000000001s)"
        );
        assert_eq!(
            refused(Algorithm::concurrency(1, Duration::from_micros(1_500))),
            "an in-flight ttl is whole milliseconds (got 1.5ms)"
        );
        assert_eq!(
            refused(Algorithm::gcra(1, 1, Duration::from_millis(1500))),
            "a GCRA period is a whole number of seconds (at least 1)"
        );
    }

    #[test]
    fn an_algorithm_is_its_quota() {
        let bucket = Algorithm::token_bucket(10, Duration::from_secs(10)).unwrap();
        assert_eq!(
            Algorithm::from_arguments(Kind::TokenBucket, &["10", "1"]).unwrap(),
            bucket
        );
        assert_eq!(
            (bucket.kind(), bucket.name()),
            (Kind::TokenBucket, "token_bucket")
        );
        assert_eq!(
            (bucket.quota(), bucket.window()),
            (10, Duration::from_secs(10))
        );
        let Some(Quota::TokenBucket(share)) = bucket.share(3) else {
            panic!("a token bucket's share")
        };
        assert_eq!((share.capacity(), share.interval_ns()), (3, 3_000_000_000));
        assert_eq!(bucket.share(11), None, "less than one token each");
        let gcra = Algorithm::gcra(9, 1, Duration::from_secs(1)).unwrap();
        let Some(Quota::Gcra(share)) = gcra.share(2) else {
            panic!("a GCRA share")
        };
        assert_eq!((share.max_burst(), share.interval_ns()), (4, 2_000_000_000));
        let slots = Algorithm::concurrency(5, Duration::from_secs(30)).unwrap();
        assert!(slots.is_in_flight() && !bucket.is_in_flight());
        assert_eq!((slots.quota(), slots.window()), (5, Duration::ZERO));
    }
}
