//! What each command remembers of its arguments, and its parse as a function of exactly that.
//!
//! The glue keeps one [`Memo`](super::Memo) per command and hands it one of these functions:
//! each takes the arguments the memo remembers and a context the memo compares, and nothing
//! else, so a remembered parse is always the parse a fresh call would get.
//!
//! | command | remembered arguments | context |
//! |---|---|---|
//! | `RL.TOKENBUCKET`, `RL.SLIDING`, `RL.FIXED`, `RL.SLIDINGLOG` | after the key | the algorithm, the settings |
//! | `RL.PEEK`, `RL.REFUND` | after the key (the algorithm name included) | the settings |
//! | `CL.THROTTLE` | after the key | none |
//! | `RL.MULTI` | after the keys | the key count, the settings |
//! | `RL.REGIONAL` | after the two keys (an in-flight call's holder included: each holder a new parse) | the settings |
//!
//! `RL.ACQUIRE`, `RL.RELEASE` and `RL.REGIONLEASE` are not remembered (their holder changes with every call);
//! the key names of `RL.MULTI` are checked outside the memo (repeats, types) and only name a
//! key in an error, which is never remembered.

use super::call::{self, CallArgs};
use super::multi::{self, LimitsError, MultiArgs};
use super::quota;
use super::value::{Settings, algorithm};
use crate::error::CommandError;
use redis_ratelimit_core::gcra::GcraParams;
use redis_ratelimit_core::kinds::{Kind, Quota};

/// What `RL.MULTI`'s parse depends on besides the arguments after its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultiContext {
    /// `numkeys`: one limit per key.
    pub key_count: usize,
    /// The server settings.
    pub settings: Settings,
}

/// A single-key limiter command: the arguments after the key.
pub fn limiter_call(
    args: &[&[u8]],
    (kind, settings): (Kind, Settings),
) -> Result<CallArgs, CommandError> {
    call::call(kind, args, settings)
}

/// `RL.PEEK`: `ALGORITHM args...` after the key.
pub fn peek(args: &[&[u8]], settings: Settings) -> Result<CallArgs, CommandError> {
    after_algorithm(args, |kind, rest| call::peek(kind, rest, settings))
}

/// `RL.REFUND`: `ALGORITHM args... [cost]` after the key.
pub fn refund(args: &[&[u8]], settings: Settings) -> Result<Quota, CommandError> {
    after_algorithm(args, |kind, rest| call::refund(kind, rest, settings))
}

/// `CL.THROTTLE`: the arguments after the key.
pub fn throttle(args: &[&[u8]], (): ()) -> Result<GcraParams, CommandError> {
    quota::throttle(args)
}

/// `RL.MULTI`: the limits and options after the keys.
pub fn multi_limits(args: &[&[u8]], context: MultiContext) -> Result<MultiArgs, LimitsError> {
    multi::limits(context.key_count, args, context.settings)
}

/// `RL.REGIONAL`: the floor's `ALGORITHM args... [cost]` after the two keys.
pub fn regional(args: &[&[u8]], settings: Settings) -> Result<Quota, CommandError> {
    super::regional::floor(args, settings)
}

/// Parses `ALGORITHM args...` with `parse` for the named algorithm.
fn after_algorithm<T>(
    arguments: &[&[u8]],
    parse: impl FnOnce(Kind, &[&[u8]]) -> Result<T, CommandError>,
) -> Result<T, CommandError> {
    let (name, rest) = arguments.split_first().ok_or(CommandError::WrongArity)?;
    parse(algorithm(name)?, rest)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::args::Memo;
    use crate::args::memo::Parse;

    const SETTINGS: [Settings; 2] = [
        Settings {
            max_log_entries: 10_000,
            max_holders: 1_000,
        },
        Settings {
            max_log_entries: 5,
            max_holders: 2,
        },
    ];

    /// Words that make valid and invalid calls of every command, often alike, so random lists
    /// repeat each other and hit the memo.
    const WORDS: &[&str] = &[
        "TOKENBUCKET",
        "SLIDING",
        "FIXED",
        "SLIDINGLOG",
        "GCRA",
        "CONCURRENCY",
        "COST",
        "WEIGHTS",
        "HOLDER",
        "PARTIAL",
        "MIN",
        "MAXWAIT",
        "1",
        "2",
        "5",
        "10",
        "60",
        "0.5",
        "0",
        "-1",
        "h",
    ];

    fn argument_list() -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(WORDS), 0..9)
    }

    fn bytes<'a>(words: &[&'a str]) -> Vec<&'a [u8]> {
        words.iter().map(|word| word.as_bytes()).collect()
    }

    /// Every call of a sequence answers through the memo what a fresh parse answers.
    fn memo_agrees<C, P, E>(
        calls: &[(Vec<&str>, C)],
        parse: Parse<C, P, E>,
    ) -> Result<(), TestCaseError>
    where
        C: Copy + Eq + std::fmt::Debug,
        P: Clone + PartialEq + std::fmt::Debug,
        E: PartialEq + std::fmt::Debug,
    {
        let memo = Memo::new();
        for (words, context) in calls {
            let args = bytes(words);
            let remembered = memo.with(&args, *context, parse, P::clone);
            prop_assert_eq!(
                remembered,
                parse(&args, *context),
                "{:?} under {:?}",
                words,
                context
            );
        }
        Ok(())
    }

    fn contexts<C: std::fmt::Debug>(
        context: impl Strategy<Value = C>,
    ) -> impl Strategy<Value = Vec<(Vec<&'static str>, C)>> {
        prop::collection::vec((argument_list(), context), 1..40)
    }

    fn settings() -> impl Strategy<Value = Settings> {
        prop::sample::select(&SETTINGS[..])
    }

    proptest! {
        #[test]
        fn single_key_calls_agree(calls in contexts((prop::sample::select(Kind::ALL), settings()))) {
            memo_agrees(&calls, limiter_call)?;
        }

        #[test]
        fn peeks_and_refunds_agree(calls in contexts(settings())) {
            memo_agrees(&calls, peek)?;
            memo_agrees(&calls, refund)?;
        }

        #[test]
        fn throttles_agree(calls in prop::collection::vec((argument_list(), Just(())), 1..40)) {
            memo_agrees(&calls, throttle)?;
        }

        #[test]
        fn multi_calls_agree(calls in contexts((1usize..4, settings()).prop_map(
            |(key_count, settings)| MultiContext { key_count, settings },
        ))) {
            memo_agrees(&calls, multi_limits)?;
        }
    }

    /// The case found by outside testing: the limits of a valid one-key call, sent again with
    /// three keys, must be refused, not answered from the memo.
    #[test]
    fn a_multi_call_with_another_key_count_is_parsed_again() {
        let memo = Memo::new();
        let args = bytes(&["TOKENBUCKET", "5", "1"]);
        let one = MultiContext {
            key_count: 1,
            settings: SETTINGS[0],
        };
        let three = MultiContext {
            key_count: 3,
            ..one
        };
        assert!(memo.with(&args, one, multi_limits, |_| ()).is_ok());
        assert_eq!(
            memo.with(&args, three, multi_limits, |_| ()),
            Err(LimitsError::Call(CommandError::WrongArity))
        );
    }
}
