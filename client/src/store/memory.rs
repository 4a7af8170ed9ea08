//! A store in this process, on the core algorithms: for tests, examples and single-process
//! services. It can simulate a cluster's slots, a store without `RL.MULTI`, latency and
//! outages, so the limiter's fallback paths are testable without a server.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{
    Acquire, BoxFuture, Capabilities, GroupGrant, HashFields, HashWrite, LimitCall, Refund, Store,
    StoreError,
};
use crate::clock::{Clock, MonotonicClock};
use crate::local::{LocalCall, LocalError, LocalLimits};
use crate::outcome::{Regional, Why};

/// An in-process [`Store`] running the module's algorithms with this process's clock (or
/// the [`Clock`] given to [`with_clock`](Self::with_clock)).
///
/// ```
/// use redis_ratelimit_client::store::MemoryStore;
/// let store = MemoryStore::new();
/// store.set_down(true); // every call now fails as if Redis were unreachable
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    limits: Mutex<LocalLimits>,
    capabilities: Capabilities,
    cluster: bool,
    down: AtomicBool,
    delay_us: AtomicU64,
    clock: Arc<dyn Clock>,
    /// Added to the clock (tests move time forward without sleeping).
    offset_us: AtomicI64,
    calls: AtomicU64,
    /// Hashes (the top-keys reports): fields and the expiry in ms on the store's clock.
    hashes: Mutex<HashMap<String, Hash>>,
}

/// A hash of the memory store: its fields, and when it expires (ms on the store's clock).
type Hash = (BTreeMap<String, String>, u64);

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store with every capability (`RL.MULTI`, partial grants), not clustered.
    pub fn new() -> Self {
        Self {
            limits: Mutex::new(LocalLimits::strict()),
            capabilities: Capabilities {
                multi: true,
                partial: true,
            },
            cluster: false,
            down: AtomicBool::new(false),
            delay_us: AtomicU64::new(0),
            clock: Arc::new(MonotonicClock),
            offset_us: AtomicI64::new(0),
            calls: AtomicU64::new(0),
            hashes: Mutex::new(HashMap::new()),
        }
    }

    /// The same store with other capabilities (e.g. a module without `RL.MULTI`).
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The same store reading `clock` (a [`FakeClock`](crate::FakeClock) shared with the
    /// limiter moves both).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The same store reporting Redis Cluster slots for keys, so limits in different slots
    /// are called separately, as they must be on a real cluster.
    #[must_use]
    pub fn clustered(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Makes every call fail as unavailable (`true`) or work again (`false`).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Makes every call take `delay` before answering (to trigger timeouts).
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay_us.store(us, Ordering::SeqCst);
    }

    /// Moves this store's clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let us = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.offset_us.fetch_add(us, Ordering::SeqCst);
    }

    /// Calls answered or attempted so far (acquires and refunds).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn now_us(&self) -> i64 {
        self.clock
            .now_us()
            .saturating_add(self.offset_us.load(Ordering::SeqCst))
    }

    /// Now in ms for the hashes' expiries, unless the store is down (a hash call is not
    /// counted in [`calls`](Self::calls), which counts the limits' calls).
    fn hashes_now_ms(&self) -> Result<u64, StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the memory store is down".into()));
        }
        Ok(u64::try_from(self.now_us().checked_div(1_000).unwrap_or(0)).unwrap_or(0))
    }

    /// The common part of every call: count it, wait the configured delay, fail if down.
    async fn enter(&self) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let delay = self.delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_micros(delay)).await;
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the memory store is down".into()));
        }
        Ok(())
    }

    fn check_slots(&self, limits: &[LimitCall<'_>]) -> Result<(), StoreError> {
        if limits.len() > 1 && limits.iter().any(|call| call.max_wait.is_some()) {
            return Err(StoreError::Server(
                "ERR a paced limit needs a call of its own".into(),
            ));
        }
        let mut slots = limits.iter().map(|call| self.slot(call.key));
        let first = slots.next().flatten();
        if slots.any(|slot| slot != first) {
            return Err(StoreError::Server(
                "CROSSSLOT Keys in request don't hash to the same slot".into(),
            ));
        }
        if limits.len() > 1 && !self.capabilities.multi {
            return Err(StoreError::Server("ERR unknown command 'RL.MULTI'".into()));
        }
        Ok(())
    }
}

