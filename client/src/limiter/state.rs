//! What the limiter keeps per policy, and what one check is about.

use std::sync::Arc;
use std::time::Duration;

use super::answers::Answers;
use crate::decision::LimitStatus;
use crate::deny_cache::DenyCache;
use crate::lease::Leases;
use crate::policy::Policy;
use crate::store::{LimitCall, StoreBackend, View};

/// A policy with what the limiter keeps for it.
pub(super) struct PolicyState {
    pub(super) policy: Policy,
    pub(super) name: Arc<str>,
    /// Limit indices, most specific key first (the order groups are called in).
    pub(super) order: Vec<usize>,
    pub(super) deny: DenyCache,
    pub(super) leases: Leases,
    /// The store's last answer per key set, what the fallback continues from.
    pub(super) answers: Answers,
}

impl PolicyState {
    pub(super) fn new(policy: Policy) -> Self {
        let longest = policy
            .limits()
            .iter()
            .map(|limit| limit.algorithm().window())
            .max()
            .unwrap_or(Duration::ZERO);
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
            order,
            deny: DenyCache::default(),
            leases: Leases::default(),
            answers: Answers::new(longest),
        }
    }

    /// Units limit `index` is charged per unit of cost.
    pub(super) fn weight(&self, index: usize) -> u64 {
        self.policy
            .limits()
            .get(index)
            .map_or(1, |limit| limit.weight_units())
    }

    /// Whether limit `index` is paced (called on its own).
    pub(super) fn paced(&self, index: usize) -> bool {
        self.policy
            .limits()
            .get(index)
            .is_some_and(|limit| limit.paced().is_some())
    }

    /// Whether limit `index` is an in-flight limit.
    pub(super) fn in_flight(&self, index: usize) -> bool {
        self.policy
            .limits()
            .get(index)
            .is_some_and(|limit| limit.algorithm().is_in_flight())
    }

    /// Whether the policy has in-flight limits (its checks hold slots until released).
    pub(super) fn holds_slots(&self) -> bool {
        (0..self.policy.limits().len()).any(|index| self.in_flight(index))
    }

    pub(super) fn status(&self, index: usize, view: &View) -> Option<LimitStatus> {
        let limit = self.policy.limits().get(index)?;
        let quota = limit.algorithm().as_quota();
        Some(LimitStatus::from_view(limit.shared_name(), quota, view))
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
        let limit = self.state.policy.limits().get(index)?;
        Some(LimitCall {
            key: self.keys.get(index)?,
            algorithm: limit.algorithm(),
            weight: limit.weight_units(),
            max_wait: limit.paced(),
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
