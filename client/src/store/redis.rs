//! The Redis store: `RL.*` commands over the `redis` crate's multiplexed connections, on a
//! single server (through its connection manager, which reconnects by itself) or a Redis
//! Cluster (its async cluster client, which follows `MOVED`/`ASK`).
//!
//! The connection is made on first use, not at construction: a service must start, and
//! fall back, while Redis is down.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, Value};
use tokio::sync::watch;

use super::reply;
use super::{Acquire, BoxFuture, Capabilities, Grant, Refund, Store, StoreError};

/// Whether the server has `RL.MULTI` (and partial grants, which came with it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MultiSupport {
    /// Ask the server (`COMMAND INFO RL.MULTI`) when first connected.
    #[default]
    Detect,
    /// Assume it has them.
    Yes,
    /// Assume it has not: every limit is called on its own, leases are unavailable.
    No,
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct RedisStoreOptions {
    /// Longest wait for a connection to be made (each attempt).
    pub connect_timeout: Duration,
    /// Whether `RL.MULTI` is available.
    pub multi: MultiSupport,
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            multi: MultiSupport::Detect,
        }
    }
}

enum Target {
    Single(redis::Client),
    Cluster(ClusterClient),
}

#[derive(Clone)]
enum Connection {
    Single(Box<ConnectionManager>),
    Cluster(ClusterConnection),
}

impl Connection {
    async fn query(&self, command: &Cmd) -> Result<Value, RedisError> {
        match self {
            Self::Single(manager) => {
                ConnectionManager::clone(manager)
                    .req_packed_command(command)
                    .await
            }
            Self::Cluster(cluster) => cluster.clone().req_packed_command(command).await,
        }
    }

