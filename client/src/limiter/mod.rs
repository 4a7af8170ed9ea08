//! The limiter: turns a check (policy, inputs, cost) into a [`Decision`], through the deny
//! cache, the lease, the store (grouped by slot, with refunds keeping all-or-nothing across
//! groups) and, when the store is out of reach, the policy's fallback.

mod answers;
mod decide;
mod fallback;
mod give_back;
mod groups;
mod jobs;
mod leased;
mod state;
mod store_policies;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use self::decide::store_decision;
use self::fallback::LocalFallback;
use self::groups::Groups;
use self::state::{Acquired, PolicyState, Registered, Target};
use self::store_policies::StoreBacked;
use crate::breaker::{Breaker, BreakerConfig, Permit};
use crate::clock::{Clock, LimiterClock, MonotonicClock};
use crate::decision::{Decision, Source};
pub use crate::error::{BuildError, CheckError};
use crate::in_flight::InFlight;
use crate::job::Profile;
use crate::key::{Inputs, MissingInput};
use crate::metrics;
use crate::policy::Policy;
use crate::policy_source::PolicySource;
use crate::replicas::Replicas;
use crate::store::{Store, StoreError};
use crate::top::recorder::Recorder;
use crate::top::{self, TopDenied, TopError, TopKeys, TopQuery};

