//! Policies: the named sets of limits a request is checked against, and what to do when the
//! store cannot be reached.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_core::kinds::Kind;

use crate::algorithm::Algorithm;
use crate::key::{KeyTemplate, TemplateError};

/// One limit of a policy: an algorithm applied to the key a template renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    name: Arc<str>,
    algorithm: Algorithm,
    key: KeyTemplate,
    weight: u64,
    max_wait: Option<Duration>,
    lease_suffix: Option<Arc<str>>,
    key_class: Option<Arc<str>>,
}

/// The `key_class` label of a limit whose policy names no class ([`Limit::key_class`]).
pub const DEFAULT_KEY_CLASS: &str = "default";

/// [`DEFAULT_KEY_CLASS`] shared, so a check does not allocate it.
static DEFAULT_CLASS: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from(DEFAULT_KEY_CLASS));

/// [`DEFAULT_KEY_CLASS`], shared.
pub(crate) fn default_class() -> Arc<str> {
    Arc::clone(&DEFAULT_CLASS)
}

/// The longest lease key suffix of a regional limit.
pub const MAX_LEASE_SUFFIX: usize = 64;

impl Limit {
    /// A limit named `name` (as the `RateLimit` header fields and metrics show it) applying
    /// `algorithm` to the keys `key` renders (see [`KeyTemplate`]).
    pub fn new(name: &str, algorithm: Algorithm, key: &str) -> Result<Self, PolicyError> {
        check_name(name)?;
        let key = KeyTemplate::parse(key).map_err(|error| PolicyError::Template {
            limit: name.to_string(),
            error,
        })?;
        Ok(Self {
            name: name.into(),
            algorithm,
            key,
            weight: 1,
            max_wait: None,
            lease_suffix: None,
            key_class: None,
        })
    }

    /// Names the class of the keys this limit renders (`ip`, `tenant`, a plan's name...):
    /// the `key_class` label of its metrics, which say what kind of key was limited, never
    /// which one. Unset, the policy's ([`PolicyBuilder::key_class`]), else
    /// [`DEFAULT_KEY_CLASS`]. The same characters as a name.
    pub fn key_class(mut self, class: &str) -> Result<Self, PolicyError> {
        check_name(class)?;
        self.key_class = Some(class.into());
        Ok(self)
    }

    /// The class of its keys, as its metrics label them.
    pub fn class(&self) -> &str {
        self.key_class.as_deref().unwrap_or(DEFAULT_KEY_CLASS)
    }

    pub(crate) fn shared_class(&self) -> Arc<str> {
        self.key_class
            .as_ref()
            .map_or_else(default_class, Arc::clone)
    }

