//! The module's replies to the commands of [`super::command`], read as [`GroupGrant`]s.
//! Pure, so the wire protocol is tested without a server.

use std::time::Duration;

use redis::Value;
use redis_ratelimit_wire::args;

use super::error::StoreError;
use super::request::Acquire;
use crate::outcome::{GroupGrant, StoreBackend, View};
use crate::outcome::{Regional, Why};
/// A reply of another shape than the command's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplyError {
    /// Where an integer was due.
    #[error("not an integer: {0}")]
    NotAnInteger(String),
    /// Where an array was due.
    #[error("not an array: {0}")]
    NotAnArray(String),
    /// A limit's view of another length.
    #[error("expected 5 integers, got {0} items")]
    NotFive(usize),
    /// An `RL.MULTI` reply of another length.
    #[error("RL.MULTI: expected 7 items, got {0}")]
    MultiItems(usize),
    /// An `RL.REGIONAL` reply of another shape.
    #[error("RL.REGIONAL: expected 5 integers, why and the lease's units, got {0}")]
    RegionalItems(String),
    /// An `RL.MULTI` reply with another number of views than limits.
    #[error("RL.MULTI: {views} views for {limits} limits")]
    MultiViews {
        /// Views in the reply.
        views: usize,
        /// Limits in the request.
        limits: usize,
    },
}

impl From<ReplyError> for StoreError {
    fn from(error: ReplyError) -> Self {
        StoreError::Server(format!("unexpected reply: {error}"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// One limit's 5-integer reply (`RL.<ALGORITHM>`, `RL.ACQUIRE`).
    Single,
    /// `CL.THROTTLE`'s reply: one GCRA limit without `RL.MULTI`.
    Throttle,
    /// `RL.MULTI`'s 7 items.
    Multi,
    /// `RL.REGIONAL`'s 7 items: the floor's five fields, why, the lease's units left.
    Regional,
}

/// Reads the replies of a group's `RL.PEEK`s: admitted if every limit would admit.
pub(crate) fn parse_peeks(
    replies: &[Value],
    backend: StoreBackend,
    units: u64,
) -> Result<GroupGrant, ReplyError> {
    let views = replies
        .iter()
        .map(|reply| five(reply).map(View::from_fields))
        .collect::<Result<Vec<View>, ReplyError>>()?;
    let granted = if views.iter().all(|view| view.allowed) {
        units
    } else {
        0
    };
    Ok(GroupGrant {
        granted,
        binding: 0,
        views,
        backend,
    })
}

fn integer(value: &Value) -> Result<i64, ReplyError> {
    match value {
        Value::Int(n) => Ok(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| ReplyError::NotAnInteger(format!("{value:?}"))),
        other => Err(ReplyError::NotAnInteger(format!("{other:?}"))),
    }
}

fn array(value: &Value) -> Result<&[Value], ReplyError> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(ReplyError::NotAnArray(format!("{other:?}"))),
    }
}

fn five(value: &Value) -> Result<[i64; 5], ReplyError> {
    match array(value)? {
        [a, b, c, d, e] => Ok([
            integer(a)?,
            integer(b)?,
            integer(c)?,
            integer(d)?,
            integer(e)?,
        ]),
        other => Err(ReplyError::NotFive(other.len())),
    }
}

/// Reads the reply of an acquire sent to `backend` as a command whose replies read as
/// `shape`.
pub(crate) fn parse_acquire(
    shape: Reply,
    request: &Acquire<'_>,
    reply: &Value,
    backend: StoreBackend,
) -> Result<GroupGrant, ReplyError> {
    let partial = request.partial_min.is_some();
    match shape {
        Reply::Single => {
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
            Ok(GroupGrant {
                granted,
                binding: 0,
                views: vec![view],
                backend,
            })
        }
        Reply::Throttle => {
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
                regional: None,
            };
            Ok(GroupGrant {
                granted: if allowed { request.units } else { 0 },
                binding: 0,
                views: vec![view],
                backend,
            })
        }
        Reply::Regional => {
            let shape = || ReplyError::RegionalItems(format!("{reply:?}"));
            let items = array(reply)?;
            let [a, b, c, d, e, why, lease_units] = items else {
                return Err(shape());
            };
            let fields = [
                integer(a)?,
                integer(b)?,
                integer(c)?,
                integer(d)?,
                integer(e)?,
            ];
            let why = match why {
                Value::BulkString(word) => args::regional::why_named(word),
                Value::SimpleString(word) => args::regional::why_named(word.as_bytes()),
                _ => None,
            }
            .ok_or_else(shape)?;
            let mut view = View::from_fields(fields);
            if why == Why::Lease {
                // Fields 2-5 are the floor's, which denied: its wait is no pacing wait.
                view.retry_after = Some(Duration::ZERO);
            }
            view.regional = Some(Regional {
                why,
                lease_units: u64::try_from(integer(lease_units)?).unwrap_or(0),
            });
            Ok(GroupGrant {
                granted: if view.allowed { request.units } else { 0 },
                binding: 0,
                views: vec![view],
                backend,
            })
        }
        Reply::Multi => {
            let items = array(reply)?;
            let [first, _, _, _, _, binding, per_limit] = items else {
                return Err(ReplyError::MultiItems(items.len()));
            };
            let first = integer(first)?;
            let views = array(per_limit)?
                .iter()
                .map(|view| five(view).map(View::from_fields))
                .collect::<Result<Vec<View>, ReplyError>>()?;
            if views.len() != request.limits.len() {
                return Err(ReplyError::MultiViews {
                    views: views.len(),
                    limits: request.limits.len(),
                });
            }
            let granted = if partial {
                u64::try_from(first).unwrap_or(0)
            } else if first != 0 {
                request.units
            } else {
                0
            };
            let binding = usize::try_from(integer(binding)?).unwrap_or(0);
            Ok(GroupGrant {
                granted,
                binding: binding.min(views.len().saturating_sub(1)),
                views,
                backend,
            })
        }
    }
}
