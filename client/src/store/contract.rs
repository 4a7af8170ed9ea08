//! The [`Store`] trait every store keeps (atomic over a group's limits), the future it
//! returns and what a store supports ([`Capabilities`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::error::StoreError;
use super::request::{Acquire, HashFields, HashWrite, Refund};
use crate::outcome::GroupGrant;

/// A boxed future, as the [`Store`] trait returns (keeps the trait object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which operations a store supports natively.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Several limits in one atomic call (`RL.MULTI`). Without it, every limit is its own
    /// group and all-or-nothing is kept by refunds.
    pub multi: bool,
    /// Partial grants (`PARTIAL MIN m`), which leases need.
    pub partial: bool,
}

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
