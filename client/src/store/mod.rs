//! Where limits are decided: the [`Store`] trait, what it is asked and what it answers.
//!
//! The limiter never builds Redis commands itself. It asks a store to *acquire* units from a
//! group of limits whose keys share a slot (all-or-nothing, or a partial grant for leases)
//! and to *refund* units. [`RedisStore`] turns that into `RL.*` commands;
//! [`MemoryStore`] runs the same core algorithms in process, for tests and examples that
//! have no server.

pub(crate) mod backend;
mod batch;
mod cluster;
mod command;
mod connection;
mod liveness;
mod memory;
mod redis;
mod reply;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::algorithm::Algorithm;

pub use self::backend::{Backend, LIBRARY};
pub use self::batch::BatchOptions;
pub use self::memory::MemoryStore;
pub use self::redis::{MultiSupport, RedisStore, RedisStoreOptions};
#[cfg(feature = "sentinel")]
pub use self::sentinel::{
    RESOLVE_PACE, SentinelStore, SentinelUrlError, parse_url as parse_sentinel_url,
};
pub use crate::outcome::{GroupGrant, StoreBackend, View};

/// A boxed future, as the [`Store`] trait returns (keeps the trait object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One limit of a group: its rendered key, algorithm and weight.
#[derive(Clone, Copy, Debug)]
pub struct LimitCall<'a> {
    /// The Redis key.
    pub key: &'a str,
    /// The algorithm and its parameters.
    pub algorithm: &'a Algorithm,
    /// Units this limit is charged per unit of cost.
    pub weight: u64,
    /// Pacing (`MAXWAIT`, token buckets only): admit with a wait up to this long.
    pub max_wait: Option<Duration>,
    /// A regional limit ([`Limit::regional`](crate::Limit::regional)): the suffix that makes
    /// its lease key of its key (the floor's). Such a limit is its group's only one, taken
    /// whole with `RL.REGIONAL key key+suffix ...` (the floor, then the region's lease).
    pub lease_suffix: Option<&'a str>,
}

impl LimitCall<'_> {
    /// The lease key of a regional limit: its key and the lease suffix.
    pub fn lease_key(&self) -> Option<String> {
        self.lease_suffix
            .map(|suffix| format!("{}{suffix}", self.key))
    }
}

/// A request to take units from every limit of a group at once.
#[derive(Clone, Debug)]
pub struct Acquire<'a> {
    /// The limits (keys in one slot when the store is a cluster).
    pub limits: Vec<LimitCall<'a>>,
    /// Units asked for (each limit is charged `units × weight`).
    pub units: u64,
    /// `None`: all or nothing. `Some(min)`: grant as many units as every limit has, up to
    /// `units`, if at least `min` (the module's `PARTIAL MIN min`).
    pub partial_min: Option<u64>,
    /// The caller's id for the slot it takes in every in-flight limit of the group.
    pub holder: Option<&'a str>,
}

/// A request to give units back to every limit of a group (`units × weight` each).
#[derive(Clone, Debug)]
pub struct Refund<'a> {
    /// The limits to refund.
    pub limits: Vec<LimitCall<'a>>,
    /// Units to give back.
    pub units: u64,
    /// The holder whose slots in-flight limits release.
    pub holder: Option<&'a str>,
}

/// One hash the top-keys reporter writes ([`top`](crate::top)): its fields set (each value
/// replacing the field's), then its absolute expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashWrite {
    /// The hash's key.
    pub key: String,
    /// The fields and their values.
    pub fields: Vec<(String, String)>,
    /// When the hash expires, in ms since the Unix epoch (`PEXPIREAT`).
    pub expire_at_ms: u64,
}

/// A hash as read: its fields and values.
pub type HashFields = Vec<(String, String)>;

/// Which operations a store supports natively.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Several limits in one atomic call (`RL.MULTI`). Without it, every limit is its own
    /// group and all-or-nothing is kept by refunds.
    pub multi: bool,
    /// Partial grants (`PARTIAL MIN m`), which leases need.
    pub partial: bool,
}