    /// Makes this a **regional** limit (`docs/regions.md`): one global quota across regions,
    /// this limit's algorithm being the region's floor. Each check is decided by
    /// `RL.REGIONAL key lease_key ...` on the region's Redis (the module, or the Functions
    /// library's `rl_regional`): the floor first, then, when it denies, the units a lease
    /// agent leased from the home region into `lease_key`, the rendered key followed by
    /// `lease_suffix` (so on a Cluster, give the key a hash tag: both keys then share its
    /// slot). The decision says why ([`LimitStatus::regional`](crate::LimitStatus)), and the
    /// header fields show the floor's quota. Not an in-flight or paced limit; a policy has at
    /// most one regional limit, called after its other limits, and no lease of its own.
    pub fn regional(mut self, lease_suffix: &str) -> Result<Self, PolicyError> {
        let refuse = |reason: &str| PolicyError::Regional {
            limit: self.name.to_string(),
            reason: reason.to_string(),
        };
        if self.algorithm.is_in_flight() {
            return Err(refuse(
                "an in-flight limit cannot be a regional limit of a policy (the client library does not send RL.REGIONAL's in-flight form, CONCURRENCY limit holder ttl_ms)",
            ));
        }
        if self.max_wait.is_some() {
            return Err(refuse("a paced limit cannot be a regional floor"));
        }
        let printable = lease_suffix
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && byte != b'{' && byte != b'}');
        if lease_suffix.is_empty() || lease_suffix.len() > MAX_LEASE_SUFFIX || !printable {
            return Err(refuse(&format!(
                "the lease key suffix must be 1 to {MAX_LEASE_SUFFIX} printable ASCII \
                 characters without braces (it keeps the key's hash tag): got {lease_suffix:?}"
            )));
        }
        self.lease_suffix = Some(lease_suffix.into());
        Ok(self)
    }

    /// A regional limit's lease key suffix ([`Limit::regional`]).
    pub fn lease_suffix(&self) -> Option<&str> {
        self.lease_suffix.as_deref()
    }

    /// Paces this token bucket instead of refusing (the module's `MAXWAIT`): a request whose
    /// tokens will have refilled within `max_wait` (whole milliseconds, at most a day) is
    /// admitted now with a wait ([`Decision::wait`](crate::Decision::wait)) before it may
    /// proceed; callers that wait as told never exceed the rate. The HTTP layer waits
    /// before calling the service. Not with leases.
    pub fn max_wait(mut self, max_wait: Duration) -> Result<Self, PolicyError> {
        let refuse = |reason: &str| PolicyError::Pacing {
            limit: self.name.to_string(),
            reason: reason.to_string(),
        };
        if self.algorithm.kind() != Kind::TokenBucket {
            return Err(refuse("only token buckets can be paced"));
        }
        if self.lease_suffix.is_some() {
            return Err(refuse("a regional limit cannot be paced"));
        }
        if max_wait > MAX_WAIT || max_wait.subsec_nanos().checked_rem(1_000_000) != Some(0) {
            return Err(refuse("the wait is whole milliseconds, at most a day"));
        }
        self.max_wait = Some(max_wait);
        Ok(self)
    }

    /// Charges this limit `weight` units per unit of cost (default 1): a "1 request in 10 is
    /// expensive" limit next to a plain request count.
    #[must_use]
    pub fn weight(mut self, weight: u64) -> Self {
        self.weight = weight.max(1);
        self
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// The key template.
    pub fn key(&self) -> &KeyTemplate {
        &self.key
    }

    /// Units charged per unit of cost.
    pub fn weight_units(&self) -> u64 {
        self.weight
    }

    /// The longest wait a paced request may be given, if the limit is paced.
    pub fn paced(&self) -> Option<Duration> {
        self.max_wait
    }
}

/// What a check does when the store cannot be reached in time (timeout, connection error,
/// cluster down) or the circuit breaker is open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Admit everything: the service stays available, whatever it protects does not.
    Open,
    /// Deny everything: the protected resource is safe, the service is down with the store.
    Closed,
    /// Decide in process with the same algorithms, each replica enforcing
    /// `quota / replicas` (rounded down): the fleet stays within the quota as long as the
    /// replica count is right and traffic is spread evenly.
    #[default]
    Local,
}

impl Fallback {
    /// Its name (the `mode` label of `ratelimit_fallback_mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Local => "local",
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Leasing: claim a batch of units from the store and spend them from memory, so most
/// checks make no network call.
///
/// A claim takes `units`, or more for a hot key: one unit of cost per request waiting for
/// the claim, and twice the last claim when that was spent within a quarter of its lifetime;
/// never more than `max_units` (4 × `units` unless set). Requests that wait for a claim take
/// its result (spend from it, or are denied by it), so a hot key costs one store call per
/// claim, not one per request, and fewer claims the hotter it is.
///
/// **Bound.** Units are taken from the store when claimed, so the fleet never spends more
/// than the store granted. But a unit claimed at one instant may be spent up to `lifetime`
/// later, so over any interval the fleet can admit more than the limit allows over that
/// interval by at most the units outstanding in leases at its start: at most
/// `replicas × max_units` per key. For a quota that does not refill during the interval
/// (a long window), admitted ≤ quota always holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Units claimed per store call (`N`), at least 1. Larger: fewer calls, more
    /// over-admission.
    pub units: u64,
    /// The most units one claim takes when many requests wait for it (at least `units`).
    pub max_units: u64,
    /// How long claimed units may be spent; the unspent rest is then refunded.
    pub lifetime: Duration,
}

