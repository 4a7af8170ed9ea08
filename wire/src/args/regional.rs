//! `RL.REGIONAL` and `RL.REGIONLEASE`: a region's admission under one quota across regions
//! (`docs/regions.md`), and the lease a region's agent installs for it.
//!
//! A lease lives in a plain Redis string: its units in decimal, and the key's absolute
//! expiry (Unix ms) as the lease's end, so it can never outlive its lifetime whatever the
//! agent does. [`stored_units`] is what both the module and the Functions library accept as
//! such a string.

use super::call::with_cost;
use super::quota;
use super::value::{Settings, algorithm};
use crate::error::{ArgError, CommandError, Rule};
use std::ffi::CStr;

use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_core::number::{NumberError, parse_positive_integer};
use redis_ratelimit_core::regional::Why;
use redis_ratelimit_core::time::{MAX_NOW_US, US_PER_MS};

/// The most units a lease holds: the Functions library counts them in doubles, exact to
/// 2^53, so both sides keep well within that.
pub const MAX_LEASE_UNITS: u64 = 1_000_000_000_000_000;

/// The error for a key whose value is a string that is not a lease.
pub const NOT_A_LEASE: CommandError = CommandError::Message(
    "ERR the lease key holds a string that is not a lease (units with an expiry)",
);

/// The error for `RL.REGIONAL` given one key for both the floor and the lease.
pub const SAME_KEY: CommandError = CommandError::Message(
    "ERR RL.REGIONAL needs two keys: the floor's limiter and the lease (the same key was given twice)",
);

/// `ALGORITHM <parameters> [cost]` of `RL.REGIONAL` after its two keys: the floor's quota,
/// of the call's cost; for an in-flight floor `CONCURRENCY limit holder ttl_ms`, `RL.ACQUIRE`'s
/// arguments (a call takes one slot: no cost).
pub fn floor(args: &[&[u8]], settings: Settings) -> Result<Quota, CommandError> {
    let (name, rest) = args.split_first().ok_or(CommandError::WrongArity)?;
    let kind = algorithm(name)?;
    if kind == Kind::Concurrency {
        return quota::acquire(rest, settings.max_holders);
    }
    match with_cost(kind, rest, settings)? {
        (quota, []) => Ok(quota),
        (_, [extra, ..]) => {
            Err(ArgError::new("option", Rule::Must("not follow the cost"), extra).into())
        }
    }
}

/// A lease to install: `units expires_at_ms` of `RL.REGIONLEASE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseArgs {
    /// The units granted (0: home answered, and granted nothing).
    pub units: u64,
    /// The lease's end, an absolute Unix time in milliseconds (the key's expiry).
    pub expires_at_ms: i64,
}

/// `units expires_at_ms` of `RL.REGIONLEASE`, checked against the server's `now_us`: an
/// expiry at or before now is refused (such a lease would be gone already).
pub fn lease(args: &[&[u8]], now_us: i64) -> Result<LeaseArgs, CommandError> {
    let [units_arg, expiry_arg] = args else {
        return Err(CommandError::WrongArity);
    };
    let units = lease_units(units_arg)?;
    let expires_at_ms = match parse_positive_integer(expiry_arg) {
        Ok(ms) if ms <= max_expiry_ms() => i64::try_from(ms).unwrap_or(i64::MAX),
        Ok(_) | Err(NumberError::TooLarge) => {
            let rule = Rule::AtMost("4611686018427 (2116-02-20)");
            return Err(ArgError::new("expires_at_ms", rule, expiry_arg).into());
        }
        Err(error) => {
            let rule = Rule::for_number(error, Rule::PositiveInteger);
            return Err(ArgError::new("expires_at_ms", rule, expiry_arg).into());
        }
    };
    if expires_at_ms.saturating_mul(US_PER_MS as i64) <= now_us {
        return Err(ArgError::new(
            "expires_at_ms",
            Rule::Must("be after the server's time (the lease would have ended)"),
            expiry_arg,
        )
        .into());
    }
    Ok(LeaseArgs {
        units,
        expires_at_ms,
    })
}

/// The last instant a lease may end at: the last instant rate limits are computed for.
fn max_expiry_ms() -> u64 {
    u64::try_from(MAX_NOW_US).unwrap_or(u64::MAX) / US_PER_MS
}

