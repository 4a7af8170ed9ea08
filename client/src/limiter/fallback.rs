//! Decisions when the store cannot decide: the policy's fallback mode, and this replica's
//! share of each limit decided in process.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::RateLimiter;
use super::decide::decided;
use super::state::Target;
use crate::clock;
use crate::decision::{Decision, LimitStatus, Outcome, Source};
use crate::local::LocalCall;
use crate::policy::Fallback;
use crate::store::StoreError;

impl RateLimiter {
    /// The decision when the store cannot decide: `error` is why (`None`: the breaker is
    /// open), `wait` how long a denied client should wait before the store is tried again.
    pub(super) fn fallback(
        &self,
        target: Target<'_>,
        cost: u64,
        error: Option<StoreError>,
        wait: Duration,
    ) -> Decision {
        let refused = error
            .as_ref()
            .is_some_and(|error| !error.is_unavailability());
        let mut decision = match target.state.policy.fallback() {
            Fallback::Open => blanket(target, true, wait),
            Fallback::Closed => blanket(target, false, wait),
            Fallback::Local => self.local_decision(target, cost, wait),
        };
        decision.outcome = match (refused, decision.allowed) {
            (true, _) => Outcome::Error,
            (false, true) => Outcome::FallbackAllowed,
            (false, false) => Outcome::FallbackDenied,
        };
        decision
    }

    /// This replica's share of every limit, decided in process.
    fn local_decision(&self, target: Target<'_>, cost: u64, wait: Duration) -> Decision {
        let state = target.state;
        let Some(calls) = self.local_calls(target) else {
            // Some limit's share is below one unit: this replica admits nothing alone.
            return blanket(target, false, wait);
        };
        let grant = self
            .inner
            .local
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .acquire(&calls, cost, None, clock::now_us());
        let Ok(grant) = grant else {
            return blanket(target, false, wait);
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

    /// Every limit of the target at this replica's share (`None` if some share is below one
    /// unit).
    fn local_calls<'a>(&self, target: Target<'a>) -> Option<Vec<LocalCall<'a>>> {
        let replicas = self.inner.replicas.get();
        let state = target.state;
        state
            .policy
            .limits()
            .iter()
            .zip(&state.shapes)
            .zip(target.keys)
            .map(|((limit, shape), key)| {
                Some(LocalCall {
                    key,
                    shape: shape.share(replicas)?,
                    weight: limit.weight_units(),
                    max_wait_ns: limit
                        .paced()
                        .map(|wait| u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)),
                    holder: target.holder,
                })
            })
            .collect()
    }

    /// Releases the target's slots in the local in-flight limits.
    pub(super) fn release_local(&self, target: Target<'_>) {
        let Some(calls) = self.local_calls(target) else {
            return;
        };
        let slots: Vec<LocalCall<'_>> = calls
            .into_iter()
            .enumerate()
            .filter(|(index, _)| target.state.in_flight(*index))
            .map(|(_, call)| call)
            .collect();
        if !slots.is_empty() {
            // A release of an unknown holder changes nothing, so errors cannot matter here.
            let _ = self
                .inner
                .local
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .refund(&slots, 1, clock::now_us());
        }
    }
}

/// A decision that consulted no limit: admit or deny everything.
fn blanket(target: Target<'_>, allowed: bool, wait: Duration) -> Decision {
    Decision {
        allowed,
        wait: Duration::ZERO,
        source: Source::Fallback,
        outcome: Outcome::FallbackAllowed,
        policy: Arc::clone(&target.state.name),
        retry_after: Some(if allowed {
            Duration::ZERO
        } else {
            wait.max(Duration::from_secs(1))
        }),
        limits: Vec::new(),
        binding: 0,
        in_flight: None,
    }
}
