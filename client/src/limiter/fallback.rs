//! Decisions when the store cannot decide: the policy's fallback mode, and this replica's
//! share of each limit decided in process, continuing from the store's last answer (see
//! [`answers`](super::answers)); and, when the store answers again, charging it what the
//! fallback admitted meanwhile.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::decide::decided;
use super::groups::{Groups, probed};
use super::state::{Acquired, Target};
use crate::clock::LimiterClock;
use crate::decision::{Decision, LimitStatus, Outcome, Source};
use crate::local::{LocalCall, LocalLimits};
use crate::policy::Fallback;
use crate::replicas::Replicas;
use crate::store::{StoreError, View};

/// The fallback's memory: the local limiter states (shares of the quota), one per key for
/// every policy and job profile (a key has one share whichever asks), and the replica
/// count the shares divide by.
pub(super) struct LocalFallback {
    states: Mutex<LocalLimits>,
    pub(super) replicas: Replicas,
    clock: LimiterClock,
}

impl LocalFallback {
    /// At most `max_keys` local states (past it, a key set's share starts afresh).
    pub(super) fn new(replicas: Replicas, clock: LimiterClock, max_keys: usize) -> Self {
        Self {
            // Lenient: the fallback has no one to report a kind mismatch to.
            states: Mutex::new(LocalLimits::lenient(max_keys)),
            replicas,
            clock,
        }
    }

