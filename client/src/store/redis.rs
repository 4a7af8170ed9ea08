//! The Redis store: `RL.*` commands over the `redis` crate's multiplexed connections, on a
//! single server (through its connection manager, which reconnects by itself) or a Redis
//! Cluster (keyed calls routed by slot over one connection per node, `cluster.rs`; the
//! others through the crate's async cluster client).
//!
//! The connection is made on first use, not at construction: a service must start, and
//! fall back, while Redis is down.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::{Cmd, IntoConnectionInfo, RedisError, Value};
use redis_ratelimit_wire::encode::Args;
use tokio::sync::watch;

use super::backend::{self, Backend, BackendError, Probe, Resolved};
use super::batch::{BatchOptions, Batcher};
use super::cluster::{ClusterConnection, Nodes};
use super::connection::Connection;
use super::connection::store_error;
use super::contract::{BoxFuture, Capabilities, Store};
use super::error::StoreError;
use super::liveness::Liveness;
use super::request::{Acquire, HashFields, HashWrite, Refund};
use super::{command, reply};
use crate::outcome::{GroupGrant, StoreBackend};

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
    /// Which implementation to call: the module, the Functions library, or the library as
    /// a script; [`Backend::Auto`] (the default) picks when first connected.
    pub backend: Backend,
    /// How concurrent acquires share a write ([`BatchOptions::OFF`]: each on its own).
    pub batch: BatchOptions,
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            multi: MultiSupport::Detect,
            backend: Backend::Auto,
            batch: BatchOptions::default(),
        }
    }
}

