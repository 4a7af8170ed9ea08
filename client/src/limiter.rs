//! The limiter: turns a check (policy, inputs, cost) into a [`Decision`], through the deny
//! cache, the lease, the store (grouped by slot, with refunds keeping all-or-nothing across
//! groups) and, when the store is out of reach, the policy's fallback.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::algorithm::Shape;
use crate::breaker::{Breaker, BreakerConfig, Permit};
use crate::clock;
use crate::decision::{Decision, LimitStatus, Outcome, Source};
use crate::deny_cache::DenyCache;
use crate::key::{Inputs, MissingInput};
use crate::lease::{LeaseSlot, Leases};
use crate::local::{LocalCall, LocalLimits};
use crate::metrics;
use crate::policy::{Fallback, Policy};
use crate::replicas::Replicas;
use crate::store::{Acquire, Grant, LimitCall, Refund, Store, StoreError, View};
use redis_ratelimit_core::decision::Decision as CoreDecision;
use redis_ratelimit_core::multi;

/// Why a check could not be made (a mistake of the caller, not of the store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// No policy of that name was registered.
    UnknownPolicy(String),
    /// A key template needs an input the check did not give.
    MissingInput(MissingInput),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownPolicy(name) => write!(f, "no policy is named '{name}'"),
            Self::MissingInput(missing) => missing.fmt(f),
        }
    }
}

impl std::error::Error for CheckError {}

/// Why a limiter could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// Two policies with one name.
    DuplicatePolicy(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicatePolicy(name) => write!(f, "two policies are named '{name}'"),
        }
    }
}

impl std::error::Error for BuildError {}

/// A policy with what the limiter keeps for it.
struct PolicyState {
    policy: Policy,
    name: Arc<str>,
    shapes: Vec<Shape>,
    /// Limit indices, most specific key first (the order groups are called in).
    order: Vec<usize>,
    deny: DenyCache,
    leases: Leases,
}

impl PolicyState {
    fn new(policy: Policy) -> Self {
        let shapes = policy
            .limits()
            .iter()
            // Limits are validated when built, so the shape always exists.
            .filter_map(|limit| limit.algorithm().shape().ok())
            .collect();
        let mut order: Vec<usize> = (0..policy.limits().len()).collect();
        // Stable: among equally specific limits, declaration order.
        order.sort_by_key(|index| {
            std::cmp::Reverse(
                policy
                    .limits()
                    .get(*index)
                    .map_or(0, |limit| limit.key().specificity()),
            )
        });
        Self {
            name: policy.shared_name(),
            policy,
            shapes,
            order,
            deny: DenyCache::default(),
            leases: Leases::default(),
        }
    }

    fn call<'a>(&'a self, keys: &'a [String], index: usize) -> Option<LimitCall<'a>> {
        let limit = self.policy.limits().get(index)?;
        Some(LimitCall {
            key: keys.get(index)?,
            algorithm: limit.algorithm(),
            weight: limit.weight_units(),
            max_wait: limit.paced(),
        })
    }

    /// Units limit `index` is charged per unit of cost.
    fn weight(&self, index: usize) -> u64 {
        self.policy
            .limits()
            .get(index)
            .map_or(1, |limit| limit.weight_units())
    }

    fn status(&self, index: usize, view: &View) -> Option<LimitStatus> {
        let limit = self.policy.limits().get(index)?;
        let shape = *self.shapes.get(index)?;
        Some(LimitStatus::from_view(limit.shared_name(), shape, view))
    }
}

/// Units taken from the store for one check, before it becomes a decision.
struct Acquired {
    granted: u64,
    /// Each consulted limit's view, by policy index.
    views: Vec<(usize, View)>,
    /// Policy index of the binding limit.
    binding: usize,
}

struct Inner {
    store: Arc<dyn Store>,
    policies: HashMap<Arc<str>, PolicyState>,
    replicas: Replicas,
    breaker: Breaker,
    /// The local fallback's limiter states (shares of the quota).
    local: Mutex<LocalLimits>,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let sweeper = self
            .sweeper
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = sweeper.take() {
            handle.abort();
        }
    }
}