impl Lease {
    /// Leases of `units` units (up to 4 × `units` for a hot key), spendable for one second.
    /// Zero units is refused when the policy is built.
    pub fn new(units: u64) -> Self {
        Self {
            units,
            max_units: units.saturating_mul(4),
            lifetime: Duration::from_secs(1),
        }
    }

    /// The same leases with another lifetime.
    #[must_use]
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The same leases with another cap on one claim (`units` pins claims to `units`).
    #[must_use]
    pub fn max_units(mut self, max_units: u64) -> Self {
        self.max_units = max_units;
        self
    }

    /// Units to claim when `waiting` requests of `cost` wait for the claim besides the
    /// claimer, and the key's recent demand asks for `recent` (the last claim doubled when it
    /// was spent within a quarter of its lifetime): the larger of `units`, `recent` and one
    /// `cost` per request, at most `max_units`; always at least `cost`.
    pub(crate) fn claim_for(&self, cost: u64, waiting: u64, recent: u64) -> u64 {
        let demand = cost.saturating_mul(waiting.saturating_add(1));
        demand
            .max(recent)
            .min(self.max_units)
            .max(self.units)
            .max(cost)
    }
}

/// Longest pacing wait the module accepts (`MAXWAIT`): a day.
pub const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// Most limits in one policy: the most keys one `RL.MULTI` call takes.
pub const MAX_LIMITS: usize = 16;

/// Default store timeout: 50 ms, chosen from measurement. On a 2-vCPU machine shared with
/// builds, store round trips under 16 concurrent connections on loopback were p50 2-3 ms,
/// p99.7 10 ms and at most 25-50 ms (debug builds): a few ms would send healthy calls to
/// the fallback whenever the process is descheduled. It assumes a store on the same
/// network and a client process never starved longer than that; on a quiet machine, lower
/// it (5-10 ms) where a request's latency matters more than exactness during stalls.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// A named set of limits, checked together: a request is admitted only if every limit
/// admits it, and then every limit is charged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    name: Arc<str>,
    limits: Vec<Limit>,
    lease: Option<Lease>,
    fallback: Fallback,
    timeout: Duration,
    deny_cache: bool,
    /// The input naming the tenant whose limits come from the policy source.
    store_tenant: Option<Arc<str>>,
}

impl Policy {
    /// Starts a policy named `name`.
    pub fn builder(name: &str) -> PolicyBuilder {
        PolicyBuilder {
            name: name.to_string(),
            limits: Vec::new(),
            lease: None,
            fallback: Fallback::default(),
            timeout: DEFAULT_TIMEOUT,
            deny_cache: true,
            store_tenant: None,
            key_class: None,
        }
    }

    /// Starts a policy named `name` whose limits come from the limiter's
    /// [`PolicySource`](crate::PolicySource) (the `redis-ratelimit-plans` crate's policy
    /// store) for the tenant named by the check's input `tenant_input`. The limits added to
    /// the builder are the defaults: they apply to a tenant on no plan, and to everyone until
    /// the store has been read. The source derives the keys (the plans crate from the tenant
    /// and each limit's name and kind), so the defaults' key templates are not used.
    pub fn from_store(name: &str, tenant_input: &str) -> PolicyBuilder {
        let mut builder = Self::builder(name);
        builder.store_tenant = Some(tenant_input.into());
        builder
    }

    /// The input naming the tenant, for a policy whose limits come from the store.
    pub fn store_tenant(&self) -> Option<&str> {
        self.store_tenant.as_deref()
    }

