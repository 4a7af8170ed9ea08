//! Parsing command arguments into validated algorithm parameters.
//!
//! Pure functions over byte slices, so every error message is unit-tested without a server.
//! Arity is checked by the glue before these run.

use crate::core::number::{Decimal, parse_positive_integer};
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
        .into_iter()
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

#[cfg(test)]
mod tests {
    use super::*;

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
