//! Limits decided in process with the core algorithms: the engine behind the local fallback
//! and the in-memory store.
//!
//! It mirrors `RL.MULTI` exactly: every limit of a group is evaluated before any is charged,
//! a partial grant takes the same number of units from each, and the binding limit is chosen
//! by the same rule. Only the clock differs: the caller passes this process's.

use std::collections::HashMap;

use redis_ratelimit_core::decision::{Algorithm as _, Decision};
use redis_ratelimit_core::fixed_window::{FixedWindow, FixedWindowAlgorithm};
use redis_ratelimit_core::gcra::{Gcra, GcraAlgorithm};
use redis_ratelimit_core::sliding_log::{SlidingLog, SlidingLogAlgorithm, SlidingLogChange};
use redis_ratelimit_core::sliding_window::{SlidingWindow, SlidingWindowAlgorithm};
use redis_ratelimit_core::token_bucket::{TokenBucket, TokenBucketAlgorithm};

use crate::algorithm::{CoreParams, Shape};
use crate::store::{Grant, View};

/// One limit of a local group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalCall<'a> {
    pub(crate) key: &'a str,
    pub(crate) shape: Shape,
    pub(crate) weight: u64,
}

/// Why a local call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LocalError {
    /// The key holds a limiter of another algorithm (only in strict mode).
    KindMismatch(String),
    /// The parameters are out of range for a call of this cost.
    Params(String),
}

#[derive(Clone, Debug)]
enum State {
    TokenBucket(TokenBucket),
    SlidingWindow(SlidingWindow),
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    Gcra(Gcra),
}

#[derive(Clone, Debug)]
struct Stored {
    state: State,
    expires_at_ms: i64,
}

#[derive(Clone, Debug)]
enum Change {
    TokenBucket(TokenBucket),
    SlidingWindow(SlidingWindow),
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLogChange),
    Gcra(Gcra),
}

/// A change to store under a key, and its expiry.
#[derive(Clone, Debug)]
struct Pending {
    change: Change,
    expires_at_ms: i64,
}

/// Each limit's decision for one cost, and what to store if all admit.
type Evaluation = Vec<(Decision, Option<Pending>)>;

/// Limiter states by key, with Redis's expiry semantics (an expired state is a missing key).
#[derive(Debug, Default)]
pub(crate) struct LocalLimits {
    states: HashMap<String, Stored>,
    /// Refuse a key holding another algorithm (as the server does) instead of replacing it.
    strict: bool,
    operations: u32,
}

impl LocalLimits {
    /// Limits that refuse kind mismatches, like the server.
    pub(crate) fn strict() -> Self {
        Self {
            strict: true,
            ..Self::default()
        }
    }

    /// Limits that silently replace a state of another kind (the fallback: it has no one to
    /// report to, and its states are only approximations anyway).
    pub(crate) fn lenient() -> Self {
        Self::default()
    }

    /// Forgets every state.
    pub(crate) fn clear(&mut self) {
        self.states.clear();
    }

    /// Takes `units × weight` from every limit, all or nothing, or with `partial_min` the
    /// largest number of units from `partial_min` to `units` that every limit has.
    pub(crate) fn acquire(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        partial_min: Option<u64>,
        now_us: i64,
    ) -> Result<Grant, LocalError> {
        self.maybe_prune(now_us);
        let units = units.max(1);
        let (granted, evaluation) = match partial_min {
            None => {
                let evaluation = self.evaluate_all(calls, units, now_us, false)?;
                let admitted = evaluation.iter().all(|(decision, _)| decision.allowed);
                (if admitted { units } else { 0 }, evaluation)
            }
            Some(min) => self.largest_grant(calls, min.clamp(1, units), units, now_us)?,
        };
        let views: Vec<View> = evaluation.iter().map(|(d, _)| view_of(d)).collect();
        let binding = binding(&views, granted > 0, granted.max(1), calls);
        if granted > 0 {
            for (call, (_, pending)) in calls.iter().zip(evaluation) {
                if let Some(pending) = pending {
                    self.commit(call.key, pending);
                }
            }
        }
        Ok(Grant {
            granted,
            binding,
            views,
        })
    }

