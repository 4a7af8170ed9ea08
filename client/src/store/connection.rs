//! A connection to one server or to a Redis Cluster, and how its errors are sorted: what
//! the store and its batcher send commands on.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use super::cluster::ClusterConnection;
use super::error::StoreError;

#[derive(Clone)]
pub(super) enum Connection {
    Single(Box<ConnectionManager>),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Runs one command. An error reply is an `Err` (`query_async` makes it one), so that a
    /// refused `FUNCTION LOAD` is not read as loaded, `NOSCRIPT` is seen, and `LOADING` or
    /// `READONLY` count as an outage, not a refusal.
    pub(super) async fn query(&self, command: &Cmd) -> Result<Value, RedisError> {
        match self {
            Self::Single(manager) => {
                command
                    .query_async(&mut ConnectionManager::clone(manager))
                    .await
            }
            Self::Cluster(cluster) => cluster
                .clone()
                .req_packed_command(command)
                .await
                .and_then(Value::extract_error),
        }
    }

    /// Runs one command; an error reply is a value (`Value::ServerError`), as in a
    /// pipeline's replies, for the caller to read.
    pub(super) async fn query_raw(&self, command: &Cmd) -> Result<Value, RedisError> {
        match self {
            Self::Single(manager) => {
                ConnectionManager::clone(manager)
                    .req_packed_command(command)
                    .await
            }
            Self::Cluster(cluster) => cluster.clone().req_packed_command(command).await,
        }
    }

    /// Runs `count` commands in one pipeline; error replies are values. On a Redis
    /// Cluster, a pipeline that changes nothing (`writes` false) follows a redirect whole;
    /// one that writes is sent command by command, each following its own redirect (a
    /// pipeline's error does not say which of its commands ran: during a slot's migration
    /// some may have, and the rest be asked elsewhere).
    pub(super) async fn pipeline(
        &self,
        pipeline: &redis::Pipeline,
        count: usize,
        writes: bool,
    ) -> Result<Vec<Value>, RedisError> {
        match self {
            Self::Single(manager) => {
                ConnectionManager::clone(manager)
                    .req_packed_commands(pipeline, 0, count)
                    .await
            }
            Self::Cluster(cluster) if writes => {
                let mut replies = Vec::with_capacity(count);
                for command in pipeline.cmd_iter() {
                    replies.push(match cluster.clone().req_packed_command(command).await {
                        Err(error) if error.kind() == ErrorKind::Io => return Err(error),
                        Err(error) if error.is_connection_dropped() => return Err(error),
                        Err(error) => match error.into_server_errors() {
                            Some(errors) => errors
                                .first()
                                .map_or(Value::Nil, |(_, error)| Value::ServerError(error.clone())),
                            None => {
                                return Err(RedisError::from((
                                    ErrorKind::Client,
                                    "a command of the pipeline failed",
                                )));
                            }
                        },
                        Ok(value) => value,
                    });
                }
                Ok(replies)
            }
            Self::Cluster(cluster) => {
                cluster
                    .clone()
                    .req_packed_commands(pipeline, 0, count)
                    .await
            }
        }
    }
}

/// Sorts a client error into "the store is unavailable" (fall back) and "the store refused
/// the request" (report it).
pub(crate) fn store_error(error: &RedisError) -> StoreError {
    let unavailable = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
            ) | ErrorKind::ClusterConnectionNotFound
        );
    // The server's own words (`WRONGTYPE key holds ...`), as redis-cli shows them.
    let text = match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => error.to_string(),
    };
    if unavailable {
        StoreError::Unavailable(text)
    } else if refuses_an_argument(error.code(), error.detail()) {
        StoreError::Invalid(text)
    } else {
        StoreError::Server(text)
    }
}

/// Whether an error reply refuses an argument of the request. The module and the library
/// word every such refusal alike (the conformance suite holds them to it): `ERR cost must
/// be ...`, `ERR limit must be at most 10000 (the ratelimit.max-log-entries setting)`,
/// `ERR cost is too large`, inside `RL.MULTI` after `limit of key 'k': `. A key holding
/// another algorithm (`ERR key holds ...`) or type (`WRONGTYPE`) is not one.
fn refuses_an_argument(code: Option<&str>, detail: Option<&str>) -> bool {
    code == Some("ERR")
        && detail
            .is_some_and(|detail| detail.contains(" must ") || detail.contains(" is too large"))
}