    /// The decision when the store cannot decide: `error` is why (`None`: the breaker is
    /// open), `wait` how long a denied client should wait before the store is tried again.
    pub(super) fn decide(
        &self,
        target: Target<'_>,
        cost: u64,
        error: Option<StoreError>,
        wait: Duration,
    ) -> Decision {
        let refused = error
            .as_ref()
            .is_some_and(|error| !error.is_unavailability());
        let mut decision = match target.state.settings.fallback {
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

    /// This replica's share of every limit, decided in process: continuing from the store's
    /// last answer for these keys (a denial stays a denial until its wait is over), and
    /// owing the store what it admits.
    fn local_decision(&self, target: Target<'_>, cost: u64, wait: Duration) -> Decision {
        let state = target.state;
        let now_us = self.clock.now_us();
        if let Some(left) = state.memory.answers.denied_for(target.id, cost, now_us) {
            return blanket(target, false, left);
        }
        let Some(calls) = self.local_calls(target) else {
            // Some limit's share is below one unit: this replica admits nothing alone.
            return blanket(target, false, wait);
        };
        // The charged limits decide together; probes are read, as the store would.
        let (charged, probes): (Vec<usize>, Vec<usize>) =
            (0..calls.len()).partition(|index| !state.probe(*index));
        let pick = |indices: &[usize]| -> Vec<LocalCall<'_>> {
            indices
                .iter()
                .filter_map(|index| calls.get(*index).cloned())
                .collect()
        };
        let decided_locally = {
            let mut local = self.local();
            if let Some(seed) = state.memory.answers.seed(target.id, now_us) {
                self.seed_local(target, &calls, &seed.views, seed.answered_at_us, &mut local);
            }
            let grant = if charged.is_empty() {
                Ok(None)
            } else {
                local.acquire(&pick(&charged), cost, None, now_us).map(Some)
            };
            let read = if probes.is_empty() {
                Ok(Vec::new())
            } else {
                local.peek(&pick(&probes), 1, now_us).map(|read| read.views)
            };
            grant.and_then(|grant| read.map(|read| (grant, read)))
        };
        let Ok((grant, read)) = decided_locally else {
            return blanket(target, false, wait);
        };
        let granted = grant.as_ref().map_or(cost, |grant| grant.granted);
        if granted > 0 && grant.is_some() {
            state
                .memory
                .answers
                .owe(target.id, granted, now_us, state.limits.longest);
        }
        let mut views: Vec<(usize, View)> = Vec::with_capacity(calls.len());
        let binding = match &grant {
            Some(grant) => {
                views.extend(charged.iter().copied().zip(grant.views.iter().copied()));
                charged.get(grant.binding).copied().unwrap_or(0)
            }
            None => probes.first().copied().unwrap_or(0),
        };
        views.extend(probes.iter().copied().zip(read.into_iter().map(probed)));
        views.sort_by_key(|(index, _)| *index);
        let mut binding_position = 0;
        let limits: Vec<LimitStatus> = views
            .iter()
            .enumerate()
            .filter_map(|(position, (index, view))| {
                if *index == binding {
                    binding_position = position;
                }
                let (call, limit) = (calls.get(*index)?, state.limits.get(*index)?);
                Some(LimitStatus {
                    configured_quota: limit.algorithm.quota(),
                    ..LimitStatus::from_view(Arc::clone(&limit.name), &call.quota, view)
                })
            })
            .collect();
        decided(
            state,
            granted > 0,
            Source::Fallback,
            limits,
            binding_position,
        )
    }

    /// Starts each limit's local state from the store's view of it at `answered_at_us`:
    /// this replica's part of the units it had left, `⌊remaining / replicas⌋`. In-flight
    /// limits start empty (their slots come back as requests end).
    fn seed_local(
        &self,
        target: Target<'_>,
        calls: &[LocalCall<'_>],
        views: &[(usize, crate::store::View)],
        answered_at_us: i64,
        local: &mut LocalLimits,
    ) {
        let replicas = self.replicas.get().max(1);
        for (index, view) in views {
            if target.state.in_flight(*index) {
                continue;
            }
            if let Some(call) = calls.get(*index) {
                let remaining = view.remaining.checked_div(replicas).unwrap_or(0);
                // A seed that fails (parameters out of range) leaves a fresh share, which
                // the acquire that follows refuses or admits by the same rules.
                let _ = local.seed(call, remaining, answered_at_us);
            }
        }
    }

    /// Remembers what the store answered, for the fallback to continue from.
    pub(super) fn remember(&self, target: Target<'_>, acquired: &Acquired, cost: u64) {
        let state = target.state;
        let denied = (acquired.granted == 0 && !state.in_flight(acquired.binding))
            .then(|| {
                acquired
                    .views
                    .iter()
                    .find(|(index, _)| *index == acquired.binding)
                    .and_then(|(_, view)| view.retry_after)
            })
            .flatten()
            .map(|wait| (wait, cost));
        state.memory.answers.record(
            target.id,
            &acquired.views,
            denied,
            self.clock.now_us(),
            state.limits.longest,
        );
    }

    /// Charges the store what the fallback admitted for the target's keys while it could
    /// not ask (a partial grant: what the store has, up to that; in-flight limits are not
    /// charged, their local slots were released). Call it before any other call for these
    /// keys once the store is reachable again. An error is the store still out of reach:
    /// the units stay owed.
    pub(super) async fn settle(
        &self,
        groups: &Groups,
        target: Target<'_>,
    ) -> Result<(), StoreError> {
        let state = target.state;
        let Some(owed) = state
            .memory
            .answers
            .take_owed(target.id, self.clock.now_us())
        else {
            return Ok(());
        };
        let charged = groups.plan_only(state, target.keys, |index| !state.in_flight(index));
        let unheld = Target {
            holder: None,
            ..target
        };
        match groups
            .acquire(unheld, &charged, owed, Some(1), "settle")
            .await
        {
            Ok(acquired) => {
                groups
                    .metrics
                    .fallback_settled(&state.name, owed, acquired.granted);
                Ok(())
            }
            Err(error) if error.is_unavailability() => {
                state.memory.answers.owe(
                    target.id,
                    owed,
                    self.clock.now_us(),
                    state.limits.longest,
                );
                Err(error)
            }
            // Refused (a configuration problem): the check that follows reports it.
            Err(_) => Ok(()),
        }
    }

    /// Every limit of the target at this replica's share (`None` if some share is below one
    /// unit).
    fn local_calls<'a>(&self, target: Target<'a>) -> Option<Vec<LocalCall<'a>>> {
        let replicas = self.replicas.get();
        let state = target.state;
        state
            .limits
            .limits
            .iter()
            .zip(target.keys)
            .map(|(limit, key)| {
                Some(LocalCall {
                    key,
                    quota: Cow::Owned(limit.algorithm.share(replicas)?),
                    weight: limit.weight,
                    max_wait_ns: limit
                        .paced
                        .map(|wait| u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)),
                    holder: target.holder,
                })
            })
            .collect()
    }

    /// The local fallback's states.
    fn local(&self) -> MutexGuard<'_, LocalLimits> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
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
            let _ = self.local().refund(&slots, 1, self.clock.now_us());
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