    /// Gives `units × weight` back to every limit, never beyond its limit.
    pub(crate) fn refund(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        now_us: i64,
    ) -> Result<(), LocalError> {
        let evaluation = self.evaluate_all(calls, units.max(1), now_us, true)?;
        for (call, (_, pending)) in calls.iter().zip(evaluation) {
            if let Some(pending) = pending {
                self.commit(call.key, pending);
            }
        }
        Ok(())
    }

    /// Binary search for the most units (between `min` and `max`) every limit admits;
    /// admission is monotone in the cost. Returns 0 units (and the views of a `min` call)
    /// when even `min` is denied.
    fn largest_grant(
        &self,
        calls: &[LocalCall<'_>],
        min: u64,
        max: u64,
        now_us: i64,
    ) -> Result<(u64, Evaluation), LocalError> {
        let admitted = |evaluation: &[(Decision, Option<Pending>)]| {
            evaluation.iter().all(|(decision, _)| decision.allowed)
        };
        let at_min = self.evaluate_all(calls, min, now_us, false)?;
        if !admitted(&at_min) {
            return Ok((0, at_min));
        }
        let at_max = self.evaluate_all(calls, max, now_us, false)?;
        if admitted(&at_max) {
            return Ok((max, at_max));
        }
        let (mut low, mut high, mut best) = (min, max, at_min);
        // Invariant: `low` is admitted (with `best`), `high` is not.
        while high.saturating_sub(low) > 1 {
            let middle = low.saturating_add(high.saturating_sub(low) / 2);
            let evaluation = self.evaluate_all(calls, middle, now_us, false)?;
            if admitted(&evaluation) {
                low = middle;
                best = evaluation;
            } else {
                high = middle;
            }
        }
        Ok((low, best))
    }

    fn evaluate_all(
        &self,
        calls: &[LocalCall<'_>],
        units: u64,
        now_us: i64,
        refund: bool,
    ) -> Result<Evaluation, LocalError> {
        calls
            .iter()
            .map(|call| {
                let cost = units.saturating_mul(call.weight.max(1));
                let params = call
                    .shape
                    .params(cost)
                    .map_err(|error| LocalError::Params(error.to_string()))?;
                let now_ms = now_us.div_euclid(1_000);
                let stored = self
                    .states
                    .get(call.key)
                    .filter(|stored| stored.expires_at_ms > now_ms);
                evaluate(stored, params, now_us, refund, self.strict, call.key)
            })
            .collect()
    }

    fn commit(&mut self, key: &str, pending: Pending) {
        let Pending {
            change,
            expires_at_ms,
        } = pending;
        let previous = self.states.remove(key).map(|stored| stored.state);
        let state = match (previous, change) {
            (Some(State::SlidingLog(mut log)), Change::SlidingLog(change)) => {
                SlidingLogAlgorithm::apply(&mut log, change);
                State::SlidingLog(log)
            }
            (_, Change::SlidingLog(change)) => {
                State::SlidingLog(SlidingLogAlgorithm::create(change))
            }
            (_, Change::TokenBucket(state)) => State::TokenBucket(state),
            (_, Change::SlidingWindow(state)) => State::SlidingWindow(state),
            (_, Change::FixedWindow(state)) => State::FixedWindow(state),
            (_, Change::Gcra(state)) => State::Gcra(state),
        };
        self.states.insert(
            key.to_string(),
            Stored {
                state,
                expires_at_ms,
            },
        );
    }

    /// Drops expired states now and then, so a local map of many keys does not grow without
    /// bound.
    fn maybe_prune(&mut self, now_us: i64) {
        self.operations = self.operations.wrapping_add(1);
        if self.operations % 1024 == 0 {
            let now_ms = now_us.div_euclid(1_000);
            self.states
                .retain(|_, stored| stored.expires_at_ms > now_ms);
        }
    }
}

/// Evaluates one limit with the core algorithm matching its parameters.
fn evaluate(
    stored: Option<&Stored>,
    params: CoreParams,
    now_us: i64,
    refund: bool,
    strict: bool,
    key: &str,
) -> Result<(Decision, Option<Pending>), LocalError> {
    let state = stored.map(|stored| &stored.state);
    let mismatch = || LocalError::KindMismatch(key.to_string());
    macro_rules! run {
        ($algorithm:ty, $variant:ident, $params:expr) => {{
            let current = match state {
                Some(State::$variant(current)) => Some(current),
                Some(_) if strict => return Err(mismatch()),
                _ => None,
            };
            let evaluation = if refund {
                <$algorithm>::refund(current, &$params, now_us)
            } else {
                <$algorithm>::evaluate(current, &$params, now_us)
            };
            let pending = evaluation.commit.map(|commit| Pending {
                change: Change::$variant(commit.change),
                expires_at_ms: commit.expires_at_ms,
            });
            Ok((evaluation.decision, pending))
        }};
    }
    match params {
        CoreParams::TokenBucket(p) => run!(TokenBucketAlgorithm, TokenBucket, p),
        CoreParams::SlidingWindow(p) => run!(SlidingWindowAlgorithm, SlidingWindow, p),
        CoreParams::FixedWindow(p) => run!(FixedWindowAlgorithm, FixedWindow, p),
        CoreParams::SlidingLog(p) => run!(SlidingLogAlgorithm, SlidingLog, p),
        CoreParams::Gcra(p) => run!(GcraAlgorithm, Gcra, p),
    }
}

/// A core decision as the module would reply it (a wait of "never" is `None`).
fn view_of(decision: &Decision) -> View {
    View::from_fields(decision.reply_fields())
}

/// The limit that decided, by `RL.MULTI`'s rule: when denied, the denying limit with the
/// longest wait (never beats any wait); when admitted, the limit with the fewest calls of
/// this cost left. Ties go to the lowest index.
pub(crate) fn binding(
    views: &[View],
    admitted: bool,
    units: u64,
    calls: &[LocalCall<'_>],
) -> usize {
    let weights = calls.iter().map(|call| call.weight.max(1));
    let mut best: Option<(usize, u128)> = None;
    for (index, (view, weight)) in views.iter().zip(weights).enumerate() {
        let score = if admitted {
            // Fewer calls left ranks higher: invert so that larger is "more binding".
            let calls_left = view.remaining.checked_div(units.saturating_mul(weight));
            u128::from(u64::MAX.saturating_sub(calls_left.unwrap_or(0)))
        } else if view.allowed {
            continue;
        } else {
            match view.retry_after {
                None => u128::MAX,
                Some(wait) => wait.as_nanos(),
            }
        };
        if best.is_none_or(|(_, top)| score > top) {
            best = Some((index, score));
        }
    }
    best.map_or(0, |(index, _)| index)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::Algorithm;

    const T0: i64 = 1_700_000_000_000_000;

    fn shape(algorithm: Algorithm) -> Shape {
        algorithm.shape().unwrap()
    }

    fn bucket(capacity: u64) -> Shape {
        shape(Algorithm::token_bucket(capacity, Duration::from_secs(3600)).unwrap())
    }

    #[test]
    fn all_or_nothing_across_limits() {
        let mut limits = LocalLimits::strict();
        let calls = [
            LocalCall {
                key: "user",
                shape: bucket(3),
                weight: 1,
            },
            LocalCall {
                key: "global",
                shape: bucket(100),
                weight: 1,
            },
        ];
        for _ in 0..3 {
            assert_eq!(limits.acquire(&calls, 1, None, T0).unwrap().granted, 1);
        }
        let denied = limits.acquire(&calls, 1, None, T0).unwrap();
        assert_eq!((denied.granted, denied.binding), (0, 0));
        assert!(denied.views[1].allowed, "global alone would have admitted");
        // The denial charged nothing: the global bucket still has 97.
        let peek = limits.acquire(&calls[1..], 1, None, T0).unwrap();
        assert_eq!(peek.views[0].remaining, 96);
    }

    #[test]
    fn a_partial_grant_takes_what_every_limit_has() {
        let mut limits = LocalLimits::strict();
        let calls = [
            LocalCall {
                key: "a",
                shape: bucket(10),
                weight: 1,
            },
            LocalCall {
                key: "b",
                shape: bucket(20),
                weight: 3,
            },
        ];
        // b admits at most 6 units of weight 3.
        let grant = limits.acquire(&calls, 8, Some(1), T0).unwrap();
        assert_eq!(grant.granted, 6);
        assert_eq!(grant.views[0].remaining, 4);
        assert_eq!(grant.views[1].remaining, 2);
        let none = limits.acquire(&calls, 8, Some(1), T0).unwrap();
        assert_eq!(none.granted, 0);
        assert_eq!(none.binding, 1);
        assert!(none.views[1].retry_after.unwrap() > Duration::ZERO);
    }

    #[test]
    fn refunds_give_units_back_up_to_the_limit() {
        let mut limits = LocalLimits::strict();
        let calls = [LocalCall {
            key: "a",
            shape: bucket(5),
            weight: 1,
        }];
        assert_eq!(limits.acquire(&calls, 5, None, T0).unwrap().granted, 5);
        limits.refund(&calls, 2, T0).unwrap();
        assert_eq!(limits.acquire(&calls, 3, None, T0).unwrap().granted, 0);
        assert_eq!(limits.acquire(&calls, 2, None, T0).unwrap().granted, 2);
        limits.refund(&calls, 50, T0).unwrap();
        let grant = limits.acquire(&calls, 1, None, T0).unwrap();
        assert_eq!(
            grant.views[0].remaining, 4,
            "a refund never exceeds the capacity"
        );
    }

    #[test]
    fn a_cost_above_the_limit_is_never_admitted() {
        let mut limits = LocalLimits::strict();
        let calls = [LocalCall {
            key: "a",
            shape: bucket(5),
            weight: 2,
        }];
        let grant = limits.acquire(&calls, 3, None, T0).unwrap();
        assert_eq!(grant.granted, 0);
        assert_eq!(grant.views[0].retry_after, None);
    }

    #[test]
    fn strict_limits_refuse_another_kind_lenient_ones_replace_it() {
        let window = shape(Algorithm::fixed_window(5, Duration::from_secs(60)).unwrap());
        for (mut limits, refuses) in [
            (LocalLimits::strict(), true),
            (LocalLimits::lenient(), false),
        ] {
            let first = [LocalCall {
                key: "k",
                shape: bucket(5),
                weight: 1,
            }];
            limits.acquire(&first, 1, None, T0).unwrap();
            let second = [LocalCall {
                key: "k",
                shape: window,
                weight: 1,
            }];
            assert_eq!(limits.acquire(&second, 1, None, T0).is_err(), refuses);
        }
    }

    #[test]
    fn expired_states_are_missing_keys() {
        let mut limits = LocalLimits::strict();
        let fast = shape(Algorithm::token_bucket(2, Duration::from_secs(1)).unwrap());
        let calls = [LocalCall {
            key: "a",
            shape: fast,
            weight: 1,
        }];
        assert_eq!(limits.acquire(&calls, 2, None, T0).unwrap().granted, 2);
        assert_eq!(limits.acquire(&calls, 1, None, T0).unwrap().granted, 0);
        let later = T0 + 1_000_000;
        assert_eq!(limits.acquire(&calls, 2, None, later).unwrap().granted, 2);
    }

    #[test]
    fn the_binding_limit_when_admitted_has_the_fewest_calls_left() {
        let mut limits = LocalLimits::strict();
        let calls = [
            LocalCall {
                key: "a",
                shape: bucket(100),
                weight: 1,
            },
            LocalCall {
                key: "b",
                shape: bucket(10),
                weight: 1,
            },
            LocalCall {
                key: "c",
                shape: bucket(10),
                weight: 1,
            },
        ];
        let grant = limits.acquire(&calls, 1, None, T0).unwrap();
        assert_eq!(
            (grant.granted, grant.binding),
            (1, 1),
            "ties go to the lowest index"
        );
    }
}