/// What a limiter is made of: the policies and profiles with their memory, the store calls
/// (and the breaker watching them), the local fallback, the store-backed policies' source,
/// and the clock; each part owns its state.
struct Inner {
    policies: HashMap<Arc<str>, Registered>,
    /// Job profiles: their settings and memory (their limits come with each job).
    profiles: HashMap<Arc<str>, PolicyState>,
    /// The store, and the breaker that watches it.
    groups: Groups,
    /// Decisions in process when the store cannot decide.
    fallback: LocalFallback,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Every reading of the time (store calls' timeouts aside).
    clock: LimiterClock,
    /// The store-backed policies, their source and resolved states.
    store_backed: Option<Box<dyn StoreBacked>>,
    /// Give-backs completed so far ([`RateLimiter::give_back`]): a store denial answered
    /// while one ran may predate its refund, so it is not remembered.
    given_back: AtomicU64,
    /// The denials counted for the fleet's top keys, when enabled.
    top: Option<Arc<Recorder>>,
    /// The task reporting them.
    reporter: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
        let reporter = self
            .reporter
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = reporter.take() {
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
            .field("replicas", &self.inner.fallback.replicas)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RateLimiter`].
pub struct RateLimiterBuilder {
    store: Arc<dyn Store>,
    policies: Vec<Policy>,
    profiles: Vec<Profile>,
    replicas: Replicas,
    breaker: BreakerConfig,
    policy_source: Option<store_policies::Pending>,
    clock: Arc<dyn Clock>,
    max_tracked_keys: usize,
    top_keys: Option<TopKeys>,
    near_limit_share: f64,
}

impl RateLimiterBuilder {
    /// Counts every denial for the fleet's top denied keys and reports them to the store
    /// ([`top`](crate::top); a Redis store): read them with
    /// [`RateLimiter::top_denied`]. Inside a Tokio runtime, this starts the reporting task
    /// (at most one write per [`TopKeys::report_every`]); without one, report with
    /// [`RateLimiter::report_top`].
    #[must_use]
    pub fn top_keys(mut self, options: TopKeys) -> Self {
        self.top_keys = Some(options);
        self
    }

    /// The share of a limit's quota under which an admitted check counts as near the limit
    /// (`ratelimit_near_limit_total`; default 0.2, the reference's `NEAR_LIMIT_RATIO` of 0.8
    /// seen from the other side), clamped to 0..=1.
    #[must_use]
    pub fn near_limit_share(mut self, share_left: f64) -> Self {
        self.near_limit_share = share_left;
        self
    }

    /// The most key sets each of the limiter's per-key tables keeps (default
    /// [`DEFAULT_MAX_KEYS`](crate::expiring::DEFAULT_MAX_KEYS), 100,000; at least 1): per
    /// policy or job profile, the store's last answers (what the fallback continues from),
    /// the deny cache and the leases; and the local fallback's states. A new key set at the
    /// bound drops the table's expired entries, or else the one answered longest ago. A key
    /// set forgotten so has no last answer: its fallback starts from a fresh share (and what
    /// it owed the store from an earlier fallback is forgotten); a forgotten lease's unspent
    /// units are never refunded (under-admission).
    #[must_use]
    pub fn max_tracked_keys(mut self, max_keys: usize) -> Self {
        self.max_tracked_keys = max_keys.max(1);
        self
    }

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

    /// Adds a job profile: the settings [`RateLimiter::check_job`] uses for jobs naming it.
    #[must_use]
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profiles.push(profile);
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

    /// The clock the limiter reads (default [`MonotonicClock`]; a
    /// [`FakeClock`](crate::clock::FakeClock) in tests that move time by hand).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Where the store-backed policies ([`Policy::from_store`]) take their limits from.
    #[must_use]
    pub fn policy_source(mut self, source: impl PolicySource) -> Self {
        self.policy_source = Some(store_policies::pending(source));
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
            policies.insert(name, Registered::new(policy, self.max_tracked_keys));
        }
        let mut profiles = HashMap::new();
        for profile in self.profiles {
            let state = PolicyState::of_profile(&profile, self.max_tracked_keys);
            if profiles.insert(Arc::clone(&profile.name), state).is_some() {
                return Err(BuildError::DuplicatePolicy(profile.name.to_string()));
            }
        }
        let sweep_every = policies
            .values()
            .map(|registered| &registered.state)
            .chain(profiles.values())
            .filter_map(|state| state.settings.lease)
            .map(|lease| lease.lifetime.checked_div(2).unwrap_or(lease.lifetime))
            .min();
        let store_backed =
            store_policies::attach(self.policy_source, &policies, self.max_tracked_keys)?;
        metrics::describe();
        metrics::circuit(false);
        let clock = LimiterClock::new(self.clock);
        let limiter = RateLimiter {
            inner: Arc::new(Inner {
                policies,
                profiles,
                groups: Groups::new(
                    Arc::clone(&self.store),
                    Breaker::new(self.breaker),
                    clock.clone(),
                    self.near_limit_share,
                ),
                fallback: LocalFallback::new(self.replicas, clock.clone(), self.max_tracked_keys),
                sweeper: Mutex::new(None),
                clock,
                store_backed,
                given_back: AtomicU64::new(0),
                top: self
                    .top_keys
                    .map(|options| Arc::new(Recorder::new(options))),
                reporter: Mutex::new(None),
            }),
        };
        if let (Some(recorder), Ok(runtime)) =
            (&limiter.inner.top, tokio::runtime::Handle::try_current())
        {
            let task = top::run(
                Arc::downgrade(recorder),
                Arc::clone(&self.store),
                limiter.inner.clock.clone(),
            );
            *limiter
                .inner
                .reporter
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(runtime.spawn(task));
        }
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

/// A check's policy state and keys: the registered policy's, or for a store-backed policy
/// the state of the tenant's limits in the snapshot the check resolved.
struct Rendered<'a> {
    registered: &'a Registered,
    resolved: Option<Arc<Registered>>,
    keys: Vec<String>,
}

impl Rendered<'_> {
    fn state(&self) -> &PolicyState {
        &self.resolved.as_deref().unwrap_or(self.registered).state
    }
}

/// The `limit` of a denial no limit was consulted for.
static NO_LIMIT: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from(metrics::NO_LIMIT));

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
            profiles: Vec::new(),
            replicas: Replicas::default(),
            breaker: BreakerConfig::default(),
            policy_source: None,
            clock: Arc::new(MonotonicClock),
            max_tracked_keys: crate::expiring::DEFAULT_MAX_KEYS,
            top_keys: None,
            near_limit_share: metrics::DEFAULT_NEAR_LIMIT_SHARE,
        }
    }

    /// The policy source the store-backed policies read, if it is an `S`.
    pub fn policy_source<S: PolicySource>(&self) -> Option<&S> {
        self.inner
            .store_backed
            .as_ref()
            .and_then(|store_backed| store_backed.source().downcast_ref())
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.inner
            .policies
            .get(name)
            .map(|registered| &registered.policy)
    }

    /// Checks a request of cost 1 against policy `policy`.
    pub async fn check(&self, policy: &str, inputs: &Inputs) -> Result<Decision, CheckError> {
        self.check_cost(policy, inputs, 1).await
    }

    /// Checks without a store call that `policy` exists and `inputs` give every input its
    /// key templates need: call it at start-up with the inputs `classify` gives (any
    /// values), so a missing input is found then, not as a `500` at request time.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter};
    /// # use redis_ratelimit_client::store::MemoryStore;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let policy = Policy::builder("api")
    ///     .limit(Limit::new("per-key", Algorithm::token_bucket(10, Duration::from_secs(1))?, "rl:{tenant}:{key}")?)
    ///     .build()?;
    /// let limiter = RateLimiter::builder(MemoryStore::new()).policy(policy).build()?;
    /// assert!(limiter.validate("api", &Inputs::new().with("key", "k")).is_err()); // no tenant
    /// limiter.validate("api", &Inputs::new().with("key", "k").with("tenant", "t"))?;
    /// # Ok(()) }
    /// ```
    pub fn validate(&self, policy: &str, inputs: &Inputs) -> Result<(), CheckError> {
        self.render(policy, inputs).map(|_| ())
    }

    /// The policy's state for `inputs` and its keys rendered from them.
    fn render(&self, policy: &str, inputs: &Inputs) -> Result<Rendered<'_>, CheckError> {
        let registered = self
            .inner
            .policies
            .get(policy)
            .ok_or_else(|| CheckError::UnknownPolicy(policy.to_string()))?;
        // A store-backed policy runs against the tenant's limits now.
        let resolved = match &self.inner.store_backed {
            Some(store_backed) if registered.policy.store_tenant().is_some() => {
                store_backed.resolve(registered, inputs)?
            }
            _ => None,
        };
        let state = resolved.as_deref().unwrap_or(registered);
        let keys = state
            .policy
            .limits()
            .iter()
            .map(|limit| limit.key().render(inputs))
            .collect::<Result<Vec<String>, MissingInput>>()
            .map_err(CheckError::MissingInput)?;
        Ok(Rendered {
            registered,
            resolved,
            keys,
        })
    }

    /// Checks a request of `cost` units (at least 1; 0 is refused) against policy `policy`:
    /// admitted only if every limit of the policy admits it, and then charged to every
    /// limit.
    pub async fn check_cost(
        &self,
        policy: &str,
        inputs: &Inputs,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        if cost == 0 {
            return Err(CheckError::ZeroCost);
        }
        let rendered = self.render(policy, inputs)?;
        let id = rendered.keys.join("\u{0}");
        self.decide(rendered.state(), &rendered.keys, &id, cost)
            .await
    }

    /// A check of `cost` against `state`'s limits on `keys` (their joined form `id`): the
    /// deny cache, the lease, the store, the fallback; the in-flight slots it takes.
    /// A request the store refuses as invalid (an argument out of its range) is the
    /// caller's error, never a fallback decision.
    async fn decide(
        &self,
        state: &PolicyState,
        keys: &[String],
        id: &str,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let holder = state.holds_slots().then(InFlight::new_holder);
        let target = Target {
            state,
            keys,
            id,
            holder: holder.as_deref(),
        };
        let now = self.inner.clock.now();
        let given_back = self.inner.given_back.load(Ordering::SeqCst);
        // Probes are read from the store at every check: nothing to remember or lease.
        // A regional limit's lease may arrive at any moment: its denials are not remembered.
        let remembers = state.settings.deny_cache && !state.has_probes() && !state.has_regional();
        let cached = if remembers {
            state.memory.deny.get(id, cost, now)
        } else {
            None
        };
        let decision = match cached {
            Some(decision) => decision,
            None => {
                // Not a job holding in-flight slots or reading probes (a policy with an
                // in-flight limit has no lease: it is refused when built).
                let leasable = state.settings.lease.filter(|lease| {
                    cost <= lease.units
                        && !state.has_probes()
                        && holder.is_none()
                        && self.inner.groups.store.capabilities().partial
                });
                let mut decision = match leasable {
                    Some(_) => self.check_leased(target, cost).await?,
                    None => self.check_store(target, cost).await?,
                };
                // An in-flight limit's wait is only an upper bound (a release may come any
                // time), so its denials are not remembered.
                let bound_by_slots = decision
                    .binding_limit()
                    .is_some_and(|limit| limit.in_flight);
                if remembers && !decision.allowed && decision.source.is_store() && !bound_by_slots {
                    state.memory.deny.insert(id, cost, &decision, now);
                    // A give-back that ran meanwhile may have found nothing to forget yet:
                    // this denial may be older than its refund.
                    if self.inner.given_back.load(Ordering::SeqCst) != given_back {
                        state.memory.deny.forget(id);
                    }
                }
                if let Some(holder) = holder.filter(|_| decision.allowed) {
                    // Slots are held only where limits were consulted (not by a blanket
                    // fallback that admits everything).
                    let held = decision
                        .limits
                        .iter()
                        .zip(&state.limits.limits)
                        .any(|(limit, checked)| limit.in_flight && !checked.probe);
                    decision.in_flight = held.then(|| InFlight {
                        policy: state
                            .profile
                            .as_ref()
                            .map_or_else(|| Arc::clone(&state.name), Arc::clone),
                        holder,
                        keys: keys.to_vec(),
                        local: decision.source == Source::Fallback,
                        limits: state.profile.as_ref().map(|_| Arc::clone(&state.limits)),
                    });
                }
                decision
            }
        };
        self.inner
            .groups
            .metrics
            .decision(&decision, &state.limits, cost, state.settings.fallback);
        if let (false, Some(recorder)) = (decision.allowed, &self.inner.top) {
            self.count_denial(recorder, &decision, keys);
        }
        Ok(decision)
    }

    /// Counts a denial for the fleet's top keys: under its binding limit and that limit's
    /// key (`_none` and the first key when no limit was consulted).
    fn count_denial(&self, recorder: &Recorder, decision: &Decision, keys: &[String]) {
        let (limit, key) = match decision.binding_limit() {
            Some(binding) => (&binding.name, keys.get(decision.binding)),
            None => (&*NO_LIMIT, keys.first()),
        };
        if let Some(key) = key {
            let now = top::unix_s(&self.inner.clock);
            recorder.denied(&decision.policy, limit, key, now);
        }
    }

    /// The fleet's most denied keys `query` asks for, read from the store (every replica's
    /// reports, in every client language: [`top`](crate::top)).
    pub async fn top_denied(&self, query: &TopQuery) -> Result<Vec<TopDenied>, TopError> {
        let now = top::unix_s(&self.inner.clock);
        top::read(&*self.inner.groups.store, query, now).await
    }

    /// Writes this replica's changed top-keys summaries now (the reporting task does every
    /// second): at shutdown, or without a Tokio runtime. Nothing when top keys are off.
    pub async fn report_top(&self) -> Result<(), StoreError> {
        match &self.inner.top {
            Some(recorder) => {
                let now = top::unix_s(&self.inner.clock);
                top::report_once(recorder, &*self.inner.groups.store, now).await
            }
            None => Ok(()),
        }
    }

    /// The fallback's decision after a store call failed with `error`; the caller's error
    /// when the store refused the request as invalid.
    fn after_error(
        &self,
        target: Target<'_>,
        cost: u64,
        error: StoreError,
    ) -> Result<Decision, CheckError> {
        if let StoreError::Invalid(why) = error {
            self.inner
                .groups
                .metrics
                .store_error(&target.state.name, "invalid");
            return Err(CheckError::Refused(why));
        }
        let wait = self.inner.groups.breaker.open_for();
        Ok(self.inner.fallback.decide(target, cost, Some(error), wait))
    }

    /// Gives back the in-flight slots an admitted request held, when it ends. (A slot not
    /// released frees itself after its limit's ttl.)
    pub async fn release(&self, in_flight: &InFlight) {
        let registered = match &in_flight.limits {
            // A job's: its profile's settings and memory, the job's limits.
            Some(limits) => self
                .inner
                .profiles
                .get(&*in_flight.policy)
                .map(|profile| profile.with_limits(Arc::clone(limits))),
            None => self
                .inner
                .policies
                .get(&*in_flight.policy)
                .map(|registered| registered.state.clone()),
        };
        let Some(state) = registered else {
            return;
        };
        let id = in_flight.keys.join("\u{0}");
        let target = Target {
            state: &state,
            keys: &in_flight.keys,
            id: &id,
            holder: Some(&in_flight.holder),
        };
        if in_flight.local {
            self.inner.fallback.release_local(target);
            return;
        }
        self.inner
            .groups
            .refund_plan(target, 1, |index| state.in_flight(index))
            .await;
    }

    /// A check without leases: every group in turn, refunding earlier groups if a later one
    /// denies or fails.
    async fn check_store(&self, target: Target<'_>, cost: u64) -> Result<Decision, CheckError> {
        if let Permit::Skip(open_for) = self.inner.groups.breaker.permit(self.inner.clock.now()) {
            return Ok(self.inner.fallback.decide(target, cost, None, open_for));
        }
        if let Err(error) = self.inner.fallback.settle(&self.inner.groups, target).await {
            return self.after_error(target, cost, error);
        }
        // Probes are read first: if the store is out of reach, nothing has been taken
        // when the fallback decides.
        let (probes, probed_on) = match self.inner.groups.read_probes(target).await {
            Ok(read) => read,
            Err(error) => return self.after_error(target, cost, error),
        };
        let groups = self.inner.groups.plan(target.state, target.keys);
        let acquired = match (groups.is_empty(), probed_on) {
            // Only probes: admitted, nothing to take.
            (true, Some(backend)) => Ok(Acquired {
                granted: cost,
                views: Vec::new(),
                binding: 0,
                backend,
            }),
            _ => {
                self.inner
                    .groups
                    .acquire(target, &groups, cost, None, "acquire")
                    .await
            }
        };
        match acquired {
            Ok(mut acquired) => {
                acquired.views.extend(probes);
                acquired.views.sort_by_key(|(index, _)| *index);
                self.inner.fallback.remember(target, &acquired, cost);
                Ok(store_decision(target.state, &acquired))
            }
            Err(error) => self.after_error(target, cost, error),
        }
    }

    /// Refunds every outstanding lease now (expired or not). Call it when a replica shuts
    /// down, so its unspent units go back to the fleet at once.
    pub async fn release_leases(&self) {
        self.sweep_once(true).await;
    }

    /// Whether the circuit breaker currently holds store calls back.
    pub fn store_unreachable(&self) -> bool {
        self.inner.groups.breaker.is_open()
    }

    async fn sweep_once(&self, all: bool) {
        let now = self.inner.clock.now();
        // The store-backed policies' resolved states too; and the job profiles.
        let resolved = self
            .inner
            .store_backed
            .as_ref()
            .map(|store_backed| store_backed.states())
            .unwrap_or_default();
        let states = self
            .inner
            .policies
            .values()
            .chain(resolved.iter().map(|registered| &**registered))
            .map(|registered| &registered.state)
            .chain(self.inner.profiles.values());
        for state in states {
            state.memory.deny.purge(now);
            for expired in state.memory.leases.take_expired(now, all) {
                let claimed = state.with_limits(expired.limits);
                self.refund_lease(&claimed, &expired.keys, expired.units)
                    .await;
            }
        }
    }
}
