//! The module's commands for a group of limits, written by the server's own command
//! language (`redis_ratelimit_wire::encode`). Pure, so the wire protocol is tested without a
//! server; their replies are read by [`super::reply`].

use std::cell::Cell;

use redis_ratelimit_core::concurrency::HolderId;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::Quota;
use redis_ratelimit_wire::args;
use redis_ratelimit_wire::args::multi::MultiArgs;
use redis_ratelimit_wire::commands::{self, Syntax};
use redis_ratelimit_wire::encode::{self, Args, EncodeError};
use redis_ratelimit_wire::error::CommandError;

use super::error::StoreError;
use super::reply::Reply;
use super::request::{Acquire, LimitCall, Refund};

/// Why a request cannot be written as a command: one the server would refuse, refused
/// before it is sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    /// A partial grant asked of an in-flight limit.
    #[error("an in-flight limit takes no partial grant")]
    PartialInFlight,
    /// A partial grant asked of a paced limit.
    #[error("pacing (MAXWAIT) cannot be combined with a partial grant")]
    PacedPartial,
    /// A partial grant on a kind whose only partial form is `RL.MULTI`, which the server
    /// lacks.
    #[error("partial grants on a {0} limit need RL.MULTI")]
    PartialNeedsMulti(&'static str),
    /// What the encoder refuses.
    #[error("{0}")]
    Encode(#[from] EncodeError),
    /// A holder id the server would refuse.
    #[error("{0}")]
    Holder(CommandError),
    /// A regional limit in a group of several.
    #[error("a regional limit is called alone")]
    RegionalGroup,
}

impl From<CommandError> for RequestError {
    fn from(error: CommandError) -> Self {
        RequestError::Holder(error)
    }
}

impl From<RequestError> for StoreError {
    fn from(error: RequestError) -> Self {
        StoreError::Server(error.to_string())
    }
}

/// A command for a group, and how its reply reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Command {
    args: Args,
    reply: Reply,
}

/// How a reply reads.
impl Command {
    pub(crate) fn args(&self) -> &Args {
        &self.args
    }

    /// How its reply reads.
    #[cfg(test)]
    pub(crate) fn reply(&self) -> Reply {
        self.reply
    }
}

/// The quota limit `call` is checked against, for one unit: its algorithm's, paced or
/// The quota limit `call` is checked against, for one unit: its algorithm's, paced or
/// holding the caller's slot.
fn quota(call: &LimitCall<'_>, holder: Option<HolderId>) -> Quota {
    match (call.algorithm.as_quota(), call.max_wait, holder) {
        (Quota::TokenBucket(bucket), Some(wait), _) => {
            let wait_ns = u64::try_from(wait.as_millis())
                .unwrap_or(u64::MAX)
                .saturating_mul(1_000_000);
            // A limit's wait is at most a day (checked when it is built).
            Quota::TokenBucket(bucket.with_max_wait_ns(wait_ns).unwrap_or(*bucket))
        }
        (Quota::Concurrency(slots), _, Some(holder)) => {
            Quota::Concurrency(Box::new(slots.with_holder(holder)))
        }
        (quota, _, _) => quota.clone(),
    }
}

/// The caller's holder id, checked as the server checks it.
fn holder_id(holder: &str) -> Result<HolderId, RequestError> {
    Ok(args::quota::holder(holder.as_bytes())?)
}

/// The command for an acquire, in buffers of its own (for tests, and the rare resend after
/// the server lost its script): [`with_acquire`] is the call path's.
pub(crate) fn acquire_command(request: &Acquire<'_>, multi: bool) -> Result<Command, RequestError> {
    let mut scratch = Scratch::default();
    let reply = write_acquire(request, multi, &mut scratch)?;
    Ok(Command {
        args: scratch.args,
        reply,
    })
}

/// Buffers a command is written in, kept per thread and reused by the next command: a store
/// call then writes its words and its limits' list without allocating (the words are
/// copied into the `redis` crate's command, which is sent).
#[derive(Default)]
pub(crate) struct Scratch {
    args: Args,
    quotas: Vec<Quota>,
    weights: Vec<u64>,
}

thread_local! {
    static SCRATCH: Cell<Scratch> = Cell::new(Scratch::default());
}

/// Runs `write` with this thread's [`Scratch`], taken out while it runs (so a call within
/// `write`, or a thread being torn down, gets fresh buffers instead), then put back.
fn with_scratch<T>(write: impl FnOnce(&mut Scratch) -> T) -> T {
    let mut scratch = SCRATCH.try_with(Cell::take).unwrap_or_default();
    let value = write(&mut scratch);
    let _ = SCRATCH.try_with(|cell| cell.set(scratch));
    value
}

