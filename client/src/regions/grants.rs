//! What the agent asks home: one pipeline of home's `TIME`, a grant from each hot limit's
//! pool (`k` acquires of an in-flight pool's slots) and `WAIT`, and home's replies read.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis_ratelimit_core::concurrency::HolderId;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Kind, Quota};
use redis_ratelimit_wire::args::multi::MultiArgs;
use redis_ratelimit_wire::encode::{self, Args};

use super::config::{AgentConfig, HotLimit, LogLeases};
use super::error::AgentError;
use crate::Algorithm;

/// Sends home's `TIME`, every grant of the batch, then `WAIT`, in one pipeline (`TIME`
/// first: see [`super::lease::lease_end_ms`] for why before the grants).
pub(super) async fn ask_home<H: ConnectionLike + Send>(
    home: &mut H,
    limits: &[HotLimit],
    config: &AgentConfig,
) -> Result<Vec<redis::Value>, AgentError> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    let mut words = Args::default();
    for limit in limits {
        let pool = pool_asked(limit, config)?;
        if let Quota::Concurrency(params) = pool.as_quota() {
            for index in 0..commands_for(limit) {
                let holder = slot_holder(limit, index)?;
                let slot = Quota::Concurrency(Box::new(params.with_holder(holder)));
                encode::acquire(limit.pool_key.as_bytes(), &slot, &mut words).map_err(|error| {
                    AgentError::Encode {
                        key: limit.pool_key.clone(),
                        error,
                    }
                })?;
                pipe.add_command(config.home.command(&words));
            }
            continue;
        }
        let grant = MultiArgs {
            quotas: vec![pool.as_quota().clone()],
            weights: vec![1],
            cost: limit.lease_units.max(1),
            grant: Grant::Partial { min: 1 },
        };
        encode::group(&[limit.pool_key.as_bytes()], &grant, true, &mut words).map_err(|error| {
            AgentError::Encode {
                key: limit.pool_key.clone(),
                error,
            }
        })?;
        pipe.add_command(config.home.command(&words));
    }
    if config.wait_replicas > 0 {
        pipe.cmd("WAIT")
            .arg(config.wait_replicas)
            .arg(u64::try_from(config.wait_timeout.as_millis()).unwrap_or(u64::MAX));
    }
    pipe.query_async(home).await.map_err(AgentError::Home)
}

/// How many commands of the batch ask `limit`'s pool: `k` acquires for an in-flight pool
/// (one per slot), one grant for any other.
pub(super) fn commands_for(limit: &HotLimit) -> usize {
    match limit.pool.kind() {
        Kind::Concurrency => usize::try_from(limit.lease_units.max(1)).unwrap_or(usize::MAX),
        _ => 1,
    }
}

/// The pool holder of leased slot `index`: `<slot_holder>:<index>`.
fn slot_holder(limit: &HotLimit, index: usize) -> Result<HolderId, AgentError> {
    let id = format!("{}:{index}", limit.slot_holder);
    HolderId::new(id.as_bytes()).map_err(|_| AgentError::Pool {
        key: limit.pool_key.clone(),
        reason: format!("the slot holder '{id}' is not 1 to 128 bytes"),
    })
}

/// The pool as the grant asks it. An in-flight pool is asked for holders living `T = P + a`
/// (rounded up to whole milliseconds: in home time they outlive every lease of the batch,
/// which ends by `grant + T`), whatever ttl it was given. A sliding log pool is asked with its window lengthened by
/// `T = P + a`: a lease's units count at home from the grant until `grant + T + W`, as if
/// stamped at the lease's end (`grant + T` at the latest, home time), so every unit spent
/// from the lease is counted for a whole `W` after it was spent (`docs/regions.md`: the
/// exact sliding log bound). Every region leasing one pool must use the same `T` (or the
/// largest): the pool counts each grant for the window its caller asks.
fn pool_asked(limit: &HotLimit, config: &AgentConfig) -> Result<Algorithm, AgentError> {
    let invalid = |error: crate::algorithm::AlgorithmError| AgentError::Pool {
        key: limit.pool_key.clone(),
        reason: error.to_string(),
    };
    if limit.pool.kind() == Kind::Concurrency {
        let lifetime = config.period.saturating_add(config.margin);
        let whole_ms = u64::try_from(lifetime.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        return Algorithm::concurrency(limit.pool.quota(), Duration::from_millis(whole_ms))
            .map_err(invalid);
    }
    if limit.pool.kind() != Kind::SlidingLog || config.log_leases == LogLeases::AsGiven {
        return Ok(limit.pool.clone());
    }
    let lifetime = config.period.saturating_add(config.margin);
    let window = limit.pool.window().saturating_add(lifetime);
    Algorithm::sliding_log(limit.pool.quota(), window).map_err(invalid)
}

/// What home's reply to one grant says.
pub(super) struct HomeGrant {
    /// The units granted: field 1 of a partial grant's reply.
    pub(super) units: u64,
}

/// Home's `TIME` reply (`[seconds, microseconds]`) as Unix microseconds.
pub(super) fn read_time(reply: &redis::Value) -> Result<i64, AgentError> {
    let number = |field: Option<&redis::Value>| match field {
        Some(redis::Value::BulkString(digits)) => std::str::from_utf8(digits)
            .ok()
            .and_then(|digits| digits.parse::<i64>().ok()),
        Some(redis::Value::Int(value)) => Some(*value),
        _ => None,
    };
    let fields = match reply {
        redis::Value::Array(fields) => fields.as_slice(),
        _ => &[],
    };
    match (number(fields.first()), number(fields.get(1))) {
        (Some(seconds), Some(micros)) if seconds >= 0 && (0..1_000_000).contains(&micros) => {
            Ok(seconds.saturating_mul(1_000_000).saturating_add(micros))
        }
        _ => Err(AgentError::Reply {
            key: "TIME".into(),
            reply: format!("{reply:?}"),
        }),
    }
}

/// What home's replies to `limit`'s commands grant: an in-flight pool's slots acquired (field
/// 1 of each `RL.ACQUIRE`, 1 or 0), or the one grant's units.
pub(super) fn read_grants(
    limit: &HotLimit,
    replies: &[redis::Value],
) -> Result<HomeGrant, AgentError> {
    if limit.pool.kind() != Kind::Concurrency {
        return match replies {
            [reply] => read_grant(limit, reply),
            _ => Err(AgentError::Reply {
                key: limit.pool_key.clone(),
                reply: format!("{replies:?}"),
            }),
        };
    }
    let mut units = 0;
    for reply in replies {
        units = read_grant(limit, reply)?.units.min(1).saturating_add(units);
    }
    Ok(HomeGrant { units })
}

fn read_grant(limit: &HotLimit, reply: &redis::Value) -> Result<HomeGrant, AgentError> {
    let fields = match reply {
        redis::Value::Array(fields) => fields.as_slice(),
        _ => &[],
    };
    match fields.first() {
        Some(redis::Value::Int(units)) if *units >= 0 => Ok(HomeGrant {
            units: u64::try_from(*units).unwrap_or(0),
        }),
        _ => Err(AgentError::Reply {
            key: limit.pool_key.clone(),
            reply: format!("{reply:?}"),
        }),
    }
}
