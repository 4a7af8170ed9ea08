//! The parameters of each algorithm, as its own command and an `RL.MULTI` limit take them,
//! for a call of one unit: [`mod@super::call`] and [`super::multi`] set the cost.

use super::value::{Settings, duration_us, positive_decimal, positive_integer};
use crate::error::{ArgError, CommandError, Rule};
use redis_ratelimit_core::concurrency::{
    ConcurrencyParamError, ConcurrencyParams, HolderId, MAX_STORED_HOLDERS,
};
use redis_ratelimit_core::gcra::{GcraParamError, GcraParams};
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_core::number::{NumberError, parse_integer};
use redis_ratelimit_core::sliding_log::{SlidingLogParamError, SlidingLogParams};
use redis_ratelimit_core::time::US_PER_MS;
use redis_ratelimit_core::token_bucket::{TokenBucketParamError, TokenBucketParams};
use redis_ratelimit_core::window::{WindowParamError, WindowParams};

/// One parameter of an algorithm, as its command takes it (what a configuration file names
/// and how it writes it follows from this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// A positive integer (`capacity`, `limit`).
    Count(&'static str),
    /// A positive decimal number of units per second (`rate`).
    Rate(&'static str),
    /// A duration in decimal seconds, to the microsecond (`window`).
    Seconds(&'static str),
    /// A signed integer, redis-cell's (`max_burst`, `count`).
    Integer(&'static str),
    /// A signed whole number of seconds, redis-cell's (`period`).
    WholeSeconds(&'static str),
    /// A positive whole number of milliseconds, its unit in its name (`ttl_ms`).
    Millis(&'static str),
}

/// The parameters of `kind`, in the order its command takes them.
pub fn params(kind: Kind) -> &'static [Param] {
    const WINDOW: &[Param] = &[Param::Count("limit"), Param::Seconds("window")];
    match kind {
        Kind::TokenBucket => &[Param::Count("capacity"), Param::Rate("rate")],
        Kind::SlidingWindow | Kind::FixedWindow | Kind::SlidingLog => WINDOW,
        Kind::Gcra => &[
            Param::Integer("max_burst"),
            Param::Integer("count"),
            Param::WholeSeconds("period"),
        ],
        Kind::Concurrency => &[Param::Count("limit"), Param::Millis("ttl_ms")],
    }
}

/// How many arguments the parameters of `kind` take.
pub fn arity(kind: Kind) -> usize {
    params(kind).len()
}

/// The quota of `kind` that `args` (exactly [`arity`] of them) describe, for one unit.
pub fn quota(kind: Kind, args: &[&[u8]], settings: Settings) -> Result<Quota, CommandError> {
    match kind {
        Kind::TokenBucket => token_bucket(args).map(Quota::TokenBucket),
        Kind::SlidingWindow => window(args).map(Quota::SlidingWindow),
        Kind::FixedWindow => window(args).map(Quota::FixedWindow),
        Kind::SlidingLog => sliding_log(args, settings.max_log_entries).map(Quota::SlidingLog),
        Kind::Gcra => gcra(args).map(|params| Quota::Gcra(params.into())),
        Kind::Concurrency => {
            concurrency(args, settings.max_holders).map(|params| Quota::Concurrency(params.into()))
        }
    }
}

/// The error for an in-flight `limit` above the server's setting.
fn above_max_holders(max_holders: u64, limit_arg: &[u8]) -> CommandError {
    let rule = Rule::AtMostSetting {
        bound: max_holders.clamp(1, MAX_STORED_HOLDERS),
        setting: "ratelimit.max-holders",
    };
    ArgError::new("limit", rule, limit_arg).into()
}

/// `limit ttl_ms` of an in-flight limit (`RL.MULTI`'s `CONCURRENCY`), with no holder yet.
pub fn concurrency(args: &[&[u8]], max_holders: u64) -> Result<ConcurrencyParams, CommandError> {
    let [limit_arg, ttl_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = positive_integer("limit", limit_arg)?;
    let ttl_us = positive_integer("ttl_ms", ttl_arg)?.saturating_mul(US_PER_MS);
    ConcurrencyParams::new(limit, ttl_us, max_holders).map_err(|error| match error {
        ConcurrencyParamError::LimitAboveMaxHolders { max_holders } => {
            above_max_holders(max_holders, limit_arg)
        }
        // A positive number of milliseconds is at least the shortest ttl (1 ms).
        ConcurrencyParamError::TtlTooShort | ConcurrencyParamError::TtlTooLong => {
            ArgError::new("ttl_ms", Rule::AtMost("3155760000000 (100 years)"), ttl_arg).into()
        }
    })
}

/// `limit` of `RL.PEEK key CONCURRENCY limit`: no holder, no ttl.
pub fn concurrency_peek(args: &[&[u8]], max_holders: u64) -> Result<Quota, CommandError> {
    let [limit_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = positive_integer("limit", limit_arg)?;
    ConcurrencyParams::peek(limit, max_holders)
        .map(|params| Quota::Concurrency(params.into()))
        .map_err(|_| above_max_holders(max_holders, limit_arg))
}

/// A holder id: 1 to 128 bytes.
pub fn holder(id: &[u8]) -> Result<HolderId, CommandError> {
    HolderId::new(id)
        .map_err(|_| ArgError::new("holder", Rule::Must("be 1 to 128 bytes"), id).into())
}

/// `limit holder ttl_ms` of `RL.ACQUIRE`.
pub fn acquire(args: &[&[u8]], max_holders: u64) -> Result<Quota, CommandError> {
    let [limit_arg, holder_arg, ttl_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let params = concurrency(&[limit_arg, ttl_arg], max_holders)?;
    Ok(Quota::Concurrency(
        params.with_holder(holder(holder_arg)?).into(),
    ))
}

/// `capacity rate` of a token bucket.
pub fn token_bucket(args: &[&[u8]]) -> Result<TokenBucketParams, CommandError> {
    let [capacity_arg, rate_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let capacity = positive_integer("capacity", capacity_arg)?;
    let rate = positive_decimal("rate", rate_arg)?;
    let params = TokenBucketParams::new(capacity, rate, 1).map_err(|error| match error {
        TokenBucketParamError::RateTooHigh => ArgError::new(
            "rate",
            Rule::AtMost("1000000000 tokens per second"),
            rate_arg,
        ),
        TokenBucketParamError::RefillTooLong => ArgError::combination(
            "capacity / rate",
            Rule::AtMost("100 years (the time an empty bucket takes to refill)"),
        ),
    })?;
    Ok(params)
}

/// `limit window` of a sliding or fixed window.
pub fn window(args: &[&[u8]]) -> Result<WindowParams, CommandError> {
    let [limit_arg, window_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = positive_integer("limit", limit_arg)?;
    let window_us = duration_us("window", window_arg)?;
    WindowParams::new(limit, window_us, 1).map_err(|error| {
        CommandError::Argument(match error {
            WindowParamError::LimitTooLarge => {
                ArgError::new("limit", Rule::AtMost("4294967295"), limit_arg)
            }
            // Already refused by duration_us, whose bounds are the same.
            WindowParamError::WindowTooShort | WindowParamError::WindowTooLong => ArgError::new(
                "window",
                Rule::AtMost("3155760000 seconds (100 years)"),
                window_arg,
            ),
        })
    })
}

/// `limit window` of a sliding log, with the server's `max-log-entries`.
pub fn sliding_log(args: &[&[u8]], max_entries: u64) -> Result<SlidingLogParams, CommandError> {
    let [limit_arg, window_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = positive_integer("limit", limit_arg)?;
    let window_us = duration_us("window", window_arg)?;
    SlidingLogParams::new(limit, window_us, 1, max_entries).map_err(|error| match error {
        SlidingLogParamError::LimitAboveMaxEntries { max_entries } => {
            CommandError::Argument(ArgError::new(
                "limit",
                Rule::AtMostSetting {
                    bound: max_entries,
                    setting: "ratelimit.max-log-entries",
                },
                limit_arg,
            ))
        }
        // Already refused by duration_us, whose bounds are the same.
        SlidingLogParamError::WindowTooShort | SlidingLogParamError::WindowTooLong => {
            CommandError::Argument(ArgError::new(
                "window",
                Rule::AtMost("3155760000 seconds (100 years)"),
                window_arg,
            ))
        }
    })
}

/// A signed integer argument.
fn integer(name: &'static str, value: &[u8]) -> Result<i64, ArgError> {
    parse_integer(value).map_err(|error| {
        let rule = match error {
            NumberError::NotFinite => Rule::Finite,
            NumberError::TooLarge => Rule::TooLarge,
            _ => Rule::Integer,
        };
        ArgError::new(name, rule, value)
    })
}

/// `max_burst count period [quantity]` of `CL.THROTTLE`, with redis-cell's syntax: signed
/// integers, a quantity of 0 (peek) or below (give back) allowed.
pub fn throttle(args: &[&[u8]]) -> Result<GcraParams, CommandError> {
    let (quantity, params) = match args {
        [params @ .., quantity] if args.len() == 4 => (integer("quantity", quantity)?, params),
        params => (1, params),
    };
    gcra(params).map(|params| params.with_quantity(quantity))
}

/// `max_burst count period` of a GCRA (redis-cell's integers), for a call of one unit.
pub fn gcra(args: &[&[u8]]) -> Result<GcraParams, CommandError> {
    let [burst_arg, count_arg, period_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let max_burst = integer("max_burst", burst_arg)?;
    let count = integer("count", count_arg)?;
    let period = integer("period", period_arg)?;
    GcraParams::new(max_burst, count, period, 1).map_err(|error| {
        CommandError::Argument(match error {
            GcraParamError::ZeroRate => ArgError::combination(
                "count / period",
                Rule::Must(
                    "be a non-zero rate of at most 1e9 per second (zero rates are not supported)",
                ),
            ),
            GcraParamError::NegativeRate => {
                ArgError::combination("count and period", Rule::Must("have the same sign"))
            }
            GcraParamError::NegativeBurst => {
                ArgError::new("max_burst", Rule::NotNegative, burst_arg)
            }
            GcraParamError::ToleranceTooLong => ArgError::combination(
                "period / count * (max_burst + 1)",
                Rule::AtMost("100 years"),
            ),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_ratelimit_core::CallCost;

    fn message(args: &[&str]) -> String {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        token_bucket(&bytes).unwrap_err().to_string()
    }

    #[test]
    fn accepts_valid_arguments() {
        let params = token_bucket(&[b"10", b"0.5"]).unwrap();
        assert_eq!(
            (params.capacity(), params.interval_ns(), params.cost()),
            (10, 2_000_000_000, 1)
        );
        let params = token_bucket(&[b"1000000000000000", b"1000000"]).unwrap();
        assert_eq!(
            (params.capacity(), params.interval_ns(), params.cost()),
            (1_000_000_000_000_000, 1_000, 1)
        );
    }

    #[test]
    fn sliding_log_limits_are_bounded_by_the_setting() {
        let params = sliding_log(&[b"100", b"60"], 10_000).unwrap();
        assert_eq!(
            (params.limit(), params.window_us(), params.cost()),
            (100, 60_000_000, 1)
        );
        assert_eq!(
            sliding_log(&[b"10001", b"60"], 10_000)
                .unwrap_err()
                .to_string(),
            "ERR limit must be at most 10000 (the ratelimit.max-log-entries setting) (got '10001')"
        );
    }

    #[rustfmt::skip]
    #[test]
    fn throttle_takes_redis_cells_arguments() {
        let params = throttle(&[b"15", b"30", b"60"]).unwrap();
        assert_eq!(
            (
                params.max_burst(),
                params.limit(),
                params.interval_ns(),
                params.quantity()
            ),
            (15, 16, 2_000_000_000, 1)
        );
        assert_eq!(
            throttle(&[b"+15", b"30", b"60", b"-2"]).unwrap().quantity(),
            -2
        );
        let refused: [(&[&str], &str); 5] = [
            (&["x", "30", "60"],          "ERR max_burst must be an integer (got 'x')"),
            (&["-1", "30", "60"],         "ERR max_burst must be at least 0 (got '-1')"),
            (&["1", "0", "60"],           "ERR count / period must be a non-zero rate of at most 1e9 per second (zero rates are not supported)"),
            (&["1", "-1", "60"],          "ERR count and period must have the same sign"),
            (&["1000000", "1", "3155760"], "ERR period / count * (max_burst + 1) must be at most 100 years"),
        ];
        for (args, expected) in refused {
            let bytes: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
            assert_eq!(throttle(&bytes).unwrap_err().to_string(), expected, "{args:?}");
        }
        assert_eq!(throttle(&[b"1", b"1"]), Err(CommandError::WrongArity));
    }

    #[test]
    fn counts_arguments() {
        assert_eq!(token_bucket(&[b"1"]), Err(CommandError::WrongArity));
        assert_eq!(
            token_bucket(&[b"1", b"1", b"1"]),
            Err(CommandError::WrongArity)
        );
    }

    #[rustfmt::skip]
    #[test]
    fn refuses_bad_arguments_with_the_rule() {
        let cases: &[(&[&str], &str)] = &[
            (&["0", "1"],        "ERR capacity must be greater than 0 (got '0')"),
            (&["-1", "1"],       "ERR capacity must be greater than 0 (got '-1')"),
            (&["1.5", "1"],      "ERR capacity must be a positive integer (got '1.5')"),
            (&["", "1"],         "ERR capacity must be a positive integer (got '')"),
            (&["99999999999999999999", "1"], "ERR capacity is too large (got '99999999999999999999')"),
            (&["10", "0"],       "ERR rate must be greater than 0 (got '0')"),
            (&["10", "-0.5"],    "ERR rate must be greater than 0 (got '-0.5')"),
            (&["10", "nan"],     "ERR rate must be a finite number (got 'nan')"),
            (&["10", "-inf"],    "ERR rate must be a finite number (got '-inf')"),
            (&["10", "1e400"],   "ERR rate must be at most 1000000000 tokens per second (got '1e400')"),
            (&["10", "1/s"],     "ERR rate must be a positive decimal number (got '1/s')"),
            (&["10", "1e-400"],  "ERR capacity / rate must be at most 100 years (the time an empty bucket takes to refill)"),
            (&["1000000000000000", "1"], "ERR capacity / rate must be at most 100 years (the time an empty bucket takes to refill)"),
        ];
        for (args, expected) in cases {
            assert_eq!(message(args), *expected, "{args:?}");
        }
    }
}
