//! Parsing command arguments into validated parameters.
//!
//! Pure functions over byte slices, so every error message is unit-tested without a server.
//!
//! - this module reads numbers, durations, algorithm names, and the server settings parsing
//!   depends on;
//! - [`quota`] reads each algorithm's parameters;
//! - [`call`] reads a single-key call (`[cost] [PARTIAL [MIN m]]` after the parameters);
//! - [`multi`] reads `RL.MULTI`;
//! - [`memo`] remembers the last arguments each command parsed;
//! - [`remembered`] says what each command remembers, with its parse as a function of it.

pub mod call;
pub mod memo;
pub mod multi;
pub mod quota;
pub mod remembered;

use crate::core::number::{Decimal, parse_positive_integer};
use crate::core::time::{MAX_WINDOW_US, MIN_WINDOW_US, US_PER_SECOND};
use crate::error::{ArgError, CommandError, Rule};
use crate::kinds::Kind;

pub use call::{CallArgs, call, peek, refund};
pub use memo::Memo;
pub use quota::throttle;

/// The server settings that bound what arguments are accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `ratelimit.max-log-entries`: the largest sliding log `limit`.
    pub max_log_entries: u64,
    /// `ratelimit.max-holders`: the largest in-flight `limit`.
    pub max_holders: u64,
}

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

/// The algorithm an ALGORITHM argument names (case-insensitive).
pub fn algorithm(name: &[u8]) -> Result<Kind, CommandError> {
    Kind::named(name).ok_or_else(|| ArgError::new("algorithm", Rule::Algorithm, name).into())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn names_algorithms_case_insensitively() {
        assert_eq!(algorithm(b"tokenbucket"), Ok(Kind::TokenBucket));
        assert_eq!(algorithm(b"TokenBucket"), Ok(Kind::TokenBucket));
        assert_eq!(algorithm(b"gcra"), Ok(Kind::Gcra));
        assert_eq!(
            algorithm(b"leaky").unwrap_err().to_string(),
            "ERR algorithm must be TOKENBUCKET, SLIDING, FIXED, SLIDINGLOG, GCRA or CONCURRENCY (got 'leaky')"
        );
    }
}