/// Writes the command for an acquire in this thread's reused buffers and gives its words to
/// `make` (which builds what is sent); returns what `make` made and how the reply reads.
/// `multi` says whether the server has `RL.MULTI`; `Err` when the request needs a command
/// the server lacks.
pub(crate) fn with_acquire<T>(
    request: &Acquire<'_>,
    multi: bool,
    make: impl FnOnce(&Args) -> T,
) -> Result<(T, Reply), RequestError> {
    with_scratch(|scratch| {
        let reply = write_acquire(request, multi, scratch)?;
        Ok((make(&scratch.args), reply))
    })
}

/// Writes the command for an acquire into `scratch.args` (see [`with_acquire`]).
fn write_acquire(
    request: &Acquire<'_>,
    multi: bool,
    scratch: &mut Scratch,
) -> Result<Reply, RequestError> {
    // Each encoder starts its command afresh; cleared here too, so no path can send words
    // of the command before.
    scratch.args.clear();
    let partial = request.partial_min.is_some();
    // A partial grant of a regional limit is the fallback's settlement: what the local
    // fallback admitted is charged to the floor alone (the lease is the home's units).
    if !partial
        && request
            .limits
            .iter()
            .any(|call| call.lease_suffix.is_some())
    {
        return regional_command(request, &mut scratch.args);
    }
    if let [call] = request.limits.as_slice() {
        if call.algorithm.is_in_flight() {
            request.holder.ok_or(EncodeError::NoHolder)?;
            if partial {
                return Err(RequestError::PartialInFlight);
            }
        }
        if call.max_wait.is_some() && partial {
            return Err(RequestError::PacedPartial);
        }
        let own = commands::Command::calling(call.algorithm.kind()).is_some();
        if !own && !multi && partial {
            return Err(RequestError::PartialNeedsMulti(call.algorithm.wire_name()));
        }
    } else if request.limits.iter().any(|call| call.max_wait.is_some()) && multi {
        return Err(EncodeError::PacedInGroup.into());
    }
    let holder = match request.holder {
        Some(holder) if request.limits.iter().any(|c| c.algorithm.is_in_flight()) => {
            Some(holder_id(holder)?)
        }
        _ => None,
    };
    // The reused lists, as the encoder takes them (given back below, whatever it says).
    scratch
        .quotas
        .extend(request.limits.iter().map(|call| quota(call, holder)));
    scratch
        .weights
        .extend(request.limits.iter().map(|call| call.weight.max(1)));
    let limits = MultiArgs {
        quotas: std::mem::take(&mut scratch.quotas),
        weights: std::mem::take(&mut scratch.weights),
        cost: request.units,
        grant: request
            .partial_min
            .map_or(Grant::Whole, |min| Grant::Partial { min }),
    };
    // The keys borrow the request, so they cannot be kept: a group of one (the most common)
    // needs no list.
    let one;
    let several: Vec<&[u8]>;
    let keys: &[&[u8]] = match request.limits.as_slice() {
        [call] => {
            one = [call.key.as_bytes()];
            &one
        }
        calls => {
            several = calls.iter().map(|call| call.key.as_bytes()).collect();
            &several
        }
    };
    let command = encode::group(keys, &limits, multi, &mut scratch.args);
    // Back for the next command, emptied (no holder id kept).
    let MultiArgs {
        mut quotas,
        mut weights,
        ..
    } = limits;
    quotas.clear();
    weights.clear();
    scratch.quotas = quotas;
    scratch.weights = weights;
    let reply = match command?.syntax() {
        Syntax::Multi => Reply::Multi,
        Syntax::Throttle => Reply::Throttle,
        _ => Reply::Single,
    };
    Ok(reply)
}

/// `RL.REGIONAL key lease_key ...` for a group of one regional limit, taken whole.
fn regional_command(request: &Acquire<'_>, args: &mut Args) -> Result<Reply, RequestError> {
    let [call] = request.limits.as_slice() else {
        return Err(RequestError::RegionalGroup);
    };
    let lease_key = call.lease_key().unwrap_or_default();
    let units = request.units.saturating_mul(call.weight.max(1));
    let floor = call.algorithm.as_quota().with_cost(units);
    encode::regional(call.key.as_bytes(), lease_key.as_bytes(), &floor, args)?;
    Ok(Reply::Regional)
}

