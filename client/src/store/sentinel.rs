//! Redis Sentinel: a [`Store`] that finds the primary through the sentinels and follows it
//! through a failover.
//!
//! It wraps a [`RedisStore`] on the primary the sentinels name (checked with `ROLE`, by the
//! `redis` crate's `Sentinel`). A call that fails as unavailable (refused, reset, `READONLY`
//! from a demoted primary) or that the limiter abandons at its timeout (a primary that died
//! without closing its connections) makes it ask the sentinels again, in a task of its own
//! and at most every [`RESOLVE_PACE`]; once they name another primary, later calls go there.
//! The limiter's timeout, fallback and circuit breaker work as with any store: while no
//! primary answers, calls fail or time out and the fallback decides.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{ConnectionAddr, RedisConnectionInfo};
use tokio::sync::watch;

use super::contract::{BoxFuture, Capabilities, Store};
use super::error::StoreError;
use super::liveness::Liveness;
use super::redis::{RedisStore, RedisStoreOptions};
use super::request::{Acquire, HashFields, HashWrite, Refund};
use crate::outcome::GroupGrant;

/// The shortest time between two questions to the sentinels.
pub const RESOLVE_PACE: Duration = Duration::from_millis(200);

/// A [`Store`] on the primary a set of Redis Sentinels monitor under one name.
///
/// Cheap to clone: clones share the sentinels and the primary's connection.
#[derive(Clone)]
pub struct SentinelStore {
    inner: Arc<Inner>,
}

struct Inner {
    sentinel: tokio::sync::Mutex<Sentinel>,
    service: String,
    node: SentinelNodeConnectionInfo,
    options: RedisStoreOptions,
    /// The primary in use: its address and its store. `None` until first resolved.
    current: Mutex<Option<(String, RedisStore)>>,
    /// Bumped at the end of each resolution, for callers waiting for the first one.
    resolved: watch::Sender<u64>,
    resolving: AtomicBool,
    last_resolve: Mutex<Option<Instant>>,
    /// The calls waiting for a reply and when one was last heard, whichever primary they
    /// went to (a call stuck on a stopped primary is not excused by a new one's answers).
    liveness: Arc<Liveness>,
}

impl SentinelStore {
    /// A store on the primary named `service` by the sentinels at `sentinels`
    /// (`redis://host:26379/`, several for redundancy). `db` and credentials of the data
    /// nodes go in `node`.
    pub fn new(
        sentinels: &[&str],
        service: &str,
        node: RedisConnectionInfo,
        options: RedisStoreOptions,
    ) -> Result<Self, StoreError> {
        if sentinels.is_empty() {
            return Err(StoreError::Server(
                "invalid Redis configuration: a Sentinel store needs at least one sentinel".into(),
            ));
        }
        if service.is_empty() {
            return Err(StoreError::Server(
                "invalid Redis configuration: a Sentinel store needs the monitored name".into(),
            ));
        }
        let sentinel = Sentinel::build(sentinels.to_vec())
            .map_err(|error| StoreError::Server(format!("invalid Redis configuration: {error}")))?;
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(node);
        Ok(Self {
            inner: Arc::new(Inner {
                sentinel: tokio::sync::Mutex::new(sentinel),
                service: service.to_string(),
                node,
                options,
                current: Mutex::new(None),
                resolved: watch::Sender::new(0),
                resolving: AtomicBool::new(false),
                last_resolve: Mutex::new(None),
                liveness: Arc::default(),
            }),
        })
    }

    /// A store from a URL `redis+sentinel://host:port[,host:port...]/name[/db]` (port
    /// 26379 when left out).
    pub fn from_url(url: &str, options: RedisStoreOptions) -> Result<Self, StoreError> {
        let (sentinels, service, db) = parse_url(url).map_err(|why| {
            StoreError::Server(format!("invalid Redis configuration: {why} in '{url}'"))
        })?;
        let urls: Vec<String> = sentinels
            .iter()
            .map(|address| format!("redis://{address}/"))
            .collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let node = RedisConnectionInfo::default().set_db(db);
        Self::new(&urls, &service, node, options)
    }