/// Both boxed: their sizes depend on the `redis` crate's features (TLS makes a client of one
/// server larger), and the target is read only when connecting.
enum Target {
    Single(Box<redis::Client>),
    /// The client, the nodes it was given (for error messages), and the nodes by slot.
    Cluster(Box<ClusterClient>, String, Arc<Nodes>),
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
    /// The backend in use, once resolved on the first connection.
    backend: OnceLock<Resolved>,
    /// Holds concurrent acquires for a shared write.
    batcher: Arc<Batcher>,
    /// The calls waiting for a reply and when one was last heard, per slot.
    liveness: Arc<Liveness>,
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
        let client = redis::Client::open(url).map_err(|error| {
            StoreError::Config(format!(
                "'{url}' is not a Redis URL ({error}); write redis://host:port/db, \
                 rediss:// for TLS, or redis+unix:///path/to/socket"
            ))
        })?;
        Ok(Self::from_target(Target::Single(Box::new(client)), options))
    }

    /// A store on one server, from a client of the `redis` crate (the Sentinel store's
    /// primary).
    #[cfg(feature = "sentinel")]
    pub(crate) fn from_client(client: redis::Client, options: RedisStoreOptions) -> Self {
        Self::from_target(Target::Single(Box::new(client)), options)
    }

    /// A store on a Redis Cluster, given some of its nodes.
    pub fn cluster(nodes: &[&str], options: RedisStoreOptions) -> Result<Self, StoreError> {
        // No retries: the cluster client would send a command again through a new
        // connection after a cut one (16 times by default), charging twice when the node ran
        // it before the cut. Redirects are followed by `cluster.rs` instead.
        let client = ClusterClient::builder(nodes.to_vec())
            .connection_timeout(options.connect_timeout)
            .retries(0)
            .build()
            .map_err(|error| {
                StoreError::Config(format!("cannot use the cluster nodes {nodes:?}: {error}"))
            })?;
        let infos = nodes
            .iter()
            .map(|node| node.into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| {
                StoreError::Config(format!("cannot use the cluster nodes {nodes:?}: {error}"))
            })?;
        let by_slot = Nodes::new(&infos, options.connect_timeout).ok_or_else(|| {
            StoreError::Config("a cluster store needs at least one node".to_string())
        })?;
        let named = format!("the cluster at {}", nodes.join(", "));
        Ok(Self::from_target(
            Target::Cluster(Box::new(client), named, Arc::new(by_slot)),
            options,
        ))
    }

    fn from_target(target: Target, options: RedisStoreOptions) -> Self {
        let multi = match options.multi {
            MultiSupport::Detect => UNKNOWN,
            MultiSupport::Yes => PRESENT,
            MultiSupport::No => ABSENT,
        };
        let liveness = Arc::new(Liveness::default());
        let batcher = Batcher::new(options.batch, Arc::clone(&liveness));
        Self {
            inner: Arc::new(Inner {
                target,
                options,
                connection: OnceLock::new(),
                attempts: watch::Sender::new(Attempt::default()),
                multi: AtomicU8::new(multi),
                backend: OnceLock::new(),
                batcher,
                liveness,
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
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "no answer within {bound:?}"
            )))
        })
        .map_err(|error| self.naming_the_address(error));
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
        if self.inner.backend.get().is_none() {
            let resolved = backend::resolve(connection, self.inner.options.backend).await?;
            backend::record(resolved.backend);
            let _ = self.inner.backend.set(resolved);
        }
        if self.backend() != Some(StoreBackend::Module) {
            // The library has every command, RL.MULTI and partial grants included.
            self.inner.multi.store(PRESENT, Ordering::SeqCst);
        }
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
                // No response timeout of the crate's own (1.x sets 500 ms by default): each
                // check is bounded by its policy's timeout, which may be longer.
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(0)
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                ConnectionManager::new_with_config(redis::Client::clone(client), config)
                    .await
                    .map(|manager| Connection::Single(Box::new(manager)))
                    .map_err(|error| store_error(&error))
            }
            Target::Cluster(client, _, nodes) => {
                let all = client
                    .get_async_connection()
                    .await
                    .map_err(|error| store_error(&error))?;
                Ok(Connection::Cluster(
                    ClusterConnection::new(all, Arc::clone(nodes)).await,
                ))
            }
        }
    }

    fn multi(&self) -> bool {
        self.inner.multi.load(Ordering::SeqCst) == PRESENT
    }

    /// A connection error with the address it was for ("cannot connect to 127.0.0.1:6379:
    /// Connection refused").
    fn naming_the_address(&self, error: StoreError) -> StoreError {
        let address = match &self.inner.target {
            Target::Single(client) => client.get_connection_info().addr().to_string(),
            Target::Cluster(_, nodes, _) => nodes.clone(),
        };
        let named = |detail: String| format!("cannot connect to {address}: {detail}");
        match error {
            StoreError::Timeout => StoreError::Unavailable(named("timed out".into())),
            StoreError::Unavailable(detail) => StoreError::Unavailable(named(detail)),
            StoreError::Server(detail) => StoreError::Server(named(detail)),
            StoreError::Invalid(detail) => StoreError::Invalid(named(detail)),
            StoreError::Config(detail) => StoreError::Config(named(detail)),
        }
    }

    /// The backend in use (the module, the Functions library or scripts), once connected.
    pub fn backend(&self) -> Option<StoreBackend> {
        self.inner.backend.get().map(|resolved| resolved.backend)
    }

    /// The command running the module command `args` on the backend in use (before the
    /// first connection resolves one, the command itself: nothing is sent before then).
    fn command(&self, args: &Args) -> Cmd {
        match self.inner.backend.get() {
            Some(resolved) => backend::command(resolved.backend, &resolved.sha, args),
            None => to_cmd(args),
        }
    }

    /// Whether an error reply says the server lost the backend's script or library.
    fn lost(&self, code: Option<&str>, detail: Option<&str>) -> Option<StoreBackend> {
        self.backend()
            .filter(|backend| backend::lost(*backend, code, detail))
    }

    /// Runs an acquire's `command` (on a key of `slot`) on the backend, through the
    /// batcher: sent at once when nothing is in flight, else in one write with the acquires
    /// waiting with it. A script or library the server no longer has (`NOSCRIPT` after a
    /// restart or `SCRIPT FLUSH`; `Function not found` after `FUNCTION FLUSH`) is loaded
    /// again and the call retried once, as `again` writes it.
    async fn run_batched(
        &self,
        connection: &Connection,
        slot: Option<u16>,
        command: Cmd,
        again: impl FnOnce() -> Result<Cmd, StoreError>,
    ) -> Result<Value, StoreError> {
        let reply = self.inner.batcher.run(connection, slot, command).await?;
        match reply.extract_error() {
            Ok(value) => Ok(value),
            Err(error) => match self.lost(error.code(), error.detail()) {
                Some(backend) => {
                    let _ = backend::reload(connection, backend).await;
                    connection
                        .query(&again()?)
                        .await
                        .map_err(|error| store_error(&error))
                }
                None => Err(store_error(&error)),
            },
        }
    }
}

