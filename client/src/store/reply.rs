//! The module's commands as argument lists, and its replies as [`Grant`]s. Pure, so the wire
//! protocol is tested without a server.

use std::time::Duration;

use redis::Value;

use super::{Acquire, Grant, LimitCall, Refund, StoreBackend, View};
use crate::algorithm::Algorithm;

/// How a group is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// `RL.<ALGORITHM> key args cost [PARTIAL MIN m]`: one limit, the 5-integer reply.
    Single(Vec<String>),
    /// `CL.THROTTLE key max_burst count period quantity`: one GCRA limit without `RL.MULTI`.
    Throttle(Vec<String>),
    /// `RL.MULTI numkeys keys... limits... COST c [WEIGHTS ...] [PARTIAL MIN m]`.
    Multi(Vec<String>),
}

impl Command {
    pub(crate) fn args(&self) -> &[String] {
        match self {
            Self::Single(args) | Self::Throttle(args) | Self::Multi(args) => args,
        }
    }
}

/// The command for an acquire. `multi` says whether the server has `RL.MULTI`; `Err` when
/// the request needs a command the server lacks.
pub(crate) fn acquire_command(request: &Acquire<'_>, multi: bool) -> Result<Command, String> {
    let partial = |args: &mut Vec<String>| {
        if let Some(min) = request.partial_min {
            args.extend(["PARTIAL".into(), "MIN".into(), min.max(1).to_string()]);
        }
    };
    match request.limits.as_slice() {
        [] => Err("a group has at least one limit".into()),
        [call] if matches!(call.algorithm, Algorithm::Concurrency { .. }) => {
            let Algorithm::Concurrency { limit, ttl } = call.algorithm else {
                return Err("not an in-flight limit".into());
            };
            let holder = request
                .holder
                .ok_or("an in-flight limit needs a holder id")?;
            if request.partial_min.is_some() {
                return Err("an in-flight limit takes no partial grant".into());
            }
            Ok(Command::Single(vec![
                "RL.ACQUIRE".into(),
                call.key.into(),
                limit.to_string(),
                holder.into(),
                ttl.as_millis().to_string(),
            ]))
        }
        [call] if !matches!(call.algorithm, Algorithm::Gcra { .. }) => {
            let mut args = vec![
                format!("RL.{}", call.algorithm.wire_name()),
                call.key.into(),
            ];
            args.extend(call.algorithm.wire_args());
            args.push(request.units.saturating_mul(call.weight.max(1)).to_string());
            partial(&mut args);
            if let Some(wait) = call.max_wait {
                if request.partial_min.is_some() {
                    return Err("pacing (MAXWAIT) cannot be combined with a partial grant".into());
                }
                args.extend(["MAXWAIT".into(), wait.as_millis().to_string()]);
            }
            Ok(Command::Single(args))
        }
        [call] if !multi => {
            if request.partial_min.is_some() {
                return Err("partial grants on a GCRA limit need RL.MULTI".into());
            }
            let mut args = vec!["CL.THROTTLE".into(), call.key.into()];
            args.extend(call.algorithm.wire_args());
            args.push(request.units.saturating_mul(call.weight.max(1)).to_string());
            Ok(Command::Throttle(args))
        }
        _ if !multi => Err("several limits in one call need RL.MULTI".into()),
        limits if limits.iter().any(|call| call.max_wait.is_some()) => {
            Err("a paced limit (MAXWAIT) needs a call of its own".into())
        }
        limits => {
            let mut args = vec!["RL.MULTI".to_string(), limits.len().to_string()];
            args.extend(limits.iter().map(|call| call.key.to_string()));
            for call in limits {
                args.push(call.algorithm.wire_name().into());
                args.extend(call.algorithm.wire_args());
            }
            args.extend(["COST".into(), request.units.to_string()]);
            if limits.iter().any(|call| call.weight != 1) {
                args.push("WEIGHTS".into());
                args.extend(limits.iter().map(|call| call.weight.max(1).to_string()));
            }
            if limits
                .iter()
                .any(|call| matches!(call.algorithm, Algorithm::Concurrency { .. }))
            {
                let holder = request
                    .holder
                    .ok_or("an in-flight limit needs a holder id")?;
                args.extend(["HOLDER".into(), holder.into()]);
            }
            partial(&mut args);
            Ok(Command::Multi(args))
        }
    }
}

/// The commands that give units back to each limit of a group (one per limit).
pub(crate) fn refund_commands(request: &Refund<'_>) -> Vec<Vec<String>> {
    request
        .limits
        .iter()
        .map(|call: &LimitCall<'_>| {
            let units = request.units.saturating_mul(call.weight.max(1));
            if matches!(call.algorithm, Algorithm::Concurrency { .. }) {
                // An in-flight slot is given back by releasing its holder.
                let holder = request.holder.unwrap_or_default();
                vec!["RL.RELEASE".into(), call.key.into(), holder.into()]
            } else if matches!(call.algorithm, Algorithm::Gcra { .. }) {
                // CL.THROTTLE gives units back with a negative quantity.
                let mut args = vec!["CL.THROTTLE".into(), call.key.into()];
                args.extend(call.algorithm.wire_args());
                args.push(format!("-{units}"));
                args
            } else {
                let mut args = vec![
                    "RL.REFUND".into(),
                    call.key.into(),
                    call.algorithm.wire_name().into(),
                ];
                args.extend(call.algorithm.wire_args());
                args.push(units.to_string());
                args
            }
        })
        .collect()
}

