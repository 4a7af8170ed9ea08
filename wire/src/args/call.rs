//! A single-key call: the algorithm's parameters, then `[cost]`, then options.

use super::quota::{arity, concurrency_peek, quota};
use super::value::{Settings, positive_integer};
use crate::error::{ArgError, CommandError, Rule};
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_core::number::{NumberError, parse_positive_integer};
use redis_ratelimit_core::time::NS_PER_MS;

/// What a single-key call asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallArgs {
    /// The quota, with the call's cost.
    pub quota: Quota,
    /// Whether a part of the cost may be granted.
    pub grant: Grant,
}

/// `<parameters> [cost] [PARTIAL [MIN m]]` of `RL.TOKENBUCKET`, `RL.SLIDING`, `RL.FIXED`,
/// `RL.SLIDINGLOG`, and of `RL.PEEK` after its algorithm name; token buckets also take
/// `MAXWAIT ms` (not with `PARTIAL`).
pub fn call(kind: Kind, args: &[&[u8]], settings: Settings) -> Result<CallArgs, CommandError> {
    let (mut quota, mut options) = with_cost(kind, args, settings)?;
    let (mut grant, mut max_wait_given) = (Grant::Whole, false);
    while let Some((&option, rest)) = options.split_first() {
        if grant == Grant::Whole && option.eq_ignore_ascii_case(b"PARTIAL") {
            (grant, options) = partial(rest, quota.cost())?;
        } else if !max_wait_given && option.eq_ignore_ascii_case(b"MAXWAIT") {
            let (&wait, after) = rest.split_first().ok_or(CommandError::WrongArity)?;
            quota = with_max_wait(quota, wait)?;
            (max_wait_given, options) = (true, after);
        } else {
            let rule = match kind {
                Kind::TokenBucket => Rule::Must("be PARTIAL [MIN m] or MAXWAIT ms"),
                _ => Rule::Must("be PARTIAL [MIN m]"),
            };
            return Err(ArgError::new("option", rule, option).into());
        }
    }
    if max_wait_given && grant != Grant::Whole {
        return Err(
            ArgError::combination("PARTIAL and MAXWAIT", Rule::Must("not be combined")).into(),
        );
    }
    Ok(CallArgs { quota, grant })
}

/// `quota` paced by `MAXWAIT wait` (milliseconds, at most a day): a token bucket's calls
/// may then be admitted with a wait.
fn with_max_wait(quota: Quota, wait: &[u8]) -> Result<Quota, CommandError> {
    let too_long = || ArgError::new("MAXWAIT", Rule::AtMost("86400000 ms (1 day)"), wait);
    let Quota::TokenBucket(params) = quota else {
        return Err(CommandError::Message(
            "ERR MAXWAIT paces token buckets only (RL.TOKENBUCKET)",
        ));
    };
    let wait_ms = match parse_positive_integer(wait) {
        Ok(ms) => ms,
        Err(NumberError::Zero) => 0,
        Err(NumberError::TooLarge) => return Err(too_long().into()),
        Err(NumberError::Negative) => {
            return Err(ArgError::new("MAXWAIT", Rule::NotNegative, wait).into());
        }
        Err(error) => {
            let rule = Rule::for_number(error, Rule::Must("be a whole number of milliseconds"));
            return Err(ArgError::new("MAXWAIT", rule, wait).into());
        }
    };
    let wait_ns = wait_ms.checked_mul(NS_PER_MS).ok_or_else(too_long)?;
    let paced = params.with_max_wait_ns(wait_ns).map_err(|_| too_long())?;
    Ok(Quota::TokenBucket(paced))
}

/// `RL.PEEK`'s arguments after its algorithm name: a call's, or `limit` for an in-flight
/// limit (a peek has no holder to acquire for).
pub fn peek(kind: Kind, args: &[&[u8]], settings: Settings) -> Result<CallArgs, CommandError> {
    match kind {
        Kind::Concurrency => Ok(CallArgs {
            quota: concurrency_peek(args, settings.max_holders)?,
            grant: Grant::Whole,
        }),
        _ => call(kind, args, settings),
    }
}

