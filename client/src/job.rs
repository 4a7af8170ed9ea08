//! Checks whose limits come with the call: a [`Job`] is limits in order (each with its
//! rendered key, its algorithm, and the units it is charged or a probe), checked all or
//! nothing by [`RateLimiter::check_job`](crate::RateLimiter::check_job), its statuses in
//! the same order. For callers that build keys themselves (the rate-limit service builds
//! one per request descriptor); policies with key templates are the other entry point.
//!
//! What a [`Profile`] sets (fallback, store timeout, leases, deny cache) applies as to a
//! policy; what the limiter remembers between checks (leases, the deny cache, the store's
//! last answers for the fallback) is kept per profile and key set.
//!
//! ```
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redis_ratelimit_client::job::{Job, JobLimit, Profile};
//! use redis_ratelimit_client::store::MemoryStore;
//! use redis_ratelimit_client::{Algorithm, RateLimiter};
//!
//! let limiter = RateLimiter::builder(MemoryStore::new())
//!     .profile(Profile::builder("edge").build()?)
//!     .build()?;
//! let per_minute = Algorithm::fixed_window(2, Duration::from_secs(60))?;
//! let job = Job::new("edge")
//!     .limit(JobLimit::new("per-key", "rl:alice", per_minute.clone()))
//!     .limit(JobLimit::new("per-route", "rl:alice:/search", per_minute).probe());
//! let decision = limiter.check_job(&job).await?;
//! assert!(decision.allowed);
//! assert_eq!(decision.limits[0].remaining, 1); // charged one unit
//! assert_eq!(decision.limits[1].remaining, 2); // read, not charged
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::policy::{DEFAULT_TIMEOUT, Fallback, Lease, MAX_LIMITS, PolicyError};

/// What a check asks of one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// Take this many units (at least 1), all or nothing with the job's other charges.
    Units(u64),
    /// Read the limit's state without charging it; a probe never denies (it asks "how
    /// much is left?", not "is one more available?").
    Probe,
}

/// One limit of a [`Job`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLimit {
    pub(crate) name: Arc<str>,
    pub(crate) key: String,
    pub(crate) algorithm: Algorithm,
    pub(crate) charge: Charge,
    pub(crate) specificity: usize,
    pub(crate) lease_suffix: Option<Arc<str>>,
    pub(crate) key_class: Option<Arc<str>>,
}

impl JobLimit {
    /// `algorithm` on the Redis key `key`, charged 1 unit; `name` is what its status (and
    /// so the header fields) calls it.
    pub fn new(name: &str, key: impl Into<String>, algorithm: Algorithm) -> Self {
        Self {
            name: name.into(),
            key: key.into(),
            algorithm,
            charge: Charge::Units(1),
            specificity: 0,
            lease_suffix: None,
            key_class: None,
        }
    }

    /// The class of its key (a tenant's plan, `ip`...): the `key_class` label of its
    /// metrics, never the key itself; [`DEFAULT_KEY_CLASS`](crate::policy::DEFAULT_KEY_CLASS)
    /// unless given. The metrics keep at most 64 classes per policy label.
    #[must_use]
    pub fn key_class(mut self, class: &str) -> Self {
        self.key_class = Some(class.into());
        self
    }

    /// Decides this limit as a region's floor and lease (`RL.REGIONAL key key+lease_suffix
    /// ...`, see [`Limit::regional`](crate::Limit::regional)): called alone and after the
    /// job's other limits, never refunded (a later denial leaves its units spent: under-
    /// admission, never over). An in-flight or paced limit is refused by the store call.
    #[must_use]
    pub fn regional(mut self, lease_suffix: &str) -> Self {
        self.lease_suffix = Some(lease_suffix.into());
        self
    }

    /// How specific its key is (default 0): on a Redis Cluster, where limits in different
    /// slots are called in turn, the most specific are called first, so that a hot shared
    /// key is rarely charged and then refunded.
    #[must_use]
    pub fn specificity(mut self, specificity: usize) -> Self {
        self.specificity = specificity;
        self
    }