    async fn pipeline(
        &self,
        pipeline: &redis::Pipeline,
        count: usize,
    ) -> Result<Vec<Value>, RedisError> {
        match self {
            Self::Single(manager) => {
                ConnectionManager::clone(manager)
                    .req_packed_commands(pipeline, 0, count)
                    .await
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

const UNKNOWN: u8 = 0;
const ABSENT: u8 = 1;
const PRESENT: u8 = 2;

/// A [`Store`] on a Redis server or Redis Cluster with the `redis-ratelimit` module.
///
/// Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    options: RedisStoreOptions,
    connection: OnceLock<Connection>,
    /// Connection attempts, run as tasks of their own: a check that gives up waiting (its
    /// timeout is a few ms) must not cancel a connection that takes longer to set up.
    attempts: watch::Sender<Attempt>,
    multi: AtomicU8,
}

/// The latest connection attempt.
#[derive(Clone, Debug, Default)]
struct Attempt {
    number: u64,
    running: bool,
    error: Option<StoreError>,
}

impl RedisStore {
    /// A store on one server (`redis://host:port/db`), with default options.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        Self::with_options(url, RedisStoreOptions::default())
    }

    /// A store on one server.
    pub fn with_options(url: &str, options: RedisStoreOptions) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(|error| config_error(&error))?;
        Ok(Self::from_target(Target::Single(client), options))
    }

    /// A store on one server, from a client of the `redis` crate (the Sentinel store's
    /// primary).
    #[cfg(feature = "sentinel")]
    pub(crate) fn from_client(client: redis::Client, options: RedisStoreOptions) -> Self {
        Self::from_target(Target::Single(client), options)
    }

    /// A store on a Redis Cluster, given some of its nodes.
    pub fn cluster(nodes: &[&str], options: RedisStoreOptions) -> Result<Self, StoreError> {
        let client = ClusterClient::builder(nodes.to_vec())
            .connection_timeout(options.connect_timeout)
            .build()
            .map_err(|error| config_error(&error))?;
        Ok(Self::from_target(Target::Cluster(client), options))
    }

    fn from_target(target: Target, options: RedisStoreOptions) -> Self {
        let multi = match options.multi {
            MultiSupport::Detect => UNKNOWN,
            MultiSupport::Yes => PRESENT,
            MultiSupport::No => ABSENT,
        };
        Self {
            inner: Arc::new(Inner {
                target,
                options,
                connection: OnceLock::new(),
                attempts: watch::Sender::new(Attempt::default()),
                multi: AtomicU8::new(multi),
            }),
        }
    }

    /// Connects now (instead of on the first call) and learns the server's capabilities.
    pub async fn connect(&self) -> Result<(), StoreError> {
        self.connection().await.map(|_| ())
    }

    /// The connection, made on first use: waits for the attempt in progress, or starts one.
    async fn connection(&self) -> Result<&Connection, StoreError> {
        if let Some(connection) = self.inner.connection.get() {
            return Ok(connection);
        }
        let mut attempts = self.inner.attempts.subscribe();
        let mut start = false;
        self.inner.attempts.send_if_modified(|attempt| {
            if attempt.running {
                return false;
            }
            attempt.number = attempt.number.wrapping_add(1);
            attempt.running = true;
            attempt.error = None;
            start = true;
            true
        });
        let number = attempts.borrow_and_update().number;
        if start {
            let store = self.clone();
            tokio::spawn(async move { store.attempt().await });
        }
        let error = attempts
            .wait_for(|attempt| attempt.number != number || !attempt.running)
            .await
            .ok()
            .and_then(|attempt| attempt.error.clone());
        match self.inner.connection.get() {
            Some(connection) => Ok(connection),
            None => {
                Err(error.unwrap_or_else(|| StoreError::Unavailable("not connected yet".into())))
            }
        }
    }

    /// One connection attempt: connect, learn the capabilities, publish the outcome.
    async fn attempt(&self) {
        // Bounded, so a server that accepts but never answers cannot hold the attempt (and
        // every later one) forever.
        let bound = self.inner.options.connect_timeout.saturating_mul(2);
        let result = tokio::time::timeout(bound, async {
            let connection = self.open().await?;
            self.detect(&connection).await?;
            Ok(connection)
        })
        .await
        .unwrap_or(Err(StoreError::Timeout));
        let error = match result {
            Ok(connection) => {
                let _ = self.inner.connection.set(connection);
                None
            }
            Err(error) => Some(error),
        };
        self.inner.attempts.send_modify(|attempt| {
            attempt.running = false;
            attempt.error = error;
        });
    }

    async fn detect(&self, connection: &Connection) -> Result<(), StoreError> {
        if self.inner.multi.load(Ordering::SeqCst) == UNKNOWN {
            let present = has_command(connection, "rl.multi").await?;
            let value = if present { PRESENT } else { ABSENT };
            self.inner.multi.store(value, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn open(&self) -> Result<Connection, StoreError> {
        let timeout = self.inner.options.connect_timeout;
        match &self.inner.target {
            Target::Single(client) => {
                // One attempt per call: the limiter's circuit breaker paces the retries, and
                // once made the manager reconnects by itself.
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(0)
                    .set_connection_timeout(timeout);
                ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map(|manager| Connection::Single(Box::new(manager)))
                    .map_err(|error| store_error(&error))
            }
            Target::Cluster(client) => client
                .get_async_connection()
                .await
                .map(Connection::Cluster)
                .map_err(|error| store_error(&error)),
        }
    }

    fn multi(&self) -> bool {
        self.inner.multi.load(Ordering::SeqCst) == PRESENT
    }
}

/// Whether the server knows a command (`COMMAND INFO` replies nil for unknown ones).
async fn has_command(connection: &Connection, name: &str) -> Result<bool, StoreError> {
    let mut command = redis::cmd("COMMAND");
    command.arg("INFO").arg(name);
    let reply = connection
        .query(&command)
        .await
        .map_err(|error| store_error(&error))?;
    Ok(match reply {
        Value::Array(items) => items.iter().any(|item| !matches!(item, Value::Nil)),
        _ => false,
    })
}

fn to_cmd(args: &[String]) -> Cmd {
    let mut command = Cmd::new();
    for arg in args {
        command.arg(arg.as_str());
    }
    command
}

fn config_error(error: &RedisError) -> StoreError {
    StoreError::Server(format!("invalid Redis configuration: {error}"))
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
            ErrorKind::ClusterDown
                | ErrorKind::MasterDown
                | ErrorKind::TryAgain
                | ErrorKind::BusyLoadingError
                | ErrorKind::ClusterConnectionNotFound
                | ErrorKind::ReadOnly
        );
    if unavailable {
        StoreError::Unavailable(error.to_string())
    } else {
        StoreError::Server(error.to_string())
    }
}

impl Store for RedisStore {
    fn acquire<'a>(&'a self, request: &'a Acquire<'a>) -> BoxFuture<'a, Result<Grant, StoreError>> {
        Box::pin(async move {
            let connection = self.connection().await?;
            let command =
                reply::acquire_command(request, self.multi()).map_err(StoreError::Server)?;
            let value = connection
                .query(&to_cmd(command.args()))
                .await
                .map_err(|error| store_error(&error))?;
            reply::parse_acquire(&command, request, &value)
                .map_err(|detail| StoreError::Server(format!("unexpected reply: {detail}")))
        })
    }

    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let connection = self.connection().await?;
            let commands = reply::refund_commands(request);
            // The limits of a group share a slot, so one pipeline reaches them all.
            let mut pipeline = redis::pipe();
            for args in &commands {
                pipeline.add_command(to_cmd(args));
            }
            let replies = connection
                .pipeline(&pipeline, commands.len())
                .await
                .map_err(|error| store_error(&error))?;
            // A pipeline answers each command on its own: an error reply is a value.
            match replies.into_iter().find_map(|reply| match reply {
                Value::ServerError(error) => Some(error),
                _ => None,
            }) {
                Some(error) => Err(store_error(&RedisError::from(error))),
                None => Ok(()),
            }
        })
    }

    fn capabilities(&self) -> Capabilities {
        let multi = self.multi();
        Capabilities {
            multi,
            partial: multi,
        }
    }

    fn slot(&self, key: &str) -> Option<u16> {
        match self.inner.target {
            Target::Single(_) => None,
            Target::Cluster(_) => Some(redis::cluster_routing::get_slot(key.as_bytes())),
        }
    }
}
