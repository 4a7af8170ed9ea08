//! One client-library [`RateLimiter`] per *shape* of request: the same limits (algorithm,
//! parameters, hits) in the same order, whatever the descriptor values. The values are the
//! inputs of a check, so a few shapes serve every tenant; each limiter keeps its leases and
//! deny cache across requests, as a service built on the library would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis_ratelimit_client::store::Store;
use redis_ratelimit_client::{
    Algorithm, Fallback, FallbackStates, Lease, Limit, Policy, RateLimiter, Replicas,
};

/// How every limiter is built.
#[derive(Clone, Debug)]
pub struct LimiterSettings {
    /// What a check does when the store is out of reach.
    pub fallback: Fallback,
    /// The longest wait for one store call.
    pub timeout: Duration,
    /// Units claimed per store call, if leasing.
    pub lease: Option<u64>,
    /// The service's replica count (the local fallback enforces `quota / replicas`).
    pub replicas: u64,
}

/// One limit of a shape: its algorithm and the units a check charges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeLimit {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Units charged per unit of the check's cost.
    pub weight: u64,
}

/// The most shapes kept; past it the cache starts afresh (after giving leases back).
const MAX_SHAPES: usize = 4_096;

/// The limiters by shape.
pub struct Limiters {
    store: Arc<dyn Store>,
    settings: LimiterSettings,
    cache: Mutex<HashMap<String, RateLimiter>>,
    /// One local fallback for every shape: a key that requests of several shapes share
    /// (a per-key limit on every route, say) has one share of its quota, not one per shape.
    fallback: FallbackStates,
}

/// The input name of limit `index` (its whole Redis key).
pub fn input_name(index: usize) -> String {
    format!("k{index}")
}

/// The client-library name of limit `index` (statuses are mapped back by it).
pub fn limit_name(index: usize) -> String {
    format!("d{index}")
}

impl Limiters {
    /// An empty cache over `store`.
    pub fn new(store: Arc<dyn Store>, settings: LimiterSettings) -> Self {
        Self {
            store,
            settings,
            cache: Mutex::new(HashMap::new()),
            fallback: FallbackStates::default(),
        }
    }

    /// The store every limiter uses.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The limiter of a shape, built on first use. `policy` names it (the `policy` label of
    /// the library's metrics); `leasable` is false when a check must reach the store (a
    /// limit checked without being charged).
    pub fn get(
        &self,
        policy: &str,
        limits: &[ShapeLimit],
        leasable: bool,
    ) -> Result<RateLimiter, String> {
        let lease = self
            .settings
            .lease
            .filter(|_| leasable && !limits.iter().any(|limit| limit.algorithm.is_in_flight()));
        let mut signature = format!("{policy}|{lease:?}");
        for limit in limits {
            signature.push_str(&format!("|{:?}*{}", limit.algorithm, limit.weight));
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(limiter) = cache.get(&signature) {
            return Ok(limiter.clone());
        }
        let limiter = self.build(policy, limits, lease)?;
        if cache.len() >= MAX_SHAPES {
            let old: Vec<RateLimiter> = cache.drain().map(|(_, limiter)| limiter).collect();
            tokio::spawn(async move {
                for limiter in old {
                    limiter.release_leases().await;
                }
            });
        }
        cache.insert(signature, limiter.clone());
        Ok(limiter)
    }

    fn build(
        &self,
        policy: &str,
        limits: &[ShapeLimit],
        lease: Option<u64>,
    ) -> Result<RateLimiter, String> {
        let mut builder = Policy::builder(policy)
            .fallback(self.settings.fallback)
            .timeout(self.settings.timeout);
        for (index, limit) in limits.iter().enumerate() {
            let template = format!("{{{}}}", input_name(index));
            let limit = Limit::new(&limit_name(index), limit.algorithm.clone(), &template)
                .map_err(|error| error.to_string())?
                .weight(limit.weight);
            builder = builder.limit(limit);
        }
        if let Some(units) = lease {
            builder = builder.lease(Lease::new(units));
        }
        let policy = builder.build().map_err(|error| error.to_string())?;
        RateLimiter::builder_shared(Arc::clone(&self.store))
            .policy(policy)
            .replicas(Replicas::fixed(self.settings.replicas.max(1)))
            .fallback_states(self.fallback.clone())
            .build()
            .map_err(|error| error.to_string())
    }

    /// Gives every lease back (on shutdown and reload of the process).
    pub async fn release_leases(&self) {
        let limiters: Vec<RateLimiter> = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for limiter in limiters {
            limiter.release_leases().await;
        }
    }
}
