//! `RL.MULTI numkeys key [key ...] limit [limit ...] [COST c] [WEIGHTS w1 ... wN] [PARTIAL [MIN m]]`
//!
//! Each `limit` is an algorithm name followed by its parameters (`TOKENBUCKET capacity rate`,
//! `SLIDING limit window`, `FIXED limit window`, `SLIDINGLOG limit window`,
//! `GCRA max_burst count period`, `CONCURRENCY limit ttl_ms`), one per key, in key order.
//! Limit `i` costs `c × w_i`; an in-flight limit takes one slot for the caller `HOLDER id`.

use super::call::partial;
use super::quota::{self, arity, quota};
use super::{Settings, algorithm, positive_integer};
use crate::core::grant::Grant;
use crate::error::{ArgError, CommandError, Rule, quote};
use crate::kinds::Quota;

/// Most keys one `RL.MULTI` call checks: real policies combine a handful of limits (global,
/// plan, user, endpoint), and the bound keeps a call's work and reply small.
pub const MAX_KEYS: u64 = 16;

/// What an `RL.MULTI` call asks for, after its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiArgs {
    /// One quota per key, in key order, each for one unit of the call.
    pub quotas: Vec<Quota>,
    /// Limit `i` is charged `units × weights[i]`.
    pub weights: Vec<u64>,
    /// Units the call asks for.
    pub cost: u64,
    /// Whether fewer units may be granted.
    pub grant: Grant,
}

impl MultiArgs {
    /// Each limit's quota for a call of `units` units: `units × weight` each (the products
    /// were checked when parsing for the call's cost, so smaller units cannot overflow).
    pub fn quotas_for(&self, units: u64) -> impl Iterator<Item = Quota> + '_ {
        self.quotas
            .iter()
            .zip(&self.weights)
            .map(move |(quota, weight)| quota.with_cost(units.saturating_mul(*weight)))
    }
}

/// The `numkeys` argument.
pub fn key_count(numkeys: &[u8]) -> Result<usize, CommandError> {
    let count = positive_integer("numkeys", numkeys)?;
    if count > MAX_KEYS {
        return Err(ArgError::new("numkeys", Rule::AtMost("16"), numkeys).into());
    }
    usize::try_from(count).map_err(|_| CommandError::WrongArity)
}

/// The index of a key that repeats an earlier one, if any (a key takes one limit per call).
pub fn repeated_key(keys: &[&[u8]]) -> Option<usize> {
    (1..keys.len()).find(|&index| {
        keys.get(index)
            .is_some_and(|key| keys.get(..index).unwrap_or_default().contains(key))
    })
}

/// The error for a key given twice.
pub fn repeated_key_error(key: &[u8]) -> CommandError {
    CommandError::Dynamic(format!(
        "ERR key '{}' is given twice: each key takes one limit",
        quote(key)
    ))
}

/// Why the limits of an `RL.MULTI` call were refused: the parse sees the key count, not
/// the key names (so that it depends only on what the command's memo compares), and an
/// error about one limit names its key once the caller has the names at hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitsError {
    /// The limit of key `index` is wrong.
    Limit {
        /// The key's 0-based position.
        index: usize,
        /// What is wrong with its limit.
        error: CommandError,
    },
    /// An error about the call as a whole (its options, their combination, its arity).
    Call(CommandError),
}

impl LimitsError {
    /// The error the client is sent, naming the key of a wrong limit.
    pub fn naming_keys(self, keys: &[&[u8]]) -> CommandError {
        match self {
            LimitsError::Limit { index, error } => error.about(|| {
                let key = keys.get(index).copied().unwrap_or_default();
                format!("limit of key '{}'", quote(key))
            }),
            LimitsError::Call(error) => error,
        }
    }
}

impl From<CommandError> for LimitsError {
    fn from(error: CommandError) -> Self {
        LimitsError::Call(error)
    }
}

impl From<ArgError> for LimitsError {
    fn from(error: ArgError) -> Self {
        LimitsError::Call(error.into())
    }
}

