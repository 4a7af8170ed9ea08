//! Checks paid from leases: spend units claimed earlier, or claim a new batch.

use std::sync::Arc;
use std::time::Instant;

use super::decide::{binding_of, store_decision, views_decision};
use super::state::{PolicyState, Target};
use super::{CheckError, RateLimiter};
use crate::breaker::Permit;
use crate::decision::{Decision, Source};
use crate::lease::{ClaimResult, LastClaim, LeaseSlot};
use crate::policy::Lease;
use crate::store::{StoreBackend, StoreError};

impl RateLimiter {
    /// A check with leases: spend leased units, or claim a new batch (a partial grant of up
    /// to the claim size, at least what this request needs).
    ///
    /// A request that finds the lease locked waits for the claim in progress (the claim is
    /// bounded by the store timeout) and takes its result: it spends the units claimed, is
    /// denied by the claim's denial, or goes to the fallback at once if the claim found the
    /// store out of reach. It never falls back because it waited.
    pub(super) async fn check_leased(
        &self,
        target: Target<'_>,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let state = target.state;
        let Some(lease) = state.settings.lease else {
            return self.check_store(target, cost).await;
        };
        let started = self.inner.clock.now();
        let slot = state
            .memory
            .leases
            .slot(target.id, target.keys, &state.limits, started);
        let mut held = slot.lock().await;
        let now = self.inner.clock.now();
        self.refund_expired(state, &mut held, now);
        // Units are there only after a claim, which set the backend.
        if let Some(backend) = held.backend.filter(|_| held.units >= cost) {
            held.units = held.units.saturating_sub(cost);
            return Ok(lease_decision(state, &held, backend));
        }
        if let Some(decision) = self.claimed_meanwhile(target, cost, &held, started) {
            return Ok(decision);
        }
        if let Permit::Skip(open_for) = self.inner.groups.breaker.permit(now) {
            return Ok(self.inner.fallback.decide(target, cost, None, open_for));
        }
        if let Err(error) = self.inner.fallback.settle(&self.inner.groups, target).await {
            held.last_claim = Some(LastClaim {
                at: self.inner.clock.now(),
                result: ClaimResult::Failed,
            });
            return self.after_error(target, cost, error);
        }
        let size = claim_size(&lease, &held, cost, slot.waiting(), now);
        self.claim(target, cost, &lease, size, &mut held, now).await
    }

    /// Gives an expired lease's unspent units back to the store, in a task of their own.
    fn refund_expired(&self, state: &PolicyState, held: &mut LeaseSlot, now: Instant) {
        if held.expires > now || held.units == 0 {
            return;
        }
        let units = std::mem::take(&mut held.units);
        let limiter = self.clone();
        let claimed = state.with_limits(Arc::clone(&held.limits));
        let keys = held.keys.clone();
        tokio::spawn(async move {
            limiter.refund_lease(&claimed, &keys, units).await;
        });
    }

    /// The result of a claim answered while this request waited for the lease (since
    /// `started`), if it decides this request: its denial, or its failure (the fallback).
    fn claimed_meanwhile(
        &self,
        target: Target<'_>,
        cost: u64,
        held: &LeaseSlot,
        started: Instant,
    ) -> Option<Decision> {
        let state = target.state;
        let last = held.last_claim.as_ref().filter(|last| last.at >= started)?;
        match &last.result {
            ClaimResult::Denied {
                min,
                views,
                binding,
                backend,
            } if cost.saturating_sub(held.units) >= *min => Some(views_decision(
                state,
                false,
                views,
                *binding,
                Source::Lease(*backend),
            )),
            ClaimResult::Failed => {
                self.inner
                    .groups
                    .metrics
                    .store_error(&state.name, "lease_wait");
                let wait = self.inner.groups.breaker.open_for();
                let error = Some(StoreError::Timeout);
                Some(self.inner.fallback.decide(target, cost, error, wait))
            }
            // Granted but spent by the requests before this one, or denied for a larger
            // cost: claim anew.
            ClaimResult::Granted | ClaimResult::Denied { .. } => None,
        }
    }