    /// Charged `units` (0 is refused by the check).
    #[must_use]
    pub fn units(mut self, units: u64) -> Self {
        self.charge = Charge::Units(units);
        self
    }

    /// Read, not charged.
    #[must_use]
    pub fn probe(mut self) -> Self {
        self.charge = Charge::Probe;
        self
    }

    /// The name its status carries.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its Redis key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// What the check asks of it.
    pub fn charge(&self) -> Charge {
        self.charge
    }
}

/// A check of limits given in order: admitted only if every charged limit admits it, then
/// charged to every one of them; probes are read and never deny.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub(crate) profile: String,
    pub(crate) label: Option<String>,
    pub(crate) limits: Vec<JobLimit>,
}

impl Job {
    /// A job under the profile named `profile` (registered with
    /// [`RateLimiterBuilder::profile`](crate::RateLimiterBuilder::profile)).
    pub fn new(profile: &str) -> Self {
        Self {
            profile: profile.to_string(),
            label: None,
            limits: Vec::new(),
        }
    }

    /// What the decision (and the `policy` label of its metrics) is called: the profile's
    /// name unless given.
    #[must_use]
    pub fn label(mut self, label: &str) -> Self {
        self.label = Some(label.to_string());
        self
    }

    /// Adds a limit (statuses come back in the order limits were added).
    #[must_use]
    pub fn limit(mut self, limit: JobLimit) -> Self {
        self.limits.push(limit);
        self
    }

    /// The limits, in order.
    pub fn limits(&self) -> &[JobLimit] {
        &self.limits
    }
}

/// Why a job is refused before anything is asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// A job without limits.
    #[error("a job has at least one limit")]
    NoLimits,
    /// More limits than one `RL.MULTI` takes.
    #[error("a job has at most {MAX_LIMITS} limits (RL.MULTI's maximum), not {0}")]
    TooManyLimits(usize),
    /// Two limits on one key (a key holds one limiter).
    #[error("two limits of the job use the key '{0}': a key holds one limiter")]
    DuplicateKey(String),
    /// A limit charged 0 units (a probe says it is read only).
    #[error("limit '{0}' is charged 0 units: charge at least 1, or make it a probe")]
    ZeroUnits(String),
}

/// What every job of one name shares: the fallback, the store timeout, leases and the
/// deny cache, as a [`Policy`](crate::Policy) sets them; and the limiter's memory of its
/// key sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub(crate) name: Arc<str>,
    pub(crate) lease: Option<Lease>,
    pub(crate) fallback: Fallback,
    pub(crate) timeout: Duration,
    pub(crate) deny_cache: bool,
}

impl Profile {
    /// Starts a profile named `name` (the defaults of a policy: local fallback,
    /// [`DEFAULT_TIMEOUT`], no leases, the deny cache on).
    pub fn builder(name: &str) -> ProfileBuilder {
        ProfileBuilder {
            profile: Profile {
                name: name.into(),
                lease: None,
                fallback: Fallback::default(),
                timeout: DEFAULT_TIMEOUT,
                deny_cache: true,
            },
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Builds a [`Profile`].
#[derive(Clone, Debug)]
pub struct ProfileBuilder {
    profile: Profile,
}

impl ProfileBuilder {
    /// Leases for the jobs that can use them (no in-flight limit, no probe, the cost
    /// within the claim).
    #[must_use]
    pub fn lease(mut self, lease: Lease) -> Self {
        self.profile.lease = Some(lease);
        self
    }

    /// The fallback mode (default [`Fallback::Local`]).
    #[must_use]
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.profile.fallback = fallback;
        self
    }

    /// The store timeout (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.profile.timeout = timeout;
        self
    }

    /// Turns the deny cache off (default on).
    #[must_use]
    pub fn deny_cache(mut self, enabled: bool) -> Self {
        self.profile.deny_cache = enabled;
        self
    }

    /// Checks and builds the profile (a policy's rules for the name, timeout and lease).
    pub fn build(self) -> Result<Profile, PolicyError> {
        crate::policy::check_settings(
            &self.profile.name,
            self.profile.timeout,
            self.profile.lease,
        )?;
        Ok(self.profile)
    }
}
