//! Parsing command arguments into validated algorithm parameters.
//!
//! Pure functions over byte slices, so every error message is unit-tested without a server.
//! Arity is checked by the glue before these run.

use std::cell::RefCell;

use crate::core::fixed_window::{WindowParamError, WindowParams};
use crate::core::gcra::{GcraParamError, GcraParams};
use crate::core::number::{Decimal, NumberError, parse_integer, parse_positive_integer};
use crate::core::sliding_log::{SlidingLogParamError, SlidingLogParams};
use crate::core::time::{MAX_WINDOW_US, MIN_WINDOW_US, US_PER_SECOND};
use crate::core::token_bucket::{TokenBucketParamError, TokenBucketParams};
use crate::error::{ArgError, CommandError, Rule};
use crate::limiter::Kind;

/// A positive integer argument.
pub fn positive_integer(name: &'static str, value: &[u8]) -> Result<u64, ArgError> {
    parse_positive_integer(value)
        .map_err(|error| ArgError::new(name, Rule::for_number(error, Rule::PositiveInteger), value))
}

/// A positive decimal argument.
pub fn positive_decimal(name: &'static str, value: &[u8]) -> Result<Decimal, ArgError> {
    Decimal::parse_positive(value)
        .map_err(|error| ArgError::new(name, Rule::for_number(error, Rule::PositiveDecimal), value))
}

/// A duration argument: seconds as a decimal (`0.25`, `60`, `86400`), at least 1 ms and at
/// most 100 years, in microseconds (a sub-microsecond remainder rounds up).
pub fn duration_us(name: &'static str, value: &[u8]) -> Result<u64, ArgError> {
    let seconds = positive_decimal(name, value)?;
    match seconds.ceil_times(US_PER_SECOND) {
        Some(us) if us < MIN_WINDOW_US => Err(ArgError::new(
            name,
            Rule::AtLeast("0.001 seconds (1 ms)"),
            value,
        )),
        Some(us) if us <= MAX_WINDOW_US => Ok(us),
        _ => Err(ArgError::new(
            name,
            Rule::AtMost("3155760000 seconds (100 years)"),
            value,
        )),
    }
}

/// An optional trailing `cost` (1 when absent); more arguments are an arity error.
fn optional_cost(rest: &[&[u8]]) -> Result<u64, CommandError> {
    match rest {
        [] => Ok(1),
        [cost] => Ok(positive_integer("cost", cost)?),
        _ => Err(CommandError::WrongArity),
    }
}

/// The algorithm named by `RL.PEEK` / `RL.REFUND` (case-insensitive).
pub fn algorithm(name: &[u8]) -> Result<Kind, CommandError> {
    Kind::ALL
        .iter()
        .copied()
        .find(|kind| {
            kind.command_name()
                .is_some_and(|known| name.eq_ignore_ascii_case(known))
        })
        .ok_or_else(|| {
            CommandError::Argument(ArgError::new(
                "algorithm",
                Rule::Must("be TOKENBUCKET, SLIDING, FIXED or SLIDINGLOG"),
                name,
            ))
        })
}

