//! Turning what the store (or the fallback) answered into a [`Decision`].

use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_core::decision::Decision as CoreDecision;
use redis_ratelimit_core::multi;

use super::state::{Acquired, PolicyState};
use crate::decision::{Decision, LimitStatus, Outcome, Source};
use crate::store::View;

/// The decision from what the store granted: the backend that answered decided.
pub(super) fn store_decision(state: &PolicyState, acquired: &Acquired) -> Decision {
    let source = Source::Store(acquired.backend);
    views_decision(
        state,
        acquired.granted > 0,
        &acquired.views,
        acquired.binding,
        source,
    )
}

/// The decision from limits' views (policy index, view) and the policy index of the binding
/// one: the store's answer, or a lease's record of it.
pub(super) fn views_decision(
    state: &PolicyState,
    allowed: bool,
    views: &[(usize, View)],
    binding_index: usize,
    source: Source,
) -> Decision {
    let mut limits = Vec::with_capacity(views.len());
    let mut binding = 0;
    for (index, view) in views {
        if *index == binding_index {
            binding = limits.len();
        }
        if let Some(status) = state.status(*index, view) {
            limits.push(status);
        }
    }
    decided(state, allowed, source, limits, binding)
}

/// A decision from the limits consulted: the wait is the binding limit's. (The outcome of a
/// fallback decision is set by the caller, which knows why the store was not used.)
pub(super) fn decided(
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
        .filter(|limit| allowed && limit.allowed && !limit.in_flight)
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
        in_flight: None,
    }
}

/// The binding limit among the views of every group (policy indices), by the rule
/// `RL.MULTI` applies within a group ([`multi::bind`], from the core).
/// Probes never bind (they are read, not charged).
pub(super) fn binding_of(state: &PolicyState, views: &[(usize, View)], units: u64) -> usize {
    // One charged limit binds (as `multi::bind` finds), without building its lists.
    let mut charged = views.iter().filter(|(index, _)| !state.probe(*index));
    match (charged.next(), charged.next()) {
        (None, _) => return 0,
        (Some((only, _)), None) => return *only,
        _ => {}
    }
    let charged: Vec<&(usize, View)> = views
        .iter()
        .filter(|(index, _)| !state.probe(*index))
        .collect();
    let decisions: Vec<CoreDecision> = charged.iter().map(|(_, view)| view.to_core()).collect();
    let costs: Vec<u64> = charged
        .iter()
        .map(|(index, _)| units.saturating_mul(state.weight(*index)))
        .collect();
    let position = multi::bind(&decisions, &costs).map_or(0, |bound| bound.binding);
    charged.get(position).map_or(0, |(index, _)| *index)
}