/// A lease's units: 0 to [`MAX_LEASE_UNITS`].
fn lease_units(arg: &[u8]) -> Result<u64, CommandError> {
    let units = match parse_positive_integer(arg) {
        Ok(units) => units,
        Err(NumberError::Zero) => 0,
        Err(NumberError::Negative) => {
            return Err(ArgError::new("units", Rule::NotNegative, arg).into());
        }
        Err(NumberError::TooLarge) => u64::MAX,
        Err(error) => {
            let rule = Rule::for_number(error, Rule::Must("be a whole number of units"));
            return Err(ArgError::new("units", rule, arg).into());
        }
    };
    if units > MAX_LEASE_UNITS {
        return Err(ArgError::new("units", Rule::AtMost("1000000000000000"), arg).into());
    }
    Ok(units)
}

/// The units of a string stored as a lease: decimal digits, no sign, no leading zero, at
/// most [`MAX_LEASE_UNITS`]; `None` for any other string.
pub fn stored_units(value: &[u8]) -> Option<u64> {
    let canonical = match value {
        [b'0'] => true,
        [first, ..] => first.is_ascii_digit() && *first != b'0' && value.len() <= 16,
        [] => false,
    };
    if !canonical || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let units = value.iter().try_fold(0u64, |units, digit| {
        units
            .checked_mul(10)
            .and_then(|units| units.checked_add(u64::from(digit.wrapping_sub(b'0'))))
    })?;
    (units <= MAX_LEASE_UNITS).then_some(units)
}

/// Every reason a regional decision gives.
pub const REASONS: [Why; 4] = [
    Why::Floor,
    Why::Lease,
    Why::LeaseExhausted,
    Why::HomeUnreachable,
];

/// The word `RL.REGIONAL`'s reply says `why` in.
pub fn why_word(why: Why) -> &'static CStr {
    match why {
        Why::Floor => c"floor",
        Why::Lease => c"lease",
        Why::LeaseExhausted => c"lease_exhausted",
        Why::HomeUnreachable => c"home_unreachable",
    }
}

