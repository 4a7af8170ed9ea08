//! What the limiter keeps per policy (or job profile), and what one check is about.

use std::sync::Arc;
use std::time::Duration;

use super::answers::Answers;
use crate::decision::LimitStatus;
use crate::deny_cache::DenyCache;
use crate::job::Profile;
use crate::lease::Leases;
pub(crate) use crate::limit_set::{CheckedLimit, LimitSet};
use crate::policy::{Fallback, Lease, Policy};
use crate::store::{LimitCall, StoreBackend, View};

/// How checks are made: a policy's settings, or a job profile's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) lease: Option<Lease>,
    pub(crate) fallback: Fallback,
    pub(crate) timeout: Duration,
    pub(crate) deny_cache: bool,
}

impl Settings {
    fn of(policy: &Policy) -> Self {
        Self {
            lease: policy.lease(),
            fallback: policy.fallback(),
            timeout: policy.timeout(),
            deny_cache: policy.deny_cache(),
        }
    }
}

/// What the limiter remembers between checks, per policy or job profile, by key set: each
/// table at most the limiter's `max_tracked_keys` key sets.
#[derive(Debug)]
pub(crate) struct Memory {
    pub(crate) deny: DenyCache,
    pub(crate) leases: Leases,
    /// The store's last answer per key set, what the fallback continues from.
    pub(crate) answers: Answers,
}

impl Memory {
    /// Empty tables of at most `max_keys` key sets each.
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            deny: DenyCache::new(max_keys),
            leases: Leases::new(max_keys),
            answers: Answers::new(max_keys),
        }
    }
}

/// A check's settings, limits and memory: a policy's (its limits fixed), or a job's (its
/// limits given by the call, its memory the profile's). Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct PolicyState {
    /// What decisions and metrics are labelled.
    pub(crate) name: Arc<str>,
    pub(crate) settings: Settings,
    pub(crate) limits: Arc<LimitSet>,
    pub(crate) memory: Arc<Memory>,
    /// A job's profile (in-flight slots are released through it); `None` for a policy.
    pub(crate) profile: Option<Arc<str>>,
}

impl PolicyState {
    /// A policy's state, remembering at most `max_keys` key sets in each table.
    pub(super) fn new(policy: &Policy, max_keys: usize) -> Self {
        Self {
            name: policy.shared_name(),
            settings: Settings::of(policy),
            limits: Arc::new(LimitSet::of(policy)),
            memory: Arc::new(Memory::new(max_keys)),
            profile: None,
        }
    }

    /// A job profile's state: its settings and memory (each job brings its limits), at most
    /// `max_keys` key sets in each table.
    pub(super) fn of_profile(profile: &Profile, max_keys: usize) -> Self {
        Self {
            name: Arc::clone(&profile.name),
            settings: Settings {
                lease: profile.lease,
                fallback: profile.fallback,
                timeout: profile.timeout,
                deny_cache: profile.deny_cache,
            },
            limits: Arc::new(LimitSet::new(Vec::new(), |_| 0)),
            memory: Arc::new(Memory::new(max_keys)),
            profile: Some(Arc::clone(&profile.name)),
        }
    }

    /// The same settings and memory, other limits (a lease refunded with the limits it was
    /// claimed for).
    pub(super) fn with_limits(&self, limits: Arc<LimitSet>) -> Self {
        Self {
            limits,
            ..self.clone()
        }
    }

    /// Units limit `index` is charged per unit of cost.
    pub(super) fn weight(&self, index: usize) -> u64 {
        self.limits.get(index).map_or(1, |limit| limit.weight)
    }

    /// Whether limit `index` is paced (called on its own).
    pub(super) fn paced(&self, index: usize) -> bool {
        self.limits
            .get(index)
            .is_some_and(|limit| limit.paced.is_some())
    }

    /// Whether limit `index` is regional (called alone, through `RL.REGIONAL`).
    pub(super) fn regional(&self, index: usize) -> bool {
        self.limits
            .get(index)
            .is_some_and(|limit| limit.lease_suffix.is_some())
    }

    /// Whether some limit is regional.
    pub(super) fn has_regional(&self) -> bool {
        (0..self.limits.len()).any(|index| self.regional(index))
    }

    /// Whether limit `index` is an in-flight limit.
    pub(super) fn in_flight(&self, index: usize) -> bool {
        self.limits
            .get(index)
            .is_some_and(|limit| limit.algorithm.is_in_flight())
    }

    /// Whether limit `index` is a probe (read, never charged).
    pub(super) fn probe(&self, index: usize) -> bool {
        self.limits.get(index).is_some_and(|limit| limit.probe)
    }

    /// Whether some limit is a probe (such a check always reads the store).
    pub(super) fn has_probes(&self) -> bool {
        self.limits.limits.iter().any(|limit| limit.probe)
    }

    /// Whether the check holds slots until released (a charged in-flight limit).
    pub(super) fn holds_slots(&self) -> bool {
        (0..self.limits.len()).any(|index| self.in_flight(index) && !self.probe(index))
    }

    pub(super) fn status(&self, index: usize, view: &View) -> Option<LimitStatus> {
        let limit = self.limits.get(index)?;
        Some(LimitStatus::from_view(
            Arc::clone(&limit.name),
            limit.algorithm.as_quota(),
            view,
        ))
    }
}

/// A registered policy: the policy as given, and its state.
pub(super) struct Registered {
    pub(super) policy: Policy,
    pub(super) state: PolicyState,
}

impl Registered {
    pub(super) fn new(policy: Policy, max_keys: usize) -> Self {
        Self {
            state: PolicyState::new(&policy, max_keys),
            policy,
        }
    }
}

/// What one check is about: the policy, its rendered keys (policy order) and their joined
/// form (the key set's id), and the holder id of the slots it takes in in-flight limits.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) state: &'a PolicyState,
    pub(super) keys: &'a [String],
    pub(super) id: &'a str,
    pub(super) holder: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// Limit `index` as the store is asked about it.
    pub(super) fn call(&self, index: usize) -> Option<LimitCall<'a>> {
        let limit = self.state.limits.get(index)?;
        Some(LimitCall {
            key: self.keys.get(index)?,
            algorithm: &limit.algorithm,
            weight: limit.weight,
            max_wait: limit.paced,
            lease_suffix: limit.lease_suffix.as_deref(),
        })
    }

    /// The limits of a group as the store is asked about them.
    pub(super) fn calls(&self, group: &[usize]) -> Vec<LimitCall<'a>> {
        group.iter().filter_map(|index| self.call(*index)).collect()
    }
}

/// Units taken from the store for one check, before it becomes a decision.
pub(super) struct Acquired {
    pub(super) granted: u64,
    /// Each consulted limit's view, by policy index.
    pub(super) views: Vec<(usize, View)>,
    /// Policy index of the binding limit.
    pub(super) binding: usize,
    /// The backend that answered (every group is called on the same store).
    pub(super) backend: StoreBackend,
}