impl RedisStore {
    /// Runs commands of one group in one pipeline (the limits of a group share a slot, so
    /// one pipeline reaches them all; `writes`: they change the store). Commands the server
    /// could not run because it lost the backend's script or library are sent again once
    /// it is loaded, and only those (the others ran). The first error reply is the error.
    async fn pipelined(
        &self,
        connection: &Connection,
        commands: &[Args],
        writes: bool,
    ) -> Result<Vec<Value>, StoreError> {
        if commands.is_empty() {
            // Nothing to send (the `redis` crate refuses an empty pipeline).
            return Ok(Vec::new());
        }
        let mut pipeline = redis::pipe();
        for args in commands {
            pipeline.add_command(self.command(args));
        }
        let mut replies = connection
            .pipeline(&pipeline, commands.len(), writes)
            .await
            .map_err(|error| store_error(&error))?;
        let lost_at = |reply: &Value| match reply {
            Value::ServerError(error) => self.lost(Some(error.code()), error.details()),
            _ => None,
        };
        let lost: Vec<usize> = (0..replies.len())
            .filter(|index| replies.get(*index).and_then(lost_at).is_some())
            .collect();
        if let Some(backend) = lost
            .first()
            .and_then(|index| replies.get(*index))
            .and_then(lost_at)
        {
            let _ = backend::reload(connection, backend).await;
            let mut again = redis::pipe();
            for args in lost.iter().filter_map(|index| commands.get(*index)) {
                again.add_command(self.command(args));
            }
            let answers = connection
                .pipeline(&again, lost.len(), writes)
                .await
                .map_err(|error| store_error(&error))?;
            for (index, answer) in lost.iter().zip(answers) {
                if let Some(reply) = replies.get_mut(*index) {
                    *reply = answer;
                }
            }
        }
        // A pipeline answers each command on its own: an error reply is a value.
        match replies.iter().find_map(|reply| match reply {
            Value::ServerError(error) => Some(error.clone()),
            _ => None,
        }) {
            Some(error) => Err(store_error(&RedisError::from(error))),
            None => Ok(replies),
        }
    }
}

impl Probe for Connection {
    async fn has_command(&self, name: &str) -> Result<bool, BackendError> {
        has_command(self, name)
            .await
            .map_err(|error| BackendError::Server(error.to_string()))
    }