/// The reason a word of `RL.REGIONAL`'s reply says, if any.
pub fn why_named(word: &[u8]) -> Option<Why> {
    REASONS
        .into_iter()
        .find(|why| why_word(*why).to_bytes() == word)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: Settings = Settings {
        max_log_entries: 100,
        max_holders: 10,
    };
    const NOW_US: i64 = 1_700_000_000_000_000;

    fn words(text: &str) -> Vec<&[u8]> {
        text.split(' ').map(str::as_bytes).collect()
    }

    fn floor_error(text: &str) -> String {
        floor(&words(text), SETTINGS).unwrap_err().to_string()
    }

    fn lease_error(text: &str) -> String {
        lease(&words(text), NOW_US).unwrap_err().to_string()
    }

    #[test]
    fn a_floor_is_any_algorithm_with_a_cost_or_an_in_flight_acquire() {
        let quota = floor(&words("TOKENBUCKET 10 1 3"), SETTINGS).unwrap();
        assert_eq!((quota.kind(), quota.cost()), (Kind::TokenBucket, 3));
        let quota = floor(&words("gcra 5 10 60"), SETTINGS).unwrap();
        assert_eq!((quota.kind(), quota.cost()), (Kind::Gcra, 1));
        for kind in ["SLIDING", "FIXED", "SLIDINGLOG"] {
            let quota = floor(&words(&format!("{kind} 10 60")), SETTINGS).unwrap();
            assert_eq!(quota.cost(), 1);
        }
        // RL.ACQUIRE's arguments, parsed by its own parser.
        let quota = floor(&words("concurrency 3 h1 1000"), SETTINGS).unwrap();
        assert_eq!(
            Ok(quota),
            quota::acquire(&words("3 h1 1000"), SETTINGS.max_holders)
        );
    }

    #[test]
    fn floor_errors_say_what_is_wrong() {
        assert_eq!(
            floor_error("CONCURRENCY 10 1000"),
            "ERR wrong number of arguments"
        );
        assert_eq!(
            floor_error("CONCURRENCY 10 h 1000 1"),
            "ERR wrong number of arguments"
        );
        assert_eq!(
            floor_error("CONCURRENCY 11 h 1000"),
            quota::acquire(&words("11 h 1000"), SETTINGS.max_holders)
                .unwrap_err()
                .to_string()
        );
        // The ALGORITHM rule's text (pinned in full in `value.rs`'s tests).
        assert_eq!(
            floor_error("LEAKY 10 1"),
            algorithm(b"LEAKY").unwrap_err().to_string()
        );
        assert_eq!(
            floor_error("TOKENBUCKET 10 1 2 PARTIAL"),
            "ERR option must not follow the cost (got 'PARTIAL')"
        );
        assert_eq!(
            floor_error("TOKENBUCKET 10 1 0"),
            "ERR cost must be greater than 0 (got '0')"
        );
        assert_eq!(
            floor_error("FIXED 0 60"),
            "ERR limit must be greater than 0 (got '0')"
        );
        assert_eq!(floor_error("FIXED 10"), "ERR wrong number of arguments");
        assert_eq!(floor(&[], SETTINGS), Err(CommandError::WrongArity));
    }

    #[test]
    fn a_lease_is_units_until_an_instant_after_now() {
        let now_ms = NOW_US / 1_000;
        let later = (now_ms + 1).to_string();
        assert_eq!(
            lease(&[b"5", later.as_bytes()], NOW_US),
            Ok(LeaseArgs {
                units: 5,
                expires_at_ms: now_ms + 1
            })
        );
        assert_eq!(
            lease(&[b"0", later.as_bytes()], NOW_US).map(|lease| lease.units),
            Ok(0)
        );
        let now = now_ms.to_string();
        assert_eq!(
            lease(&[b"5", now.as_bytes()], NOW_US)
                .unwrap_err()
                .to_string(),
            format!(
                "ERR expires_at_ms must be after the server's time (the lease would have ended) (got '{now}')"
            )
        );
    }

    #[test]
    fn lease_errors_say_what_is_wrong() {
        assert_eq!(
            lease_error("-1 1800000000000"),
            "ERR units must be at least 0 (got '-1')"
        );
        assert_eq!(
            lease_error("1000000000000001 1800000000000"),
            "ERR units must be at most 1000000000000000 (got '1000000000000001')"
        );
        assert_eq!(
            lease_error("99999999999999999999999 1800000000000"),
            "ERR units must be at most 1000000000000000 (got '99999999999999999999999')"
        );
        assert_eq!(
            lease_error("x 1800000000000"),
            "ERR units must be a whole number of units (got 'x')"
        );
        assert_eq!(
            lease_error("5 0"),
            "ERR expires_at_ms must be greater than 0 (got '0')"
        );
        assert_eq!(
            lease_error("5 soon"),
            "ERR expires_at_ms must be a positive integer (got 'soon')"
        );
        assert_eq!(
            lease_error("5 4611686018428"),
            "ERR expires_at_ms must be at most 4611686018427 (2116-02-20) (got '4611686018428')"
        );
        assert!(lease(&[b"5", b"4611686018427"], NOW_US).is_ok());
        assert_eq!(lease_error("5"), "ERR wrong number of arguments");
    }

    #[test]
    fn every_reason_has_one_word() {
        let words: Vec<&str> = REASONS
            .iter()
            .map(|why| why_word(*why).to_str().unwrap())
            .collect();
        assert_eq!(
            words,
            ["floor", "lease", "lease_exhausted", "home_unreachable"]
        );
        for why in REASONS {
            assert_eq!(why_named(why_word(why).to_bytes()), Some(why));
        }
        assert_eq!(why_named(b"FLOOR"), None);
    }

    #[test]
    fn only_canonical_decimals_are_stored_leases() {
        assert_eq!(stored_units(b"0"), Some(0));
        assert_eq!(stored_units(b"42"), Some(42));
        assert_eq!(stored_units(b"1000000000000000"), Some(MAX_LEASE_UNITS));
        for not_a_lease in [
            &b""[..],
            b"007",
            b"-1",
            b"+1",
            b"1.0",
            b" 1",
            b"1000000000000001",
            b"99999999999999999",
            b"hello",
        ] {
            assert_eq!(stored_units(not_a_lease), None, "{not_a_lease:?}");
        }
    }
}