    /// The address of the primary in use, once one has been found.
    pub fn primary_address(&self) -> Option<String> {
        lock(&self.inner.current)
            .as_ref()
            .map(|(address, _)| address.clone())
    }

    /// The current primary's store; when none is known yet, waits for a resolution.
    async fn primary(&self) -> Result<RedisStore, StoreError> {
        if let Some((_, store)) = lock(&self.inner.current).as_ref() {
            return Ok(store.clone());
        }
        let mut resolved = self.inner.resolved.subscribe();
        let seen = *resolved.borrow_and_update();
        self.resolve_soon(true);
        let _ = resolved.wait_for(|round| *round != seen).await;
        lock(&self.inner.current)
            .as_ref()
            .map(|(_, store)| store.clone())
            .ok_or_else(|| StoreError::Unavailable("no primary found by the sentinels".into()))
    }

    /// Asks the sentinels again, in a task of its own (a caller giving up must not cancel
    /// it), unless a resolution runs or ran less than [`RESOLVE_PACE`] ago (`now` skips the
    /// pace, for the first one).
    fn resolve_soon(&self, now: bool) {
        {
            let mut last = lock(&self.inner.last_resolve);
            if !now && last.is_some_and(|at| at.elapsed() < RESOLVE_PACE) {
                return;
            }
            if self.inner.resolving.swap(true, Ordering::SeqCst) {
                return;
            }
            *last = Some(Instant::now());
        }
        let store = self.clone();
        tokio::spawn(async move {
            store.resolve().await;
            store.inner.resolving.store(false, Ordering::SeqCst);
            store
                .inner
                .resolved
                .send_modify(|round| *round = round.wrapping_add(1));
        });
    }

    async fn resolve(&self) {
        let bound = self.inner.options.connect_timeout.saturating_mul(2);
        let found = tokio::time::timeout(bound, async {
            let mut sentinel = self.inner.sentinel.lock().await;
            sentinel
                .async_master_for(&self.inner.service, Some(&self.inner.node))
                .await
        })
        .await;
        let Ok(Ok(client)) = found else {
            return;
        };
        let address = match client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            other => other.to_string(),
        };
        let mut current = lock(&self.inner.current);
        if current.as_ref().is_some_and(|(known, _)| *known == address) {
            return;
        }
        *current = Some((
            address,
            RedisStore::from_client(client, self.inner.options.clone()),
        ));
    }

    /// A watch over one call: unless disarmed by a success or a refusal, its drop (the call
    /// failed as unavailable, or the limiter abandoned it at its timeout) makes the store
    /// look for the primary again.
    fn watch(&self) -> Abandoned<'_> {
        Abandoned {
            store: self,
            armed: true,
        }
    }
}

/// Asks the sentinels again when dropped armed: a call the limiter abandoned (timed out), or
/// one that failed as unavailable.
struct Abandoned<'a> {
    store: &'a SentinelStore,
    armed: bool,
}