/// Checks requests against policies. Cheap to clone (clones share everything).
///
/// ```
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter};
/// use redis_ratelimit_client::store::MemoryStore;
///
/// let policy = Policy::builder("api")
///     .limit(Limit::new("per-key", Algorithm::token_bucket(2, Duration::from_secs(60))?, "k:{key}")?)
///     .build()?;
/// let limiter = RateLimiter::builder(MemoryStore::new()).policy(policy).build()?;
/// let inputs = Inputs::new().with("key", "alice");
/// assert!(limiter.check("api", &inputs).await?.allowed);
/// assert!(limiter.check("api", &inputs).await?.allowed);
/// assert!(!limiter.check("api", &inputs).await?.allowed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.inner.policies.keys().map(|name| &**name).collect();
        names.sort_unstable();
        f.debug_struct("RateLimiter")
            .field("policies", &names)
            .field("replicas", &self.inner.replicas)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RateLimiter`].
pub struct RateLimiterBuilder {
    store: Arc<dyn Store>,
    policies: Vec<Policy>,
    replicas: Replicas,
    breaker: BreakerConfig,
}

impl RateLimiterBuilder {
    /// Adds a policy.
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Adds policies (e.g. read from a [config file](crate::config)).
    #[must_use]
    pub fn policies(mut self, policies: impl IntoIterator<Item = Policy>) -> Self {
        self.policies.extend(policies);
        self
    }

    /// The replica count the local fallback divides quotas by (default 1).
    #[must_use]
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = replicas;
        self
    }

    /// The circuit breaker's settings.
    #[must_use]
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// Builds the limiter. Inside a Tokio runtime, this also starts the task that refunds
    /// expired leases; without one, expired leases are refunded when next touched.
    pub fn build(self) -> Result<RateLimiter, BuildError> {
        let mut policies = HashMap::new();
        for policy in self.policies {
            let name = policy.shared_name();
            if policies.contains_key(&name) {
                return Err(BuildError::DuplicatePolicy(name.to_string()));
            }
            policies.insert(name, PolicyState::new(policy));
        }
        let sweep_every = policies
            .values()
            .filter_map(|state| state.policy.lease())
            .map(|lease| lease.lifetime.checked_div(2).unwrap_or(lease.lifetime))
            .min();
        metrics::describe();
        metrics::circuit(false);
        let limiter = RateLimiter {
            inner: Arc::new(Inner {
                store: self.store,
                policies,
                replicas: self.replicas,
                breaker: Breaker::new(self.breaker),
                local: Mutex::new(LocalLimits::lenient()),
                sweeper: Mutex::new(None),
            }),
        };
        if let (Some(every), Ok(runtime)) = (sweep_every, tokio::runtime::Handle::try_current()) {
            let weak = Arc::downgrade(&limiter.inner);
            let handle = runtime.spawn(sweep(weak, every.max(Duration::from_millis(10))));
            *limiter
                .inner
                .sweeper
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(handle);
        }
        Ok(limiter)
    }
}

/// Refunds expired leases and forgets expired denials, until the limiter is dropped.
async fn sweep(inner: Weak<Inner>, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        RateLimiter { inner }.sweep_once(false).await;
    }
}

impl RateLimiter {
    /// Starts a limiter on `store` (a [`RedisStore`](crate::store::RedisStore), or a
    /// [`MemoryStore`](crate::store::MemoryStore) in tests).
    pub fn builder(store: impl Store) -> RateLimiterBuilder {
        Self::builder_shared(Arc::new(store))
    }

    /// Starts a limiter on a store shared with other code.
    pub fn builder_shared(store: Arc<dyn Store>) -> RateLimiterBuilder {
        RateLimiterBuilder {
            store,
            policies: Vec::new(),
            replicas: Replicas::default(),
            breaker: BreakerConfig::default(),
        }
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.inner.policies.get(name).map(|state| &state.policy)
    }

    /// Checks a request of cost 1 against policy `policy`.
    pub async fn check(&self, policy: &str, inputs: &Inputs) -> Result<Decision, CheckError> {
        self.check_cost(policy, inputs, 1).await
    }

    /// Checks a request of `cost` units (at least 1) against policy `policy`: admitted only
    /// if every limit of the policy admits it, and then charged to every limit.
    pub async fn check_cost(
        &self,
        policy: &str,
        inputs: &Inputs,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let state = self
            .inner
            .policies
            .get(policy)
            .ok_or_else(|| CheckError::UnknownPolicy(policy.to_string()))?;
        let keys = state
            .policy
            .limits()
            .iter()
            .map(|limit| limit.key().render(inputs))
            .collect::<Result<Vec<String>, MissingInput>>()
            .map_err(CheckError::MissingInput)?;
        let cost = cost.max(1);
        let id = keys.join("\u{0}");
        let now = Instant::now();
        let cached = if state.policy.deny_cache() {
            state.deny.get(&id, cost, now)
        } else {
            None
        };
        let decision = match cached {
            Some(decision) => decision,
            None => {
                let leasable = state
                    .policy
                    .lease()
                    .filter(|lease| cost <= lease.units && self.inner.store.capabilities().partial);
                let decision = match leasable {
                    Some(_) => self.check_leased(state, &keys, &id, cost).await,
                    None => self.check_store(state, &keys, cost).await,
                };
                if state.policy.deny_cache()
                    && !decision.allowed
                    && decision.source == Source::Store
                {
                    state.deny.insert(&id, cost, &decision, now);
                }
                decision
            }
        };
        metrics::decision(&decision);
        Ok(decision)
    }

    /// Refunds every outstanding lease now (expired or not). Call it when a replica shuts
    /// down, so its unspent units go back to the fleet at once.
    pub async fn release_leases(&self) {
        self.sweep_once(true).await;
    }

    /// Whether the circuit breaker currently holds store calls back.
    pub fn store_unreachable(&self) -> bool {
        self.inner.breaker.is_open()
    }

    async fn sweep_once(&self, all: bool) {
        let now = Instant::now();
        for state in self.inner.policies.values() {
            state.deny.purge(now);
            for (keys, units) in state.leases.take_expired(now, all) {
                self.refund_lease(state, &keys, units).await;
            }
        }
    }

    async fn refund_lease(&self, state: &PolicyState, keys: &[String], units: u64) {
        let groups = self.plan(state, keys);
        let refunds: Vec<(Vec<usize>, u64)> =
            groups.into_iter().map(|group| (group, units)).collect();
        if self.refund_groups(state, keys, &refunds).await {
            metrics::lease_refunded(&state.name, units);
        }
    }

    /// The store calls a check makes: the limits grouped by slot (one group when the store
    /// is not a cluster), most specific group first; without `RL.MULTI`, one group per
    /// limit.
    fn plan(&self, state: &PolicyState, keys: &[String]) -> Vec<Vec<usize>> {
        let multi = self.inner.store.capabilities().multi;
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for &index in &state.order {
            let key = keys.get(index);
            let slot = key.and_then(|key| self.inner.store.slot(key));
            // Two templates can render one key ("{a}" and "{b}" with equal inputs): a key
            // takes one limit per call, so such limits go in separate groups.
            // A paced limit (MAXWAIT) is called on its own: RL.MULTI does not pace.
            let paced = |index: &usize| {
                state
                    .policy
                    .limits()
                    .get(*index)
                    .is_some_and(|limit| limit.paced().is_some())
            };
            let fits = |group: &Vec<usize>| {
                !paced(&index)
                    && !group.iter().any(paced)
                    && group.iter().all(|other| keys.get(*other) != key)
            };
            match groups
                .iter_mut()
                .find(|(s, group)| multi && *s == slot && fits(group))
            {
                Some((_, group)) => group.push(index),
                None => groups.push((slot, vec![index])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// A check without leases: every group in turn, refunding earlier groups if a later one
    /// denies or fails.
    async fn check_store(&self, state: &PolicyState, keys: &[String], cost: u64) -> Decision {
        if let Permit::Skip(open_for) = self.inner.breaker.permit(Instant::now()) {
            return self.fallback(state, keys, cost, None, open_for);
        }
        let groups = self.plan(state, keys);
        match self
            .acquire(state, keys, &groups, cost, None, "acquire")
            .await
        {
            Ok(acquired) => self.store_decision(state, &acquired),
            Err(error) => {
                let wait = self.inner.breaker.open_for();
                self.fallback(state, keys, cost, Some(error), wait)
            }
        }
    }

    /// A check with leases: spend leased units, or claim a new batch.
    async fn check_leased(
        &self,
        state: &PolicyState,
        keys: &[String],
        id: &str,
        cost: u64,
    ) -> Decision {
        let Some(lease) = state.policy.lease() else {
            return self.check_store(state, keys, cost).await;
        };
        let started = Instant::now();
        let slot = state.leases.slot(id, keys, started);
        // Waiting for another request's claim is bounded like a store call.
        let Ok(mut held) = tokio::time::timeout(state.policy.timeout(), slot.lock()).await else {
            let wait = self.inner.breaker.open_for();
            return self.fallback(state, keys, cost, Some(StoreError::Timeout), wait);
        };
        let now = Instant::now();
        if held.expires <= now && held.units > 0 {
            let units = std::mem::take(&mut held.units);
            let limiter = self.clone();
            let name = Arc::clone(&state.name);
            let keys = held.keys.clone();
            tokio::spawn(async move {
                if let Some(state) = limiter.inner.policies.get(&name) {
                    limiter.refund_lease(state, &keys, units).await;
                }
            });
        }
        if held.units >= cost {
            held.units = held.units.saturating_sub(cost);
            return self.lease_decision(state, &held);
        }
        if held.failed_at.is_some_and(|failed| failed >= started) {
            let wait = self.inner.breaker.open_for();
            return self.fallback(state, keys, cost, Some(StoreError::Timeout), wait);
        }
        if let Permit::Skip(open_for) = self.inner.breaker.permit(now) {
            return self.fallback(state, keys, cost, None, open_for);
        }
        let held_units = held.units;
        let want = lease.units.max(cost).saturating_sub(held_units);
        let min = cost.saturating_sub(held_units).max(1);
        let groups = self.plan(state, keys);
        match self
            .acquire(state, keys, &groups, want, Some(min), "claim")
            .await
        {
            Ok(acquired) if acquired.granted == 0 => self.store_decision(state, &acquired),
            Ok(acquired) => {
                metrics::lease_claimed(&state.name, acquired.granted);
                held.units = held_units
                    .saturating_add(acquired.granted)
                    .saturating_sub(cost);
                held.expires = now.checked_add(lease.lifetime).unwrap_or(now);
                held.views = acquired.views.clone();
                held.failed_at = None;
                let mut decision = self.store_decision(state, &acquired);
                adjust_remaining(&mut decision, state, held.units);
                decision
            }
            Err(error) => {
                held.failed_at = Some(Instant::now());
                let wait = self.inner.breaker.open_for();
                self.fallback(state, keys, cost, Some(error), wait)
            }
        }
    }

    fn lease_decision(&self, state: &PolicyState, lease: &LeaseSlot) -> Decision {
        let acquired = Acquired {
            granted: 1,
            views: lease.views.clone(),
            binding: binding_of(state, &lease.views, 1),
        };
        let mut decision = self.store_decision(state, &acquired);
        decision.source = Source::Lease;
        adjust_remaining(&mut decision, state, lease.units);
        decision
    }

    /// Takes `units` from every group in turn (with `partial_min`, as many as every group
    /// has, at least that). A group that grants fewer units than earlier ones lowers the
    /// grant, and the earlier groups are refunded the difference; a denial or a failure
    /// refunds them entirely.
    async fn acquire(
        &self,
        state: &PolicyState,
        keys: &[String],
        groups: &[Vec<usize>],
        units: u64,
        partial_min: Option<u64>,
        op: &'static str,
    ) -> Result<Acquired, StoreError> {
        let mut units = units.max(1);
        let mut charged: Vec<(Vec<usize>, u64)> = Vec::new();
        let mut views: Vec<(usize, View)> = Vec::new();
        for group in groups {
            let request = Acquire {
                limits: group
                    .iter()
                    .filter_map(|index| state.call(keys, *index))
                    .collect(),
                units,
                partial_min: partial_min.map(|min| min.min(units)),
            };
            let grant = match self.timed_acquire(state, &request, op).await {
                Ok(grant) => grant,
                Err(error) => {
                    self.refund_groups(state, keys, &charged).await;
                    return Err(error);
                }
            };
            let Grant {
                granted,
                binding,
                views: group_views,
            } = grant;
            views.extend(group.iter().copied().zip(group_views));
            if granted == 0 {
                // Each limit's view is of the call as if charged; nothing was, so the limits
                // that alone would have admitted still hold the units they showed taken.
                let evaluated = partial_min.map_or(units, |min| min.clamp(1, units));
                for (index, view) in views.iter_mut().filter(|(i, _)| group.contains(i)) {
                    if view.allowed {
                        let weight = state.weight(*index);
                        view.remaining = view
                            .remaining
                            .saturating_add(evaluated.saturating_mul(weight))
                            .min(view.limit);
                    }
                }
                let binding = group.get(binding).copied().unwrap_or(0);
                self.refund_all(state, keys, &charged, &mut views).await;
                return Ok(Acquired {
                    granted: 0,
                    views,
                    binding,
                });
            }
            if granted < units {
                // A later group granted less: give the earlier ones the difference back.
                let excess: Vec<(Vec<usize>, u64)> = charged
                    .iter()
                    .map(|(group, charged_units)| {
                        (group.clone(), charged_units.saturating_sub(granted))
                    })
                    .collect();
                self.refund_groups(state, keys, &excess).await;
                for (_, charged_units) in &mut charged {
                    *charged_units = granted;
                }
                units = granted;
            }
            charged.push((group.clone(), granted));
        }
        views.sort_by_key(|(index, _)| *index);
        let binding = binding_of(state, &views, units);
        Ok(Acquired {
            granted: units,
            views,
            binding,
        })
    }

    /// Refunds the groups charged so far after a denial, and shows it in their views.
    async fn refund_all(
        &self,
        state: &PolicyState,
        keys: &[String],
        charged: &[(Vec<usize>, u64)],
        views: &mut [(usize, View)],
    ) {
        if charged.is_empty() {
            return;
        }
        metrics::group_refunded(&state.name);
        if self.refund_groups(state, keys, charged).await {
            for (group, units) in charged {
                for (index, view) in views.iter_mut() {
                    if group.contains(index) {
                        let weight = state.weight(*index);
                        view.remaining = view
                            .remaining
                            .saturating_add(units.saturating_mul(weight))
                            .min(view.limit);
                    }
                }
            }
        }
        views.sort_by_key(|(index, _)| *index);
    }

    /// Gives units back to groups, concurrently. Returns whether every refund reached the
    /// store (a lost refund under-admits; it never over-admits).
    async fn refund_groups(
        &self,
        state: &PolicyState,
        keys: &[String],
        refunds: &[(Vec<usize>, u64)],
    ) -> bool {
        let requests: Vec<Refund<'_>> = refunds
            .iter()
            .filter(|(_, units)| *units > 0)
            .map(|(group, units)| Refund {
                limits: group
                    .iter()
                    .filter_map(|index| state.call(keys, *index))
                    .collect(),
                units: *units,
            })
            .collect();
        let mut ok = true;
        let timeout = state.policy.timeout();
        let calls = requests.iter().map(|request| async move {
            let started = Instant::now();
            let result = tokio::time::timeout(timeout, self.inner.store.refund(request))
                .await
                .unwrap_or(Err(StoreError::Timeout));
            metrics::store_latency(&state.name, "refund", started.elapsed());
            result
        });
        for result in join_all(calls).await {
            if let Err(error) = result {
                metrics::store_error(&state.name, error.kind());
                ok = false;
            }
        }
        ok
    }

    /// One store call, bounded by the policy's timeout, recorded in metrics and the
    /// breaker.
    async fn timed_acquire(
        &self,
        state: &PolicyState,
        request: &Acquire<'_>,
        op: &'static str,
    ) -> Result<Grant, StoreError> {
        let started = Instant::now();
        let result =
            tokio::time::timeout(state.policy.timeout(), self.inner.store.acquire(request))
                .await
                .unwrap_or(Err(StoreError::Timeout));
        metrics::store_latency(&state.name, op, started.elapsed());
        match &result {
            Ok(_) => {
                if self.inner.breaker.success() {
                    metrics::circuit(false);
                    // Back on the store: the local shares no longer apply.
                    self.inner
                        .local
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clear();
                }
            }
            Err(error) => {
                metrics::store_error(&state.name, error.kind());
                if error.is_unavailability() && self.inner.breaker.failure(Instant::now()) {
                    metrics::circuit(true);
                }
            }
        }
        result
    }

    fn store_decision(&self, state: &PolicyState, acquired: &Acquired) -> Decision {
        let allowed = acquired.granted > 0;
        let mut limits = Vec::with_capacity(acquired.views.len());
        let mut binding = 0;
        for (index, view) in &acquired.views {
            if *index == acquired.binding {
                binding = limits.len();
            }
            if let Some(status) = state.status(*index, view) {
                limits.push(status);
            }
        }
        decided(state, allowed, Source::Store, limits, binding)
    }

    /// The decision when the store cannot decide: `error` is why (`None`: the breaker is
    /// open), `wait` how long a denied client should wait before the store is tried again.
    fn fallback(
        &self,
        state: &PolicyState,
        keys: &[String],
        cost: u64,
        error: Option<StoreError>,
        wait: Duration,
    ) -> Decision {
        let refused = error
            .as_ref()
            .is_some_and(|error| !error.is_unavailability());
        let mut decision = match state.policy.fallback() {
            Fallback::Open => self.blanket(state, true, wait),
            Fallback::Closed => self.blanket(state, false, wait),
            Fallback::Local => self.local_decision(state, keys, cost, wait),
        };
        decision.outcome = match (refused, decision.allowed) {
            (true, _) => Outcome::Error,
            (false, true) => Outcome::FallbackAllowed,
            (false, false) => Outcome::FallbackDenied,
        };
        decision
    }

    fn blanket(&self, state: &PolicyState, allowed: bool, wait: Duration) -> Decision {
        Decision {
            allowed,
            wait: Duration::ZERO,
            source: Source::Fallback,
            outcome: Outcome::FallbackAllowed,
            policy: Arc::clone(&state.name),
            retry_after: Some(if allowed {
                Duration::ZERO
            } else {
                wait.max(Duration::from_secs(1))
            }),
            limits: Vec::new(),
            binding: 0,
        }
    }

    /// This replica's share of every limit, decided in process.
    fn local_decision(
        &self,
        state: &PolicyState,
        keys: &[String],
        cost: u64,
        wait: Duration,
    ) -> Decision {
        let replicas = self.inner.replicas.get();
        let shares: Option<Vec<LocalCall<'_>>> = state
            .policy
            .limits()
            .iter()
            .zip(&state.shapes)
            .zip(keys)
            .map(|((limit, shape), key)| {
                Some(LocalCall {
                    key,
                    shape: shape.share(replicas)?,
                    weight: limit.weight_units(),
                    max_wait_ns: limit
                        .paced()
                        .map(|wait| u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)),
                })
            })
            .collect();
        let Some(calls) = shares else {
            // Some limit's share is below one unit: this replica admits nothing alone.
            return self.blanket(state, false, wait);
        };
        let grant = self
            .inner
            .local
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .acquire(&calls, cost, None, clock::now_us());
        let Ok(grant) = grant else {
            return self.blanket(state, false, wait);
        };
        let limits: Vec<LimitStatus> = calls
            .iter()
            .zip(state.policy.limits())
            .zip(&grant.views)
            .map(|((call, limit), view)| {
                LimitStatus::from_view(limit.shared_name(), call.shape, view)
            })
            .collect();
        decided(
            state,
            grant.granted > 0,
            Source::Fallback,
            limits,
            grant.binding,
        )
    }
}

/// A decision from the limits consulted: the wait is the binding limit's. (The outcome of a
/// fallback decision is set by the caller, which knows why the store was not used.)
fn decided(
    state: &PolicyState,
    allowed: bool,
    source: Source,
    limits: Vec<LimitStatus>,
    binding: usize,
) -> Decision {
    let retry_after = if allowed {
        Some(Duration::ZERO)
    } else {
        limits.get(binding).and_then(|limit| limit.retry_after)
    };
    // An admitted paced limit says how long to wait before proceeding: the longest wins.
    let wait = limits
        .iter()
        .filter(|limit| allowed && limit.allowed)
        .filter_map(|limit| limit.retry_after)
        .max()
        .unwrap_or(Duration::ZERO);
    Decision {
        allowed,
        wait,
        source,
        outcome: if allowed {
            Outcome::Allowed
        } else {
            Outcome::Denied
        },
        policy: Arc::clone(&state.name),
        retry_after,
        limits,
        binding,
    }
}

/// The binding limit among the views of every group (policy indices), by the rule
/// `RL.MULTI` applies within a group ([`multi::bind`], from the core).
fn binding_of(state: &PolicyState, views: &[(usize, View)], units: u64) -> usize {
    let decisions: Vec<CoreDecision> = views.iter().map(|(_, view)| view.to_core()).collect();
    let costs: Vec<u64> = views
        .iter()
        .map(|(index, _)| units.saturating_mul(state.weight(*index)))
        .collect();
    let position = multi::bind(&decisions, &costs).map_or(0, |bound| bound.binding);
    views.get(position).map_or(0, |(index, _)| *index)
}

/// Adds the units this replica holds in its lease to what each limit reports as remaining:
/// they were taken from the store but are still available to this client.
fn adjust_remaining(decision: &mut Decision, state: &PolicyState, leased: u64) {
    for limit in &mut decision.limits {
        let weight = state
            .policy
            .limits()
            .iter()
            .find(|candidate| candidate.name() == &*limit.name)
            .map_or(1, |candidate| candidate.weight_units());
        limit.remaining = limit
            .remaining
            .saturating_add(leased.saturating_mul(weight))
            .min(limit.quota);
    }
}

/// Runs futures concurrently and collects their outputs in order (a few refunds at most:
/// no need for a crate).
async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|context| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(context) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
