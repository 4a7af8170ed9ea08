//! A single-key call: the algorithm's parameters, then `[cost]`, then options.

use super::quota::{arity, quota};
use super::{Settings, positive_integer};
use crate::core::grant::Grant;
use crate::error::{ArgError, CommandError, Rule};
use crate::kinds::{Kind, Quota};

/// What a single-key call asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallArgs {
    /// The quota, with the call's cost.
    pub quota: Quota,
    /// Whether a part of the cost may be granted.
    pub grant: Grant,
}

/// `<parameters> [cost] [PARTIAL [MIN m]]` of `RL.TOKENBUCKET`, `RL.SLIDING`, `RL.FIXED`,
/// `RL.SLIDINGLOG`, and of `RL.PEEK` after its algorithm name.
pub fn call(kind: Kind, args: &[&[u8]], settings: Settings) -> Result<CallArgs, CommandError> {
    let (quota, mut options) = with_cost(kind, args, settings)?;
    let mut grant = Grant::Whole;
    while let Some((&option, rest)) = options.split_first() {
        if grant == Grant::Whole && option.eq_ignore_ascii_case(b"PARTIAL") {
            (grant, options) = partial(rest, quota.cost())?;
        } else {
            return Err(ArgError::new("option", Rule::Must("be PARTIAL [MIN m]"), option).into());
        }
    }
    Ok(CallArgs { quota, grant })
}

/// `<parameters> [cost]` of `RL.REFUND` after its algorithm name.
pub fn refund(kind: Kind, args: &[&[u8]], settings: Settings) -> Result<Quota, CommandError> {
    match with_cost(kind, args, settings)? {
        (quota, []) => Ok(quota),
        _ => Err(CommandError::WrongArity),
    }
}

/// The quota of `<parameters> [cost]` and the arguments after them.
fn with_cost<'a, 'b>(
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
    arg.eq_ignore_ascii_case(b"PARTIAL")
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
    use crate::core::CallCost;

    const SETTINGS: Settings = Settings {
        max_log_entries: 10_000,
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
            (&["10", "1", "1", "extra"], "ERR option must be PARTIAL [MIN m] (got 'extra')"),
            (&["10", "1", "PARTIAL", "PARTIAL"], "ERR option must be PARTIAL [MIN m] (got 'PARTIAL')"),
            (&["10", "1", "5", "PARTIAL", "MIN", "6"], "ERR MIN must be at most the cost (got '6')"),
            (&["10", "1", "5", "PARTIAL", "MIN", "0"], "ERR MIN must be greater than 0 (got '0')"),
            (&["10", "1", "PARTIAL", "MIN", "x"], "ERR MIN must be a positive integer (got 'x')"),
            (&["10", "1", "0"], "ERR cost must be greater than 0 (got '0')"),
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