/// Why a store call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The store did not answer in time.
    Timeout,
    /// The store is unreachable or unavailable (connection refused or dropped, cluster down,
    /// loading, failing over): worth falling back and retrying later.
    Unavailable(String),
    /// The store answered with an error that retrying will not fix (a key holding another
    /// type, an unknown command, a reply of an unexpected shape).
    Server(String),
    /// The store refused the request's arguments (a cost or weight out of its range, a
    /// limit above a server setting): the caller's error, never an outage or a fallback.
    Invalid(String),
    /// The store cannot be set up as given (an unparsable URL, a cluster without nodes).
    Config(String),
}

impl StoreError {
    /// Whether the error says the store is unreachable (counts towards the circuit breaker
    /// and triggers the fallback) rather than that it refused the request.
    pub fn is_unavailability(&self) -> bool {
        matches!(self, Self::Timeout | Self::Unavailable(_))
    }

    /// The label used in the `ratelimit_store_errors_total` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Unavailable(_) => "unavailable",
            Self::Server(_) => "server",
            Self::Invalid(_) => "invalid",
            Self::Config(_) => "config",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => write!(f, "the store did not answer in time"),
            Self::Unavailable(detail) => write!(f, "the store is unavailable: {detail}"),
            Self::Server(detail) | Self::Invalid(detail) => {
                write!(f, "the store refused the request: {detail}")
            }
            Self::Config(detail) => write!(f, "bad store configuration: {detail}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A place where limits are decided atomically.
///
/// Implementations must make [`acquire`](Store::acquire) atomic over the group's limits:
/// either every limit is charged or none is.
pub trait Store: Send + Sync + 'static {
    /// Takes units from every limit of a group, all or nothing (or a partial grant).
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>>;

    /// Gives units back to every limit of a group, never beyond their limits.
    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>>;

    /// What [`acquire`](Store::acquire) would answer now, taking nothing: each limit's view
    /// of a call of `units × weight` (the holder and `partial_min` are not used). The
    /// Redis and memory stores read (`RL.PEEK`); this default, for a store without a
    /// read-only call, acquires and refunds what it was granted.
    fn peek<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(async move {
            let grant = self.acquire(request).await?;
            if grant.granted > 0 {
                let refund = Refund {
                    limits: request.limits.clone(),
                    units: grant.granted,
                    holder: request.holder,
                };
                // A lost refund under-admits by the probed units; never over.
                let _ = self.refund(&refund).await;
            }
            Ok(grant)
        })
    }

    /// What the store supports (may be learned when it first answers).
    fn capabilities(&self) -> Capabilities;

    /// The hash slot a key lives in when the store is a Redis Cluster (keys in different
    /// slots cannot share one atomic call), `None` when every key can.
    fn slot(&self, key: &str) -> Option<u16>;

    /// How long the calls waiting on `slot` (as [`slot`](Store::slot) gives it) have heard
    /// no reply from the store: zero while it answers or nothing waits. The limiter gives a
    /// call up only when this reaches its timeout, so a burst waiting behind replies that
    /// keep coming, or a caller whose own runtime ran late, is not taken for an outage.
    /// `None` (the default): this store does not track its replies, and each call gets its
    /// timeout (one more when the store answered another call since it was sent).
    fn silent_for(&self, _slot: Option<u16>) -> Option<Duration> {
        None
    }

    /// Writes `hashes` in one pipeline (`HSET key field value ...`, then `PEXPIREAT key ms`,
    /// for each): the fleet's top-keys reports. Never retried (the next report carries the
    /// same summaries whole). The default: a store that keeps no hashes.
    fn write_hashes<'a>(
        &'a self,
        _hashes: &'a [HashWrite],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(no_hashes()) })
    }

    /// Reads each of `keys`' hash whole (`HGETALL`, in one pipeline), in order; a missing key
    /// is an empty hash. The default: a store that keeps no hashes.
    fn read_hashes<'a>(
        &'a self,
        _keys: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<HashFields>, StoreError>> {
        Box::pin(async { Err(no_hashes()) })
    }
}

/// What a store without hashes answers the top-keys reporter.
fn no_hashes() -> StoreError {
    StoreError::Server("this store keeps no hashes (the top-keys reports need Redis)".into())
}