    async fn run(&self, command: &Cmd) -> Result<Value, BackendError> {
        self.query(command)
            .await
            .map_err(|error| BackendError::Server(error.to_string()))
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

fn to_cmd(args: &Args) -> Cmd {
    let mut command = Cmd::new();
    for arg in args.iter() {
        command.arg(arg);
    }
    command
}

/// The largest charge the Functions library takes (Lua numbers are exact to 2^53; the
/// module takes any 64-bit one).
const LIBRARY_MOST_UNITS: u64 = 1 << 53;

/// Refuses, before sending it, a call the Functions library would refuse: a charge (units ×
/// weight) above 2^53, in the library's own words.
fn beyond_the_library(request: &Acquire<'_>) -> Result<(), StoreError> {
    match request
        .limits
        .iter()
        .find(|limit| request.units.saturating_mul(limit.weight.max(1)) > LIBRARY_MOST_UNITS)
    {
        Some(limit) => Err(StoreError::Invalid(format!(
            "ERR cost must be at most {LIBRARY_MOST_UNITS} in the ratelimit library (Lua \
             numbers are exact only to 2^53); the module accepts more (got {} x weight {} \
             on key '{}')",
            request.units,
            limit.weight.max(1),
            limit.key
        ))),
        None => Ok(()),
    }
}

impl Store for RedisStore {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        let slot = request
            .limits
            .first()
            .and_then(|limit| self.slot(limit.key));
        Box::pin(self.inner.liveness.track(slot, async move {
            let connection = self.connection().await?;
            // Resolved before the connection is published, so always there by now.
            let backend = self.backend().ok_or_else(|| {
                StoreError::Unavailable("connected, but no backend resolved yet".into())
            })?;
            if backend != StoreBackend::Module {
                beyond_the_library(request)?;
            }
            let multi = self.multi();
            let (command, shape) =
                command::with_acquire(request, multi, |args| self.command(args))?;
            let again = || {
                command::acquire_command(request, multi)
                    .map(|command| self.command(command.args()))
                    .map_err(StoreError::from)
            };
            let value = self.run_batched(connection, slot, command, again).await?;
            reply::parse_acquire(shape, request, &value, backend).map_err(StoreError::from)
        }))
    }

    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        let slot = request
            .limits
            .first()
            .and_then(|limit| self.slot(limit.key));
        Box::pin(self.inner.liveness.track(slot, async move {
            let connection = self.connection().await?;
            let commands = command::refund_commands(request)?;
            self.pipelined(connection, &commands, true)
                .await
                .map(|_| ())
        }))
    }

    fn peek<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        let slot = request
            .limits
            .first()
            .and_then(|limit| self.slot(limit.key));
        Box::pin(self.inner.liveness.track(slot, async move {
            let connection = self.connection().await?;
            let backend = self.backend().ok_or_else(|| {
                StoreError::Unavailable("connected, but no backend resolved yet".into())
            })?;
            let commands = command::peek_commands(request);
            let replies = self.pipelined(connection, &commands, false).await?;
            reply::parse_peeks(&replies, backend, request.units).map_err(StoreError::from)
        }))
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
            Target::Cluster(..) => Some(redis_ratelimit_wire::slot::key_slot(key.as_bytes())),
        }
    }

    fn silent_for(&self, slot: Option<u16>) -> Option<Duration> {
        Some(self.inner.liveness.silent_for(slot))
    }

    fn write_hashes<'a>(
        &'a self,
        hashes: &'a [HashWrite],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if hashes.is_empty() {
                return Ok(());
            }
            let connection = self.connection().await?;
            let mut pipeline = redis::pipe();
            for hash in hashes {
                let mut hset = redis::cmd("HSET");
                hset.arg(&hash.key);
                for (field, value) in &hash.fields {
                    hset.arg(field).arg(value);
                }
                pipeline.add_command(hset);
                pipeline.add_command(
                    redis::cmd("PEXPIREAT")
                        .arg(&hash.key)
                        .arg(hash.expire_at_ms)
                        .clone(),
                );
            }
            let count = hashes.len().saturating_mul(2);
            let replies = connection
                .pipeline(&pipeline, count, true)
                .await
                .map_err(|error| store_error(&error))?;
            match replies.iter().find_map(|reply| match reply {
                Value::ServerError(error) => Some(error),
                _ => None,
            }) {
                Some(error) => Err(StoreError::Server(format!(
                    "{} {}",
                    error.code(),
                    error.details().unwrap_or_default()
                ))),
                None => Ok(()),
            }
        })
    }

    fn read_hashes<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<HashFields>, StoreError>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let connection = self.connection().await?;
            let mut pipeline = redis::pipe();
            for key in keys {
                pipeline.add_command(redis::cmd("HGETALL").arg(key).clone());
            }
            let replies = connection
                .pipeline(&pipeline, keys.len(), false)
                .await
                .map_err(|error| store_error(&error))?;
            replies
                .into_iter()
                .map(|reply| {
                    redis::from_redis_value::<std::collections::HashMap<String, String>>(reply)
                        .map(|fields| fields.into_iter().collect())
                        .map_err(|error| StoreError::Server(format!("HGETALL: {error}")))
                })
                .collect()
        })
    }
}