/// Parses the limits and options that follow `key_count` keys.
pub fn limits(
    key_count: usize,
    args: &[&[u8]],
    settings: Settings,
) -> Result<MultiArgs, LimitsError> {
    let mut rest = args;
    let mut quotas = Vec::with_capacity(key_count);
    for index in 0..key_count {
        let in_limit = |error: CommandError| LimitsError::Limit { index, error };
        let (&name, after_name) = rest.split_first().ok_or(CommandError::WrongArity)?;
        let kind = algorithm(name).map_err(in_limit)?;
        let (params, after_params) = after_name
            .split_at_checked(arity(kind))
            .ok_or(CommandError::WrongArity)?;
        quotas.push(quota(kind, params, settings).map_err(in_limit)?);
        rest = after_params;
    }
    let mut parsed = MultiArgs {
        quotas,
        weights: vec![1; key_count],
        cost: 1,
        grant: Grant::Whole,
    };
    let (mut cost_given, mut weights_given, mut partial_given) = (false, false, false);
    let mut holder = None;
    while let Some((&option, after)) = rest.split_first() {
        if !cost_given && option.eq_ignore_ascii_case(b"COST") {
            let (&cost, after_cost) = after.split_first().ok_or(CommandError::WrongArity)?;
            parsed.cost = positive_integer("cost", cost)?;
            (cost_given, rest) = (true, after_cost);
        } else if !weights_given && option.eq_ignore_ascii_case(b"WEIGHTS") {
            let (weights, after_weights) = after
                .split_at_checked(key_count)
                .ok_or(CommandError::WrongArity)?;
            for (slot, weight) in parsed.weights.iter_mut().zip(weights) {
                *slot = positive_integer("weight", weight)?;
            }
            (weights_given, rest) = (true, after_weights);
        } else if holder.is_none() && option.eq_ignore_ascii_case(b"HOLDER") {
            let (&id, after_id) = after.split_first().ok_or(CommandError::WrongArity)?;
            (holder, rest) = (Some(quota::holder(id)?), after_id);
        } else if !partial_given && option.eq_ignore_ascii_case(b"PARTIAL") {
            // MIN is checked against the cost once every option is read.
            (parsed.grant, rest) = partial(after, u64::MAX)?;
            partial_given = true;
        } else {
            return Err(ArgError::new(
                "option",
                Rule::Must("be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m]"),
                option,
            )
            .into());
        }
    }
    let mut holder_used = false;
    for quota in &mut parsed.quotas {
        if let Quota::Concurrency(params) = quota {
            let id = holder.ok_or(CommandError::Message(
                "ERR a CONCURRENCY limit needs HOLDER id: the caller's id for its slot",
            ))?;
            **params = params.with_holder(id);
            holder_used = true;
        }
    }
    if holder.is_some() && !holder_used {
        return Err(CommandError::Message(
            "ERR HOLDER id is for CONCURRENCY limits, and this call has none",
        )
        .into());
    }
    if let Grant::Partial { min } = parsed.grant {
        if min > parsed.cost {
            return Err(
                ArgError::new("MIN", Rule::AtMost("the cost"), min.to_string().as_bytes()).into(),
            );
        }
    }
    if parsed
        .weights
        .iter()
        .any(|weight| weight.checked_mul(parsed.cost).is_none())
    {
        return Err(ArgError::combination("cost * weight", Rule::TooLarge).into());
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Kind;

    const SETTINGS: Settings = Settings {
        max_log_entries: 10_000,
        max_holders: 1_000,
    };

    fn parsed(keys: &[&str], args: &[&str]) -> Result<MultiArgs, CommandError> {
        let keys: Vec<&[u8]> = keys.iter().map(|a| a.as_bytes()).collect();
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        limits(keys.len(), &args, SETTINGS).map_err(|error| error.naming_keys(&keys))
    }

    fn message(keys: &[&str], args: &[&str]) -> String {
        parsed(keys, args).unwrap_err().to_string()
    }

    #[test]
    fn one_limit_per_key_then_options() {
        let call = parsed(
            &["global", "user"],
            &[
                "TOKENBUCKET",
                "1000",
                "100",
                "sliding",
                "10",
                "60",
                "COST",
                "3",
                "WEIGHTS",
                "1",
                "2",
            ],
        )
        .unwrap();
        let kinds: Vec<Kind> = call.quotas.iter().map(Quota::kind).collect();
        assert_eq!(kinds, [Kind::TokenBucket, Kind::SlidingWindow]);
        assert_eq!(
            (call.cost, call.weights.clone(), call.grant),
            (3, vec![1, 2], Grant::Whole)
        );
        let costs: Vec<u64> = call.quotas_for(call.cost).map(|q| q.cost()).collect();
        assert_eq!(costs, [3, 6]);
        let call = parsed(&["a"], &["GCRA", "9", "10", "60", "PARTIAL", "MIN", "1"]).unwrap();
        assert_eq!(call.grant, Grant::Partial { min: 1 });
        let call = parsed(&["a"], &["FIXED", "9", "60", "PARTIAL", "COST", "4"]).unwrap();
        assert_eq!((call.cost, call.grant), (4, Grant::Partial { min: 1 }));
    }

    #[rustfmt::skip]
    #[test]
    fn refuses_bad_limits_naming_the_key() {
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&["a", "b"], &["TOKENBUCKET", "1", "1", "LEAKY", "1", "1"],
             "ERR limit of key 'b': algorithm must be TOKENBUCKET, SLIDING, FIXED, SLIDINGLOG, GCRA or CONCURRENCY (got 'LEAKY')"),
            (&["a"], &["SLIDING", "10", "0"],
             "ERR limit of key 'a': window must be greater than 0 (got '0')"),
            (&["a"], &["FIXED", "10", "60", "COST", "0"], "ERR cost must be greater than 0 (got '0')"),
            (&["a", "b"], &["FIXED", "10", "60", "FIXED", "1", "1", "WEIGHTS", "1", "x"],
             "ERR weight must be a positive integer (got 'x')"),
            (&["a"], &["FIXED", "10", "60", "COST", "3", "PARTIAL", "MIN", "4"],
             "ERR MIN must be at most the cost (got '4')"),
            (&["a"], &["FIXED", "10", "60", "PARTIAL", "MIN", "2"],
             "ERR MIN must be at most the cost (got '2')"),
            (&["a"], &["FIXED", "10", "60", "COST", "1", "COST", "1"],
             "ERR option must be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m] (got 'COST')"),
            (&["a"], &["FIXED", "10", "60", "10"],
             "ERR option must be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m] (got '10')"),
            (&["a"], &["FIXED", "10", "60", "COST", "9999999999", "WEIGHTS", "9999999999"],
             "ERR cost * weight is too large"),
        ];
        for (keys, args, expected) in cases {
            assert_eq!(message(keys, args), *expected, "{args:?}");
        }
        for args in [
            &["FIXED", "10"][..],
            &["FIXED", "10", "60", "COST"],
            &["FIXED", "10", "60", "WEIGHTS"],
            &[],
        ] {
            assert_eq!(parsed(&["a"], args), Err(CommandError::WrongArity), "{args:?}");
        }
    }

    #[test]
    fn numkeys_is_bounded_and_keys_are_distinct() {
        assert_eq!(key_count(b"3"), Ok(3));
        assert_eq!(
            key_count(b"0").unwrap_err().to_string(),
            "ERR numkeys must be greater than 0 (got '0')"
        );
        assert_eq!(
            key_count(b"17").unwrap_err().to_string(),
            "ERR numkeys must be at most 16 (got '17')"
        );
        assert_eq!(repeated_key(&[b"a", b"b", b"c"]), None);
        assert_eq!(repeated_key(&[b"a", b"b", b"a"]), Some(2));
        assert_eq!(
            repeated_key_error(b"user:7").to_string(),
            "ERR key 'user:7' is given twice: each key takes one limit"
        );
    }
}