impl Abandoned<'_> {
    /// Keeps the watch armed only if `result` says the store was unavailable.
    fn settle<T>(mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        self.armed = matches!(result, Err(StoreError::Unavailable(_)));
        result
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.store.resolve_soon(false);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a Sentinel URL is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SentinelUrlError {
    /// Another scheme.
    #[error("a Sentinel URL starts with redis+sentinel://")]
    Scheme,
    /// No name of the monitored primary.
    #[error("no monitored name after the sentinels (…/mymaster)")]
    NoName,
    /// A database that is not a number.
    #[error("the database '{0}' is not a number")]
    Database(String),
    /// More than `/name/db`.
    #[error("more path than /name/db")]
    Path,
    /// Two commas in a row, or one at an end.
    #[error("an empty sentinel address")]
    EmptyAddress,
}

/// `redis+sentinel://h1:p1,h2:p2/name[/db]` → (addresses, name, db).
pub fn parse_url(url: &str) -> Result<(Vec<String>, String, i64), SentinelUrlError> {
    let rest = url
        .strip_prefix("redis+sentinel://")
        .ok_or(SentinelUrlError::Scheme)?;
    let (hosts, path) = rest.split_once('/').ok_or(SentinelUrlError::NoName)?;
    let mut parts = path.split('/').filter(|part| !part.is_empty());
    let service = parts.next().ok_or(SentinelUrlError::NoName)?.to_string();
    let db = match parts.next() {
        Some(db) => db
            .parse::<i64>()
            .map_err(|_| SentinelUrlError::Database(db.to_string()))?,
        None => 0,
    };
    if parts.next().is_some() {
        return Err(SentinelUrlError::Path);
    }
    let sentinels: Vec<String> = hosts
        .split(',')
        .map(|host| {
            if host.is_empty() {
                Err(SentinelUrlError::EmptyAddress)
            } else if host
                .rsplit_once(':')
                .is_some_and(|(_, port)| !port.contains(']'))
            {
                Ok(host.to_string())
            } else {
                Ok(format!("{host}:26379"))
            }
        })
        .collect::<Result<_, _>>()?;
    Ok((sentinels, service, db))
}

impl Store for SentinelStore {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(self.inner.liveness.track(None, async move {
            let watch = self.watch();
            let store = self.primary().await;
            watch.settle(match store {
                Ok(store) => store.acquire(request).await,
                Err(error) => Err(error),
            })
        }))
    }

    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.inner.liveness.track(None, async move {
            let watch = self.watch();
            let store = self.primary().await;
            watch.settle(match store {
                Ok(store) => store.refund(request).await,
                Err(error) => Err(error),
            })
        }))
    }

    fn peek<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(self.inner.liveness.track(None, async move {
            let watch = self.watch();
            let store = self.primary().await;
            watch.settle(match store {
                Ok(store) => store.peek(request).await,
                Err(error) => Err(error),
            })
        }))
    }

    fn capabilities(&self) -> Capabilities {
        lock(&self.inner.current).as_ref().map_or(
            Capabilities {
                multi: false,
                partial: false,
            },
            |(_, store)| store.capabilities(),
        )
    }

    fn slot(&self, _key: &str) -> Option<u16> {
        None
    }

    fn silent_for(&self, slot: Option<u16>) -> Option<Duration> {
        Some(self.inner.liveness.silent_for(slot))
    }

    fn write_hashes<'a>(
        &'a self,
        hashes: &'a [HashWrite],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let watch = self.watch();
            let store = self.primary().await;
            watch.settle(match store {
                Ok(store) => store.write_hashes(hashes).await,
                Err(error) => Err(error),
            })
        })
    }

    fn read_hashes<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<HashFields>, StoreError>> {
        Box::pin(async move {
            let watch = self.watch();
            let store = self.primary().await;
            watch.settle(match store {
                Ok(store) => store.read_hashes(keys).await,
                Err(error) => Err(error),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_sentinels_the_service_and_the_database() {
        assert_eq!(
            parse_url("redis+sentinel://10.0.0.1:26380,sentinel-b/mymaster/2"),
            Ok((
                vec!["10.0.0.1:26380".to_string(), "sentinel-b:26379".to_string()],
                "mymaster".to_string(),
                2
            ))
        );
        assert_eq!(
            parse_url("redis+sentinel://s1/m"),
            Ok((vec!["s1:26379".to_string()], "m".to_string(), 0))
        );
        for bad in [
            "redis://s1/m",
            "redis+sentinel://s1",
            "redis+sentinel://s1/",
            "redis+sentinel://s1/m/x",
            "redis+sentinel://s1,,s2/m",
            "redis+sentinel://s1/m/0/extra",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert!(
            SentinelStore::from_url("redis+sentinel://s1", RedisStoreOptions::default()).is_err()
        );
    }
}