fn local_calls<'a>(limits: &[LimitCall<'a>], holder: Option<&'a str>) -> Vec<LocalCall<'a>> {
    limits
        .iter()
        .map(|call| LocalCall {
            key: call.key,
            quota: Cow::Borrowed(call.algorithm.as_quota()),
            weight: call.weight,
            max_wait_ns: call.max_wait.map(wait_ns),
            holder,
        })
        .collect()
}

fn wait_ns(wait: Duration) -> u64 {
    u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)
}

fn server_error(error: LocalError) -> StoreError {
    StoreError::Server(match error {
        LocalError::KindMismatch(key) => format!("ERR key '{key}' holds another limiter"),
        LocalError::Params(message) => format!("ERR {message}"),
    })
}

impl Store for MemoryStore {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(async move {
            self.enter().await?;
            self.check_slots(&request.limits)?;
            if request.partial_min.is_some() && !self.capabilities.partial {
                return Err(StoreError::Server("ERR syntax error (PARTIAL)".into()));
            }
            let calls = local_calls(&request.limits, request.holder);
            let now_us = self.now_us();
            let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
            let mut grant = limits
                .acquire(&calls, request.units, request.partial_min, now_us)
                .map_err(server_error)?;
            // No region leases in memory: a regional limit is its floor alone, and says so.
            if request.partial_min.is_none() {
                let regional = request
                    .limits
                    .iter()
                    .map(|call| call.lease_suffix.is_some());
                for (view, _) in grant.views.iter_mut().zip(regional).filter(|(_, r)| *r) {
                    view.regional = Some(Regional {
                        why: if view.allowed {
                            Why::Floor
                        } else {
                            Why::HomeUnreachable
                        },
                        lease_units: 0,
                    });
                }
            }
            Ok(grant)
        })
    }

    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.enter().await?;
            let calls = local_calls(&request.limits, request.holder);
            let now_us = self.now_us();
            let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
            limits
                .refund(&calls, request.units, now_us)
                .map_err(server_error)
        })
    }

    fn peek<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(async move {
            // One RL.PEEK per limit: several need no RL.MULTI.
            self.enter().await?;
            let calls = local_calls(&request.limits, request.holder);
            let now_us = self.now_us();
            let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
            limits
                .peek(&calls, request.units, now_us)
                .map_err(server_error)
        })
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn slot(&self, key: &str) -> Option<u16> {
        self.cluster
            .then(|| redis_ratelimit_wire::slot::key_slot(key.as_bytes()))
    }

    fn write_hashes<'a>(
        &'a self,
        hashes: &'a [HashWrite],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let now_ms = self.hashes_now_ms()?;
            let mut kept = self.hashes.lock().unwrap_or_else(PoisonError::into_inner);
            // Expired hashes go as Redis would drop them: every write looks.
            kept.retain(|_, (_, expires_ms)| *expires_ms > now_ms);
            for hash in hashes {
                let (fields, expires_ms) = kept.entry(hash.key.clone()).or_default();
                fields.extend(hash.fields.iter().cloned());
                *expires_ms = hash.expire_at_ms;
            }
            Ok(())
        })
    }

    fn read_hashes<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<HashFields>, StoreError>> {
        Box::pin(async move {
            let now_ms = self.hashes_now_ms()?;
            let kept = self.hashes.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(keys
                .iter()
                .map(|key| match kept.get(key) {
                    Some((fields, expires_ms)) if *expires_ms > now_ms => {
                        fields.iter().map(|(f, v)| (f.clone(), v.clone())).collect()
                    }
                    _ => Vec::new(),
                })
                .collect())
        })
    }
}