/// `capacity rate [cost]` of `RL.TOKENBUCKET`.
pub fn token_bucket(args: &[&[u8]]) -> Result<TokenBucketParams, CommandError> {
    let [capacity_arg, rate_arg, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let capacity = positive_integer("capacity", capacity_arg)?;
    let rate = positive_decimal("rate", rate_arg)?;
    let cost = optional_cost(rest)?;
    let params = TokenBucketParams::new(capacity, rate, cost).map_err(|error| match error {
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

/// `limit window [cost]` of `RL.SLIDING` and `RL.FIXED`.
pub fn window(args: &[&[u8]]) -> Result<WindowParams, CommandError> {
    let [limit_arg, window_arg, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = positive_integer("limit", limit_arg)?;
    let window_us = duration_us("window", window_arg)?;
    let cost = optional_cost(rest)?;
    WindowParams::new(limit, window_us, cost).map_err(|error| {
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

/// `limit window [cost]` of `RL.SLIDINGLOG`, with the server's `max-log-entries`.
pub fn sliding_log(args: &[&[u8]], max_entries: u64) -> Result<SlidingLogParams, CommandError> {
    let [limit_arg, window_arg, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = positive_integer("limit", limit_arg)?;
    let window_us = duration_us("window", window_arg)?;
    let cost = optional_cost(rest)?;
    SlidingLogParams::new(limit, window_us, cost, max_entries).map_err(|error| match error {
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
    let [burst_arg, count_arg, period_arg, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let max_burst = integer("max_burst", burst_arg)?;
    let count = integer("count", count_arg)?;
    let period = integer("period", period_arg)?;
    let quantity = match rest {
        [] => 1,
        [quantity] => integer("quantity", quantity)?,
        _ => return Err(CommandError::WrongArity),
    };
    GcraParams::new(max_burst, count, period, quantity).map_err(|error| {
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
                "period / count × (max_burst + 1)",
                Rule::AtMost("100 years"),
            ),
        })
    })
}

/// Room for the arguments a memo remembers, each with a length byte.
const MEMO_BYTES: usize = 64;

/// Remembers the last arguments one algorithm parsed successfully, and their parameters.
///
/// Services call a limiter with the same limits over and over, and parsing them (a decimal
/// rate especially) costs about as much as deciding the call. One entry: the arguments
/// (each prefixed with its length, so `"1" "23"` and `"12" "3"` differ), a `context` value
/// the parse also depends on (a server setting), and the parameters they gave. Arguments
/// too long to remember are parsed every time.
pub struct Memo<P> {
    last: RefCell<Option<(MemoKey, P)>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    bytes: [u8; MEMO_BYTES],
    len: usize,
    context: u64,
}

impl MemoKey {
    fn new(args: &[&[u8]], context: u64) -> Option<Self> {
        let mut key = MemoKey {
            bytes: [0; MEMO_BYTES],
            len: 0,
            context,
        };
        for arg in args {
            let len = u8::try_from(arg.len()).ok()?;
            let end = key.len.checked_add(1)?.checked_add(arg.len())?;
            let (length_byte, rest) = key.bytes.get_mut(key.len..end)?.split_first_mut()?;
            *length_byte = len;
            rest.copy_from_slice(arg);
            key.len = end;
        }
        Some(key)
    }

    /// Whether `args` and `context` are what this key remembers (compared in place).
    fn matches(&self, args: &[&[u8]], context: u64) -> bool {
        if self.context != context {
            return false;
        }
        let mut rest = self.bytes.get(..self.len).unwrap_or_default();
        for arg in args {
            let Some((&len, tail)) = rest.split_first() else {
                return false;
            };
            match tail.split_at_checked(usize::from(len)) {
                Some((bytes, tail)) if bytes == *arg => rest = tail,
                _ => return false,
            }
        }
        rest.is_empty()
    }
}

impl<P: Copy> Memo<P> {
    /// An empty memo.
    pub const fn new() -> Self {
        Memo {
            last: RefCell::new(None),
        }
    }

    /// The parameters of `args`: remembered if they are the last ones parsed with the same
    /// `context`, otherwise parsed with `parse` (and remembered if valid).
    pub fn parse(
        &self,
        args: &[&[u8]],
        context: u64,
        parse: impl FnOnce(&[&[u8]]) -> Result<P, CommandError>,
    ) -> Result<P, CommandError> {
        if let Ok(last) = self.last.try_borrow() {
            if let Some((key, params)) = last.as_ref() {
                if key.matches(args, context) {
                    return Ok(*params);
                }
            }
        }
        let params = parse(args)?;
        if let (Some(key), Ok(mut last)) = (MemoKey::new(args, context), self.last.try_borrow_mut())
        {
            *last = Some((key, params));
        }
        Ok(params)
    }
}

impl<P: Copy> Default for Memo<P> {
    fn default() -> Self {
        Memo::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::CallCost;

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
        let params = token_bucket(&[b"1000000000000000", b"1000000", b"7"]).unwrap();
        assert_eq!(
            (params.capacity(), params.interval_ns(), params.cost()),
            (1_000_000_000_000_000, 1_000, 7)
        );
    }

    #[test]
    fn durations_are_seconds_in_microseconds() {
        assert_eq!(duration_us("window", b"0.25"), Ok(250_000));
        assert_eq!(duration_us("window", b"86400"), Ok(86_400_000_000));
        assert_eq!(duration_us("window", b"0.001"), Ok(1_000));
        assert_eq!(
            duration_us("window", b"0.0010001"),
            Ok(1_001),
            "rounded up to the µs"
        );
        assert_eq!(
            duration_us("window", b"0.0005").unwrap_err().to_string(),
            "ERR window must be at least 0.001 seconds (1 ms) (got '0.0005')"
        );
        assert_eq!(
            duration_us("window", b"1e10").unwrap_err().to_string(),
            "ERR window must be at most 3155760000 seconds (100 years) (got '1e10')"
        );
        assert_eq!(
            duration_us("window", b"-1").unwrap_err().to_string(),
            "ERR window must be greater than 0 (got '-1')"
        );
    }

    #[test]
    fn sliding_log_limits_are_bounded_by_the_setting() {
        let params = sliding_log(&[b"100", b"60", b"3"], 10_000).unwrap();
        assert_eq!(
            (params.limit(), params.window_us(), params.cost()),
            (100, 60_000_000, 3)
        );
        assert_eq!(
            sliding_log(&[b"10001", b"60"], 10_000)
                .unwrap_err()
                .to_string(),
            "ERR limit must be at most 10000 (the ratelimit.max-log-entries setting) (got '10001')"
        );
    }

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
        let message = |args: &[&[u8]]| throttle(args).unwrap_err().to_string();
        assert_eq!(
            message(&[b"x", b"30", b"60"]),
            "ERR max_burst must be an integer (got 'x')"
        );
        assert_eq!(
            message(&[b"-1", b"30", b"60"]),
            "ERR max_burst must be at least 0 (got '-1')"
        );
        assert_eq!(
            message(&[b"1", b"0", b"60"]),
            "ERR count / period must be a non-zero rate of at most 1e9 per second (zero rates are not supported)"
        );
        assert_eq!(
            message(&[b"1", b"-1", b"60"]),
            "ERR count and period must have the same sign"
        );
        assert_eq!(throttle(&[b"1", b"1"]), Err(CommandError::WrongArity));
    }

    #[test]
    fn the_memo_returns_what_parsing_would() {
        let memo = Memo::new();
        let parsed = |args: &[&[u8]]| memo.parse(args, 0, token_bucket);
        let first = parsed(&[b"10", b"0.5"]).unwrap();
        assert_eq!(parsed(&[b"10", b"0.5"]), Ok(first));
        assert_eq!(
            parsed(&[b"1", b"00.5"]).unwrap().capacity(),
            1,
            "length-prefixed, not joined"
        );
        assert_eq!(parsed(&[b"10", b"0.5", b"2"]).unwrap().cost(), 2);
        assert_eq!(
            parsed(&[b"0", b"1"]),
            token_bucket(&[b"0", b"1"]),
            "errors are not remembered"
        );
        assert_eq!(parsed(&[b"10", b"0.5"]), Ok(first));
        let log = Memo::new();
        assert!(
            log.parse(&[b"100", b"60"], 1000, |a| sliding_log(a, 1000))
                .is_ok()
        );
        assert!(
            log.parse(&[b"100", b"60"], 10, |a| sliding_log(a, 10))
                .is_err(),
            "context counts"
        );
        let long = vec![b'1'; 300];
        assert!(
            memo.parse(&[&long, b"1"], 0, token_bucket).is_err(),
            "too long to remember: parsed"
        );
    }

    #[test]
    fn counts_arguments() {
        assert_eq!(token_bucket(&[b"1"]), Err(CommandError::WrongArity));
        assert_eq!(
            token_bucket(&[b"1", b"1", b"1", b"1"]),
            Err(CommandError::WrongArity)
        );
    }

    #[test]
    fn names_algorithms_case_insensitively() {
        assert_eq!(algorithm(b"tokenbucket"), Ok(Kind::TokenBucket));
        assert_eq!(algorithm(b"TokenBucket"), Ok(Kind::TokenBucket));
        assert_eq!(
            algorithm(b"leaky").unwrap_err().to_string(),
            "ERR algorithm must be TOKENBUCKET, SLIDING, FIXED or SLIDINGLOG (got 'leaky')"
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
            (&["10", "1", "0"],  "ERR cost must be greater than 0 (got '0')"),
            (&["10", "1", "x"],  "ERR cost must be a positive integer (got 'x')"),
            (&["10", "1e-400"],  "ERR capacity / rate must be at most 100 years (the time an empty bucket takes to refill)"),
            (&["1000000000000000", "1"], "ERR capacity / rate must be at most 100 years (the time an empty bucket takes to refill)"),
        ];
        for (args, expected) in cases {
            assert_eq!(message(args), *expected, "{args:?}");
        }
    }
}