/// `<parameters> [cost]` of `RL.REFUND` after its algorithm name.
pub fn refund(kind: Kind, args: &[&[u8]], settings: Settings) -> Result<Quota, CommandError> {
    if kind == Kind::Concurrency {
        return Err(CommandError::Message(
            "ERR in-flight slots are given back with RL.RELEASE key holder",
        ));
    }
    match with_cost(kind, args, settings)? {
        (quota, []) => Ok(quota),
        _ => Err(CommandError::WrongArity),
    }
}

/// The quota of `<parameters> [cost]` and the arguments after them.
pub(super) fn with_cost<'a, 'b>(
    kind: Kind,
    args: &'a [&'b [u8]],
    settings: Settings,
) -> Result<(Quota, &'a [&'b [u8]]), CommandError> {
    let (params, rest) = args
        .split_at_checked(arity(kind))
        .ok_or(CommandError::WrongArity)?;
    let quota = quota(kind, params, settings)?;
    match rest.split_first() {
        Some((&cost, rest)) if !is_option(cost) => {
            Ok((quota.with_cost(positive_integer("cost", cost)?), rest))
        }
        _ => Ok((quota, rest)),
    }
}

/// Whether an argument after the parameters is an option's name rather than the cost.
fn is_option(arg: &[u8]) -> bool {
    arg.eq_ignore_ascii_case(b"PARTIAL") || arg.eq_ignore_ascii_case(b"MAXWAIT")
}