/// The commands that give units back to each limit of a group (one per limit).
pub(crate) fn refund_commands(request: &Refund<'_>) -> Result<Vec<Args>, RequestError> {
    request
        .limits
        .iter()
        // A regional limit is never refunded: its floor cannot tell the units its lease
        // paid from its own, and a refund to the floor of a lease's unit would over-admit.
        .filter(|call| call.lease_suffix.is_none())
        .map(|call: &LimitCall<'_>| {
            let units = request.units.saturating_mul(call.weight.max(1));
            let holder = if call.algorithm.is_in_flight() {
                Some(holder_id(request.holder.unwrap_or_default())?)
            } else {
                None
            };
            let mut args = Args::default();
            let quota = quota(call, holder).with_cost(units);
            encode::refund(call.key.as_bytes(), &quota, &mut args)?;
            Ok(args)
        })
        .collect()
}

/// The `RL.PEEK` of each limit of a group: what a call of `units × weight` would get now
/// (an in-flight limit: whether a slot is free).
pub(crate) fn peek_commands(request: &Acquire<'_>) -> Vec<Args> {
    request
        .limits
        .iter()
        .map(|call| {
            let units = request.units.saturating_mul(call.weight.max(1));
            let mut args = Args::default();
            encode::peek(
                call.key.as_bytes(),
                &call.algorithm.as_quota().with_cost(units),
                &mut args,
            );
            args
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use redis::Value;

    use crate::algorithm::Algorithm;
    use crate::outcome::{Regional, Why};
    use crate::store::reply::parse_acquire;
    use crate::store::{StoreBackend, View};

    fn call<'a>(key: &'a str, algorithm: &'a Algorithm, weight: u64) -> LimitCall<'a> {
        LimitCall {
            key,
            algorithm,
            weight,
            max_wait: None,
            lease_suffix: None,
        }
    }

    fn words(args: &Args) -> Vec<String> {
        args.iter()
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect()
    }

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|v| Value::Int(*v)).collect())
    }

    #[test]
    fn a_regional_limit_is_rl_regional_and_its_reply_says_why() {
        let window = Algorithm::fixed_window(2, Duration::from_secs(60)).unwrap();
        let regional = LimitCall {
            lease_suffix: Some(":lease"),
            ..call("{r}f", &window, 1)
        };
        let request = Acquire {
            limits: vec![regional],
            units: 1,
            partial_min: None,
            holder: None,
        };
        let command = acquire_command(&request, true).unwrap();
        assert_eq!(
            words(command.args()).join(" "),
            "RL.REGIONAL {r}f {r}f:lease FIXED 2 60.000000 1"
        );
        let reply = |why: &str| {
            let mut items: Vec<Value> = [1, 0, 500, 500, 2].map(Value::Int).to_vec();
            items.push(Value::BulkString(why.as_bytes().to_vec()));
            items.push(Value::Int(3));
            Value::Array(items)
        };
        let grant = parse_acquire(
            command.reply(),
            &request,
            &reply("lease"),
            StoreBackend::Module,
        )
        .unwrap();
        let view = grant.views[0];
        assert_eq!(grant.granted, 1);
        assert_eq!(view.retry_after, Some(Duration::ZERO), "no pacing wait");
        assert_eq!(
            view.regional,
            Some(Regional {
                why: Why::Lease,
                lease_units: 3
            })
        );
        let refused = parse_acquire(
            command.reply(),
            &request,
            &reply("later"),
            StoreBackend::Module,
        );
        assert!(refused.is_err());
        // The fallback's settlement charges the floor alone.
        let settle = Acquire {
            partial_min: Some(1),
            ..request.clone()
        };
        let command = acquire_command(&settle, true).unwrap();
        assert_eq!(words(command.args())[0], "RL.FIXED");
        let two = Acquire {
            limits: vec![regional, call("{r}g", &window, 1)],
            ..request
        };
        assert!(acquire_command(&two, true).is_err());
    }

    #[test]
    fn one_limit_is_its_own_command() {
        let bucket = Algorithm::token_bucket(10, Duration::from_secs(5)).unwrap();
        let request = Acquire {
            limits: vec![call("k", &bucket, 2)],
            units: 3,
            partial_min: Some(1),
            holder: None,
        };
        let command = acquire_command(&request, false).unwrap();
        assert_eq!(
            words(command.args()),
            ["RL.TOKENBUCKET", "k", "10", "2", "6", "PARTIAL", "MIN", "1"]
        );
        let grant = parse_acquire(
            command.reply(),
            &request,
            &ints(&[4, 0, 0, 1500, 10]),
            StoreBackend::Module,
        )
        .unwrap();
        assert_eq!(
            grant.granted, 4,
            "field 1 of a partial reply is the units granted"
        );
        assert!(grant.views[0].allowed);
    }

    #[test]
    fn several_limits_go_in_one_rl_multi() {
        let bucket = Algorithm::token_bucket(10, Duration::from_secs(5)).unwrap();
        let window = Algorithm::fixed_window(100, Duration::from_secs(60)).unwrap();
        let request = Acquire {
            limits: vec![call("a", &bucket, 1), call("b", &window, 3)],
            units: 2,
            partial_min: None,
            holder: None,
        };
        let command = acquire_command(&request, true).unwrap();
        assert_eq!(
            words(command.args()),
            [
                "RL.MULTI",
                "2",
                "a",
                "b",
                "TOKENBUCKET",
                "10",
                "2",
                "FIXED",
                "100",
                "60.000000",
                "COST",
                "2",
                "WEIGHTS",
                "1",
                "3"
            ]
        );
        assert!(acquire_command(&request, false).is_err());
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(1),
            Value::Int(400),
            Value::Int(60_000),
            Value::Int(100),
            Value::Int(1),
            Value::Array(vec![
                ints(&[1, 8, 0, 1000, 10]),
                ints(&[0, 1, 400, 60_000, 100]),
            ]),
        ]);
        let grant = parse_acquire(command.reply(), &request, &reply, StoreBackend::Module).unwrap();
        assert_eq!(grant.granted, 0);
        assert_eq!(grant.binding, 1);
        assert_eq!(grant.views[1].retry_after, Some(Duration::from_millis(400)));
        assert!(
            parse_acquire(
                command.reply(),
                &request,
                &ints(&[1, 2, 3]),
                StoreBackend::Module
            )
            .is_err()
        );
    }

    #[test]
    fn gcra_without_rl_multi_is_cl_throttle() {
        let gcra = Algorithm::gcra(4, 10, Duration::from_secs(60)).unwrap();
        let request = Acquire {
            limits: vec![call("g", &gcra, 1)],
            units: 1,
            partial_min: None,
            holder: None,
        };
        let command = acquire_command(&request, false).unwrap();
        assert_eq!(
            words(command.args()),
            ["CL.THROTTLE", "g", "4", "10", "60", "1"]
        );
        let denied = parse_acquire(
            command.reply(),
            &request,
            &ints(&[1, 5, 0, 6, 30]),
            StoreBackend::Module,
        )
        .unwrap();
        assert_eq!(denied.granted, 0);
        assert_eq!(denied.views[0].retry_after, Some(Duration::from_secs(6)));
        assert_eq!(
            words(acquire_command(&request, true).unwrap().args())[0],
            "RL.MULTI",
            "with RL.MULTI even one GCRA limit can be partial"
        );
        let partial = Acquire {
            partial_min: Some(1),
            holder: None,
            ..request
        };
        assert!(acquire_command(&partial, false).is_err());
    }

    #[test]
    fn refunds_name_the_algorithm_and_weigh_the_units() {
        let window = Algorithm::sliding_window(100, Duration::from_secs(1)).unwrap();
        let gcra = Algorithm::gcra(4, 10, Duration::from_secs(60)).unwrap();
        let request = Refund {
            limits: vec![call("a", &window, 2), call("g", &gcra, 1)],
            units: 5,
            holder: None,
        };
        assert_eq!(
            refund_commands(&request)
                .unwrap()
                .iter()
                .map(words)
                .collect::<Vec<_>>(),
            [
                vec!["RL.REFUND", "a", "SLIDING", "100", "1.000000", "10"],
                vec!["CL.THROTTLE", "g", "4", "10", "60", "-5"],
            ]
        );
    }

    #[test]
    fn a_paced_bucket_is_called_alone_with_maxwait() {
        let bucket = Algorithm::token_bucket(1, Duration::from_secs(1)).unwrap();
        let mut paced = call("q", &bucket, 1);
        paced.max_wait = Some(Duration::from_millis(1500));
        let request = Acquire {
            limits: vec![paced],
            units: 1,
            partial_min: None,
            holder: None,
        };
        let command = acquire_command(&request, true).unwrap();
        assert_eq!(
            words(command.args()),
            ["RL.TOKENBUCKET", "q", "1", "1", "1", "MAXWAIT", "1500"]
        );
        let grant = parse_acquire(
            command.reply(),
            &request,
            &ints(&[1, 0, 700, 1700, 1]),
            StoreBackend::Module,
        )
        .unwrap();
        assert_eq!(grant.granted, 1);
        assert_eq!(
            grant.views[0].retry_after,
            Some(Duration::from_millis(700)),
            "the wait"
        );
        let partial = Acquire {
            partial_min: Some(1),
            holder: None,
            ..request.clone()
        };
        assert!(acquire_command(&partial, true).is_err());
        let together = Acquire {
            limits: vec![paced, call("b", &bucket, 1)],
            ..request
        };
        assert!(acquire_command(&together, true).is_err());
    }

    #[test]
    fn a_never_wait_is_none() {
        let view = View::from_fields([0, 5, -1, 0, 5]);
        assert_eq!(view.retry_after, None);
        assert!(!view.allowed);
    }
}