    /// The policy's name (the `policy` label of its metrics).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// Its limits, in declaration order.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// The inputs its key templates need, each once, in order of first use.
    pub fn inputs(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.limits.iter().flat_map(|limit| limit.key().inputs()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// Its leases, if enabled.
    pub fn lease(&self) -> Option<Lease> {
        self.lease
    }

    /// What happens when the store is unreachable.
    pub fn fallback(&self) -> Fallback {
        self.fallback
    }

    /// How long a store call may take before the fallback decides.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether denials are remembered until their `retry_after`.
    pub fn deny_cache(&self) -> bool {
        self.deny_cache
    }
}

/// Builds a [`Policy`].
#[derive(Clone, Debug)]
pub struct PolicyBuilder {
    name: String,
    limits: Vec<Limit>,
    lease: Option<Lease>,
    fallback: Fallback,
    timeout: Duration,
    deny_cache: bool,
    store_tenant: Option<Arc<str>>,
    key_class: Option<String>,
}

impl PolicyBuilder {
    /// Names the class of the keys its limits render, for the limits that name none
    /// ([`Limit::key_class`]): the `key_class` label of their metrics.
    #[must_use]
    pub fn key_class(mut self, class: &str) -> Self {
        self.key_class = Some(class.to_string());
        self
    }

    /// Adds a limit.
    #[must_use]
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Enables leases.
    #[must_use]
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets the fallback mode (default [`Fallback::Local`]).
    #[must_use]
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Sets the store timeout (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Turns the local deny cache off (default on): with it, a key denied for `d` is denied
    /// from memory, without a store call, until `d` has passed.
    #[must_use]
    pub fn deny_cache(mut self, enabled: bool) -> Self {
        self.deny_cache = enabled;
        self
    }

    /// Checks and builds the policy.
    pub fn build(mut self) -> Result<Policy, PolicyError> {
        check_name(&self.name)?;
        if let Some(class) = self.key_class.take() {
            check_name(&class)?;
            let class: Arc<str> = class.into();
            for limit in self
                .limits
                .iter_mut()
                .filter(|limit| limit.key_class.is_none())
            {
                limit.key_class = Some(Arc::clone(&class));
            }
        }
        if self.limits.is_empty() {
            return Err(PolicyError::NoLimits(self.name));
        }
        if self.limits.len() > MAX_LIMITS {
            return Err(PolicyError::TooManyLimits(self.name));
        }
        for (index, limit) in self.limits.iter().enumerate() {
            let earlier = self.limits.iter().take(index);
            if earlier.clone().any(|other| other.name == limit.name) {
                return Err(PolicyError::DuplicateLimit(limit.name.to_string()));
            }
            if earlier.clone().any(|other| other.key == limit.key) {
                return Err(PolicyError::DuplicateKey(limit.key.to_string()));
            }
        }
        check_settings(&self.name, self.timeout, self.lease)?;
        let mut regional = self
            .limits
            .iter()
            .filter(|limit| limit.lease_suffix.is_some());
        if let Some(first) = regional.next() {
            let refuse = |reason: &str| PolicyError::Regional {
                limit: first.name.to_string(),
                reason: reason.to_string(),
            };
            if let Some(second) = regional.next() {
                return Err(refuse(&format!(
                    "a policy has at most one regional limit, and '{}' is another",
                    second.name
                )));
            }
            if self.lease.is_some() {
                return Err(refuse(
                    "a policy with a regional limit cannot be leased (the region's lease is its agent's)",
                ));
            }
        }
        if self.lease.is_some() {
            let in_flight = self
                .limits
                .iter()
                .find(|limit| limit.algorithm.is_in_flight());
            if let Some(in_flight) = in_flight {
                return Err(PolicyError::LeasedInFlight(in_flight.name.to_string()));
            }
            if let Some(paced) = self.limits.iter().find(|limit| limit.max_wait.is_some()) {
                return Err(PolicyError::Pacing {
                    limit: paced.name.to_string(),
                    reason:
                        "a paced limit cannot be leased (the module refuses PARTIAL with MAXWAIT)"
                            .into(),
                });
            }
        }
        // A region's lease may arrive at any moment: a regional denial is not remembered.
        let regional_policy = self.limits.iter().any(|limit| limit.lease_suffix.is_some());
        Ok(Policy {
            name: self.name.into(),
            limits: self.limits,
            lease: self.lease,
            fallback: self.fallback,
            timeout: self.timeout,
            deny_cache: self.deny_cache && !regional_policy,
            store_tenant: self.store_tenant,
        })
    }
}

/// Why a policy is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyError {
    /// A policy or limit name that is empty or has characters other than ASCII letters,
    /// digits, `_`, `-`, `.` (names go into header fields and metric labels).
    BadName(String),
    /// A policy without limits.
    NoLimits(String),
    /// Two limits with one name.
    DuplicateLimit(String),
    /// Two limits with one key template (a key holds one limiter).
    DuplicateKey(String),
    /// More than [`MAX_LIMITS`] limits.
    TooManyLimits(String),
    /// A limit's key template is malformed.
    Template {
        /// The limit.
        limit: String,
        /// Why.
        error: TemplateError,
    },
    /// Pacing that cannot be done.
    Pacing {
        /// The limit.
        limit: String,
        /// Why.
        reason: String,
    },
    /// A lease on a policy with an in-flight limit (a slot is held by one request, it
    /// cannot be claimed in advance for others).
    LeasedInFlight(String),
    /// A regional limit that cannot be one ([`Limit::regional`]).
    Regional {
        /// The limit.
        limit: String,
        /// Why.
        reason: String,
    },
    /// A zero store timeout.
    ZeroTimeout,
    /// A zero lease lifetime.
    ZeroLeaseLifetime,
    /// A lease of zero units.
    ZeroLeaseUnits,
    /// A lease whose cap on one claim is below its claim size.
    LeaseCap {
        /// Units per claim.
        units: u64,
        /// The cap.
        max_units: u64,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadName(name) => write!(
                f,
                "bad name '{name}': use ASCII letters, digits, '_', '-' and '.'"
            ),
            Self::NoLimits(policy) => write!(f, "policy '{policy}' has no limits"),
            Self::DuplicateLimit(limit) => write!(f, "two limits are named '{limit}'"),
            Self::DuplicateKey(key) => {
                write!(f, "two limits use the key '{key}': a key holds one limiter")
            }
            Self::TooManyLimits(policy) => write!(
                f,
                "policy '{policy}' has more than {MAX_LIMITS} limits (RL.MULTI's maximum)"
            ),
            Self::Template { limit, error } => write!(f, "limit '{limit}': {error}"),
            Self::Pacing { limit, reason } | Self::Regional { limit, reason } => {
                write!(f, "limit '{limit}': {reason}")
            }
            Self::LeasedInFlight(limit) => write!(
                f,
                "limit '{limit}' is an in-flight limit: its policy cannot be leased"
            ),
            Self::ZeroTimeout => write!(f, "the store timeout must be above zero"),
            Self::ZeroLeaseLifetime => write!(f, "the lease lifetime must be above zero"),
            Self::ZeroLeaseUnits => write!(
                f,
                "a lease of 0 units claims nothing: give at least 1 (or no lease)"
            ),
            Self::LeaseCap { units, max_units } => write!(
                f,
                "the lease's max_units ({max_units}) is below its units ({units})"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

/// The checks a policy's and a job profile's settings pass: the name, a timeout above
/// zero, a lease that claims something for some time.
pub(crate) fn check_settings(
    name: &str,
    timeout: Duration,
    lease: Option<Lease>,
) -> Result<(), PolicyError> {
    check_name(name)?;
    if timeout.is_zero() {
        return Err(PolicyError::ZeroTimeout);
    }
    if let Some(lease) = lease {
        if lease.units == 0 {
            return Err(PolicyError::ZeroLeaseUnits);
        }
        if lease.max_units < lease.units {
            return Err(PolicyError::LeaseCap {
                units: lease.units,
                max_units: lease.max_units,
            });
        }
        if lease.lifetime.is_zero() {
            return Err(PolicyError::ZeroLeaseLifetime);
        }
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), PolicyError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(())
    } else {
        Err(PolicyError::BadName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket() -> Algorithm {
        Algorithm::token_bucket(10, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn builds_with_defaults() {
        let policy = Policy::builder("api")
            .limit(Limit::new("per-key", bucket(), "k:{key}").unwrap())
            .build()
            .unwrap();
        assert_eq!(policy.fallback(), Fallback::Local);
        assert_eq!(policy.timeout(), DEFAULT_TIMEOUT);
        assert!(policy.deny_cache());
        assert_eq!(policy.lease(), None);
    }

    #[test]
    fn a_regional_limit_is_a_floor_alone_in_its_policy() {
        let regional = || {
            Limit::new("global", bucket(), "{{g}}f")
                .unwrap()
                .regional(":lease")
                .unwrap()
        };
        let policy = Policy::builder("api").limit(regional()).build().unwrap();
        assert_eq!(policy.limits()[0].lease_suffix(), Some(":lease"));
        assert!(!policy.deny_cache(), "a lease may come at any moment");
        let error = |result: Result<Policy, PolicyError>| result.unwrap_err().to_string();
        let slots = Algorithm::concurrency(3, Duration::from_secs(1)).unwrap();
        let in_flight = Limit::new("slots", slots, "s").unwrap().regional(":l");
        assert!(in_flight.unwrap_err().to_string().contains("in-flight"));
        for bad in ["", "{x}", "a b", &"x".repeat(MAX_LEASE_SUFFIX + 1)] {
            let refused = Limit::new("g", bucket(), "k").unwrap().regional(bad);
            assert!(
                refused.unwrap_err().to_string().contains("suffix"),
                "{bad:?}"
            );
        }
        let paced = Limit::new("g", bucket(), "k")
            .unwrap()
            .max_wait(Duration::from_millis(10))
            .unwrap()
            .regional(":l");
        assert!(paced.unwrap_err().to_string().contains("paced"));
        let second = Limit::new("other", bucket(), "{{g}}o")
            .unwrap()
            .regional(":lease")
            .unwrap();
        let two = Policy::builder("api")
            .limit(regional())
            .limit(second)
            .build();
        assert!(error(two).contains("at most one regional limit"));
        let leased = Policy::builder("api")
            .limit(regional())
            .lease(Lease::new(2))
            .build();
        assert!(error(leased).contains("cannot be leased"));
    }

    #[test]
    fn refuses_what_would_fail_later() {
        assert_eq!(
            Policy::builder("api").build(),
            Err(PolicyError::NoLimits("api".into()))
        );
        let limit = Limit::new("a", bucket(), "k").unwrap();
        assert_eq!(
            Policy::builder("api")
                .limit(limit.clone())
                .limit(limit.clone())
                .build(),
            Err(PolicyError::DuplicateLimit("a".into()))
        );
        assert_eq!(
            Policy::builder("api")
                .limit(limit.clone())
                .limit(Limit::new("b", bucket(), "k").unwrap())
                .build(),
            Err(PolicyError::DuplicateKey("k".into()))
        );
        let many = (0..17).fold(Policy::builder("api"), |builder, i| {
            builder.limit(Limit::new(&format!("l{i}"), bucket(), &format!("k{i}")).unwrap())
        });
        assert_eq!(many.build(), Err(PolicyError::TooManyLimits("api".into())));
        assert!(matches!(
            Limit::new("has space", bucket(), "k"),
            Err(PolicyError::BadName(_))
        ));
        assert!(matches!(
            Limit::new("a", bucket(), "k:{"),
            Err(PolicyError::Template { .. })
        ));
        assert_eq!(
            Policy::builder("api")
                .limit(limit.clone())
                .timeout(Duration::ZERO)
                .build(),
            Err(PolicyError::ZeroTimeout)
        );
        assert_eq!(
            Policy::builder("api")
                .limit(limit.clone())
                .lease(Lease::new(5).lifetime(Duration::ZERO))
                .build(),
            Err(PolicyError::ZeroLeaseLifetime)
        );
        let paced = limit.clone().max_wait(Duration::from_millis(100)).unwrap();
        assert!(matches!(
            Policy::builder("api")
                .limit(paced)
                .lease(Lease::new(5))
                .build(),
            Err(PolicyError::Pacing { .. })
        ));
        let slots = Algorithm::concurrency(5, Duration::from_secs(30)).unwrap();
        assert_eq!(
            Policy::builder("api")
                .limit(Limit::new("slots", slots, "s").unwrap())
                .lease(Lease::new(5))
                .build(),
            Err(PolicyError::LeasedInFlight("slots".into()))
        );
        let window = Algorithm::fixed_window(5, Duration::from_secs(1)).unwrap();
        let window = Limit::new("w", window, "w").unwrap();
        assert!(window.max_wait(Duration::from_millis(100)).is_err());
        assert!(limit.clone().max_wait(Duration::from_micros(1500)).is_err());
        assert!(limit.max_wait(Duration::from_secs(86_401)).is_err());
    }
}