/// The grant of `PARTIAL [MIN m]` (`rest` follows `PARTIAL`), and the arguments after it.
pub(super) fn partial<'a, 'b>(
    rest: &'a [&'b [u8]],
    cost: u64,
) -> Result<(Grant, &'a [&'b [u8]]), CommandError> {
    match rest {
        [keyword, min, rest @ ..] if keyword.eq_ignore_ascii_case(b"MIN") => {
            let at_least = positive_integer("MIN", min)?;
            if at_least > cost {
                return Err(ArgError::new("MIN", Rule::AtMost("the cost"), min).into());
            }
            Ok((Grant::Partial { min: at_least }, rest))
        }
        [keyword] if keyword.eq_ignore_ascii_case(b"MIN") => Err(CommandError::WrongArity),
        rest => Ok((Grant::Partial { min: 1 }, rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_ratelimit_core::CallCost;

    const SETTINGS: Settings = Settings {
        max_log_entries: 10_000,
        max_holders: 1_000,
    };

    fn parsed(kind: Kind, args: &[&str]) -> Result<CallArgs, CommandError> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        call(kind, &bytes, SETTINGS)
    }

    fn message(kind: Kind, args: &[&str]) -> String {
        parsed(kind, args).unwrap_err().to_string()
    }

    #[test]
    fn cost_and_partial_follow_the_parameters() {
        let call = parsed(Kind::TokenBucket, &["10", "0.5"]).unwrap();
        assert_eq!((call.quota.cost(), call.grant), (1, Grant::Whole));
        let call = parsed(Kind::TokenBucket, &["10", "0.5", "7"]).unwrap();
        assert_eq!((call.quota.cost(), call.grant), (7, Grant::Whole));
        let call = parsed(Kind::SlidingWindow, &["10", "60", "8", "partial"]).unwrap();
        assert_eq!(
            (call.quota.cost(), call.grant),
            (8, Grant::Partial { min: 1 })
        );
        let call = parsed(Kind::FixedWindow, &["10", "60", "8", "PARTIAL", "MIN", "8"]).unwrap();
        assert_eq!(call.grant, Grant::Partial { min: 8 });
        let call = parsed(Kind::SlidingLog, &["10", "60", "PARTIAL"]).unwrap();
        assert_eq!(
            (call.quota.cost(), call.grant),
            (1, Grant::Partial { min: 1 })
        );
        let Quota::TokenBucket(params) = parsed(Kind::TokenBucket, &["10", "2"]).unwrap().quota
        else {
            panic!("a token bucket")
        };
        assert_eq!(params.with_cost(3).cost(), 3);
    }

    #[rustfmt::skip]
    #[test]
    fn refuses_bad_options_with_the_rule() {
        let cases: &[(&[&str], &str)] = &[
            (&["10", "1", "1", "extra"], "ERR option must be PARTIAL [MIN m] or MAXWAIT ms (got 'extra')"),
            (&["10", "1", "PARTIAL", "PARTIAL"], "ERR option must be PARTIAL [MIN m] or MAXWAIT ms (got 'PARTIAL')"),
            (&["10", "1", "5", "PARTIAL", "MIN", "6"], "ERR MIN must be at most the cost (got '6')"),
            (&["10", "1", "5", "PARTIAL", "MIN", "0"], "ERR MIN must be greater than 0 (got '0')"),
            (&["10", "1", "PARTIAL", "MIN", "x"], "ERR MIN must be a positive integer (got 'x')"),
            (&["10", "1", "0"], "ERR cost must be greater than 0 (got '0')"),
            (&["10", "1", "MAXWAIT", "x"], "ERR MAXWAIT must be a whole number of milliseconds (got 'x')"),
            (&["10", "1", "MAXWAIT", "-1"], "ERR MAXWAIT must be at least 0 (got '-1')"),
            (&["10", "1", "MAXWAIT", "86400001"], "ERR MAXWAIT must be at most 86400000 ms (1 day) (got '86400001')"),
            (&["10", "1", "MAXWAIT", "99999999999999999999"], "ERR MAXWAIT must be at most 86400000 ms (1 day) (got '99999999999999999999')"),
            (&["10", "1", "MAXWAIT", "5", "PARTIAL"], "ERR PARTIAL and MAXWAIT must not be combined"),
            (&["10", "1", "MAXWAIT", "5", "MAXWAIT", "5"], "ERR option must be PARTIAL [MIN m] or MAXWAIT ms (got 'MAXWAIT')"),
            (&["10", "1", "x"], "ERR cost must be a positive integer (got 'x')"),
        ];
        for (args, expected) in cases {
            assert_eq!(message(Kind::TokenBucket, args), *expected, "{args:?}");
        }
        assert_eq!(parsed(Kind::TokenBucket, &["10"]), Err(CommandError::WrongArity));
        assert_eq!(
            parsed(Kind::TokenBucket, &["10", "1", "PARTIAL", "MIN"]),
            Err(CommandError::WrongArity)
        );
    }

    #[test]
    fn maxwait_paces_token_buckets_only() {
        let Quota::TokenBucket(params) = parsed(Kind::TokenBucket, &["1", "10", "MAXWAIT", "250"])
            .unwrap()
            .quota
        else {
            panic!("a token bucket")
        };
        assert_eq!(params.max_wait_ns(), 250_000_000);
        let Quota::TokenBucket(params) =
            parsed(Kind::TokenBucket, &["1", "10", "2", "maxwait", "0"])
                .unwrap()
                .quota
        else {
            panic!("a token bucket")
        };
        assert_eq!((params.max_wait_ns(), params.cost()), (0, 2));
        assert_eq!(
            message(Kind::FixedWindow, &["10", "60", "MAXWAIT", "5"]),
            "ERR MAXWAIT paces token buckets only (RL.TOKENBUCKET)"
        );
    }

    #[test]
    fn refunds_take_a_cost_and_nothing_else() {
        let args: [&[u8]; 3] = [b"10", b"1", b"4"];
        assert_eq!(
            refund(Kind::TokenBucket, &args, SETTINGS).unwrap().cost(),
            4
        );
        let args: [&[u8]; 4] = [b"10", b"1", b"4", b"PARTIAL"];
        assert_eq!(
            refund(Kind::TokenBucket, &args, SETTINGS),
            Err(CommandError::WrongArity)
        );
    }
}