/// The `RL.PEEK` of each limit of a group: what a call of `units × weight` would get now
/// (an in-flight limit: whether a slot is free).
pub(crate) fn peek_commands(request: &Acquire<'_>) -> Vec<Vec<String>> {
    request
        .limits
        .iter()
        .map(|call| {
            let mut args = vec![
                "RL.PEEK".to_string(),
                call.key.to_string(),
                call.algorithm.wire_name().to_string(),
            ];
            match call.algorithm {
                Algorithm::Concurrency { limit, .. } => args.push(limit.to_string()),
                algorithm => {
                    args.extend(algorithm.wire_args());
                    args.push(request.units.saturating_mul(call.weight.max(1)).to_string());
                }
            }
            args
        })
        .collect()
}

/// Reads the replies of a group's `RL.PEEK`s: admitted if every limit would admit.
pub(crate) fn parse_peeks(
    replies: &[Value],
    backend: StoreBackend,
    units: u64,
) -> Result<Grant, String> {
    let views = replies
        .iter()
        .map(|reply| five(reply).map(View::from_fields))
        .collect::<Result<Vec<View>, String>>()?;
    let granted = if views.iter().all(|view| view.allowed) {
        units
    } else {
        0
    };
    Ok(Grant {
        granted,
        binding: 0,
        views,
        backend,
    })
}

fn integer(value: &Value) -> Result<i64, String> {
    match value {
        Value::Int(n) => Ok(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| format!("not an integer: {value:?}")),
        other => Err(format!("not an integer: {other:?}")),
    }
}

fn array(value: &Value) -> Result<&[Value], String> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(format!("not an array: {other:?}")),
    }
}

fn five(value: &Value) -> Result<[i64; 5], String> {
    match array(value)? {
        [a, b, c, d, e] => Ok([
            integer(a)?,
            integer(b)?,
            integer(c)?,
            integer(d)?,
            integer(e)?,
        ]),
        other => Err(format!("expected 5 integers, got {} items", other.len())),
    }
}

/// Reads the reply of an acquire sent as `command` to `backend`.
pub(crate) fn parse_acquire(
    command: &Command,
    request: &Acquire<'_>,
    reply: &Value,
    backend: StoreBackend,
) -> Result<Grant, String> {
    let partial = request.partial_min.is_some();
    match command {
        Command::Single(_) => {
            let fields = five(reply)?;
            let [first, ..] = fields;
            let mut view = View::from_fields(fields);
            let granted = if partial {
                u64::try_from(first).unwrap_or(0)
            } else if view.allowed {
                request.units
            } else {
                0
            };
            view.allowed = granted > 0;
            Ok(Grant {
                granted,
                binding: 0,
                views: vec![view],
                backend,
            })
        }
        Command::Throttle(_) => {
            let [limited, limit, remaining, retry_s, reset_s] = five(reply)?;
            let allowed = limited == 0;
            let retry_after = if allowed {
                Some(Duration::ZERO)
            } else {
                u64::try_from(retry_s).ok().map(Duration::from_secs)
            };
            let view = View {
                allowed,
                remaining: u64::try_from(remaining).unwrap_or(0),
                retry_after,
                reset_after: Duration::from_secs(u64::try_from(reset_s).unwrap_or(0)),
                limit: u64::try_from(limit).unwrap_or(0),
            };
            Ok(Grant {
                granted: if allowed { request.units } else { 0 },
                binding: 0,
                views: vec![view],
                backend,
            })
        }
        Command::Multi(_) => {
            let items = array(reply)?;
            let [first, _, _, _, _, binding, per_limit] = items else {
                return Err(format!("RL.MULTI: expected 7 items, got {}", items.len()));
            };
            let first = integer(first)?;
            let views = array(per_limit)?
                .iter()
                .map(|view| five(view).map(View::from_fields))
                .collect::<Result<Vec<View>, String>>()?;
            if views.len() != request.limits.len() {
                return Err(format!(
                    "RL.MULTI: {} views for {} limits",
                    views.len(),
                    request.limits.len()
                ));
            }
            let granted = if partial {
                u64::try_from(first).unwrap_or(0)
            } else if first != 0 {
                request.units
            } else {
                0
            };
            let binding = usize::try_from(integer(binding)?).unwrap_or(0);
            Ok(Grant {
                granted,
                binding: binding.min(views.len().saturating_sub(1)),
                views,
                backend,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(key: &'a str, algorithm: &'a Algorithm, weight: u64) -> LimitCall<'a> {
        LimitCall {
            key,
            algorithm,
            weight,
            max_wait: None,
        }
    }

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|v| Value::Int(*v)).collect())
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
            command.args(),
            ["RL.TOKENBUCKET", "k", "10", "2", "6", "PARTIAL", "MIN", "1"]
        );
        let grant = parse_acquire(
            &command,
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
            command.args(),
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
        let grant = parse_acquire(&command, &request, &reply, StoreBackend::Module).unwrap();
        assert_eq!(grant.granted, 0);
        assert_eq!(grant.binding, 1);
        assert_eq!(grant.views[1].retry_after, Some(Duration::from_millis(400)));
        assert!(
            parse_acquire(&command, &request, &ints(&[1, 2, 3]), StoreBackend::Module).is_err()
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
        assert_eq!(command.args(), ["CL.THROTTLE", "g", "4", "10", "60", "1"]);
        let denied = parse_acquire(
            &command,
            &request,
            &ints(&[1, 5, 0, 6, 30]),
            StoreBackend::Module,
        )
        .unwrap();
        assert_eq!(denied.granted, 0);
        assert_eq!(denied.views[0].retry_after, Some(Duration::from_secs(6)));
        assert_eq!(
            acquire_command(&request, true).unwrap().args()[0],
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
            refund_commands(&request),
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
            command.args(),
            ["RL.TOKENBUCKET", "q", "1", "1", "1", "MAXWAIT", "1500"]
        );
        let grant = parse_acquire(
            &command,
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