    /// Claims up to `size` units (what the lease holds counts), at least what this request
    /// needs, and spends this request's cost from them.
    async fn claim(
        &self,
        target: Target<'_>,
        cost: u64,
        lease: &Lease,
        size: u64,
        held: &mut LeaseSlot,
        now: Instant,
    ) -> Result<Decision, CheckError> {
        let state = target.state;
        held.claim_units = size;
        let held_units = held.units;
        let want = size.saturating_sub(held_units);
        let min = cost.saturating_sub(held_units).max(1);
        let groups = self.inner.groups.plan(state, target.keys);
        let claimed = self
            .inner
            .groups
            .acquire(target, &groups, want, Some(min), "claim")
            .await;
        let at = self.inner.clock.now();
        let acquired = match claimed {
            Ok(acquired) => acquired,
            Err(error) => {
                held.last_claim = Some(LastClaim {
                    at,
                    result: ClaimResult::Failed,
                });
                return self.after_error(target, cost, error);
            }
        };
        self.inner.fallback.remember(target, &acquired, min);
        if acquired.granted == 0 {
            held.last_claim = Some(LastClaim {
                at,
                result: ClaimResult::Denied {
                    min,
                    views: acquired.views.clone(),
                    binding: acquired.binding,
                    backend: acquired.backend,
                },
            });
            return Ok(store_decision(state, &acquired));
        }
        self.inner
            .groups
            .metrics
            .lease_claimed(&state.name, acquired.granted);
        held.units = held_units
            .saturating_add(acquired.granted)
            .saturating_sub(cost);
        held.expires = now.checked_add(lease.lifetime).unwrap_or(now);
        held.views = acquired.views.clone();
        held.limits = Arc::clone(&state.limits);
        held.backend = Some(acquired.backend);
        held.last_claim = Some(LastClaim {
            at,
            result: ClaimResult::Granted,
        });
        let mut decision = store_decision(state, &acquired);
        add_leased(&mut decision, state, held.units);
        Ok(decision)
    }

    /// Gives a lease's unspent units back to every limit.
    pub(super) async fn refund_lease(&self, state: &PolicyState, keys: &[String], units: u64) {
        let id = keys.join("\u{0}");
        let target = Target {
            state,
            keys,
            id: &id,
            holder: None,
        };
        if self.inner.groups.refund_plan(target, units, |_| true).await {
            self.inner.groups.metrics.lease_refunded(&state.name, units);
        }
    }
}

/// How many units to claim: the lease's size, twice the last claim's when the last batch
/// went within a quarter of its lifetime (the key is hot), more when requests wait.
fn claim_size(lease: &Lease, held: &LeaseSlot, cost: u64, waiting: u64, now: Instant) -> u64 {
    let hot = held.last_claim.as_ref().is_some_and(|last| {
        matches!(last.result, ClaimResult::Granted)
            && now.saturating_duration_since(last.at)
                < lease.lifetime.checked_div(4).unwrap_or_default()
    });
    let recent = if hot {
        held.claim_units.saturating_mul(2)
    } else {
        lease.units
    };
    lease.claim_for(cost, waiting, recent)
}

/// A request paid from the lease: the limits as they were when the units were claimed.
fn lease_decision(state: &PolicyState, lease: &LeaseSlot, backend: StoreBackend) -> Decision {
    let binding = binding_of(state, &lease.views, 1);
    let source = Source::Lease(backend);
    let mut decision = views_decision(state, true, &lease.views, binding, source);
    add_leased(&mut decision, state, lease.units);
    decision
}

/// Adds the units this replica holds in its lease to what each limit reports as remaining:
/// they were taken from the store but are still available to this client.
fn add_leased(decision: &mut Decision, state: &PolicyState, leased: u64) {
    for limit in &mut decision.limits {
        let weight = state
            .limits
            .limits
            .iter()
            .find(|candidate| candidate.name == limit.name)
            .map_or(1, |candidate| candidate.weight);
        limit.remaining = limit
            .remaining
            .saturating_add(leased.saturating_mul(weight))
            .min(limit.quota);
    }
}
