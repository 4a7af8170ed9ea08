//! Limits decided in process with the core algorithms: the engine behind the local fallback
//! and the in-memory store.
//!
//! It is `RL.MULTI` in process, built from the same core functions the module uses: every
//! limit of a group is evaluated before any is charged, a partial grant takes the same number
//! of units from each ([`multi::units_to_evaluate`] over each algorithm's `grantable`), and
//! the binding limit is chosen by [`multi::bind`]. Only the clock differs: the caller passes
//! this process's.

use std::collections::HashMap;

use redis_ratelimit_core::concurrency::{
    Concurrency, ConcurrencyAlgorithm, ConcurrencyChange, HolderId,
};
use redis_ratelimit_core::decision::{Algorithm as _, Decision};
use redis_ratelimit_core::fixed_window::{FixedWindow, FixedWindowAlgorithm};
use redis_ratelimit_core::gcra::{Gcra, GcraAlgorithm};
use redis_ratelimit_core::grant::Grant as CoreGrant;
use redis_ratelimit_core::multi;
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
    /// Pacing (token buckets): admit with a wait up to this many nanoseconds.
    pub(crate) max_wait_ns: Option<u64>,
    /// The caller's id for its slot (in-flight limits).
    pub(crate) holder: Option<&'a str>,
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
    Concurrency(Concurrency),
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
    Concurrency(ConcurrencyChange),
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

    /// Starts `call.key` over from what the store last said: `remaining` units of the
    /// call's shape left at `at_us`, as if a fresh limiter had been charged the rest then
    /// (a bucket holding `remaining` tokens, a window with the rest used). Any state the key
    /// had is replaced. Units are the limit's own (the call's weight is not applied).
    pub(crate) fn seed(
        &mut self,
        call: &LocalCall<'_>,
        remaining: u64,
        at_us: i64,
    ) -> Result<(), LocalError> {
        self.states.remove(call.key);
        let used = call.shape.quota().saturating_sub(remaining);
        if used == 0 {
            return Ok(());
        }
        let unweighted = LocalCall {
            weight: 1,
            max_wait_ns: None,
            ..*call
        };
        self.acquire(&[unweighted], used, Some(1), at_us)
            .map(|_| ())
    }

    /// Takes `units × weight` from every limit, all or nothing, or with `partial_min` the
    /// most units (from `partial_min` to `units`) that every limit can give: `RL.MULTI`'s
    /// rules, from the core's own functions.
    pub(crate) fn acquire(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        partial_min: Option<u64>,
        now_us: i64,
    ) -> Result<Grant, LocalError> {
        self.maybe_prune(now_us);
        let units = units.max(1);
        let units = match partial_min {
            None => units,
            Some(min) => {
                let grantable = calls
                    .iter()
                    .map(|call| {
                        let weight = call.weight.max(1);
                        let cost = units.saturating_mul(weight);
                        let params = self.params(call, cost)?;
                        let stored = self.live(call.key, now_us);
                        let op = Op::Grantable(cost);
                        match ask(stored, params, now_us, op, self.strict, call.key)? {
                            Answer::Grantable(units) => Ok((units, weight)),
                            Answer::Decided(..) => Ok((0, weight)),
                        }
                    })
                    .collect::<Result<Vec<(u64, u64)>, LocalError>>()?;
                multi::units_to_evaluate(units, CoreGrant::Partial { min }, grantable)
            }
        };
        let evaluation = self.evaluate_all(calls, units, now_us, false)?;
        let decisions: Vec<Decision> = evaluation.iter().map(|(d, _)| *d).collect();
        let costs: Vec<u64> = calls
            .iter()
            .map(|call| units.saturating_mul(call.weight.max(1)))
            .collect();
        let admitted = decisions.iter().all(|decision| decision.allowed);
        let binding = multi::bind(&decisions, &costs).map_or(0, |bound| bound.binding);
        let views = decisions.iter().map(view_of).collect();
        if admitted {
            for (call, (_, pending)) in calls.iter().zip(evaluation) {
                if let Some(pending) = pending {
                    self.commit(call.key, pending);
                }
            }
        }
        Ok(Grant {
            granted: if admitted { units } else { 0 },
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

    fn params(&self, call: &LocalCall<'_>, cost: u64) -> Result<CoreParams, LocalError> {
        let params = call
            .shape
            .params(cost)
            .map_err(|error| LocalError::Params(error.to_string()))?;
        match (params, call.max_wait_ns, call.holder) {
            (CoreParams::TokenBucket(bucket), Some(wait_ns), _) => bucket
                .with_max_wait_ns(wait_ns)
                .map(CoreParams::TokenBucket)
                .map_err(|_| LocalError::Params("MAXWAIT is at most a day".into())),
            (CoreParams::Concurrency(slots), None, Some(holder)) => {
                HolderId::new(holder.as_bytes())
                    .map(|holder| CoreParams::Concurrency(slots.with_holder(holder)))
                    .map_err(|_| LocalError::Params("a holder id is 1 to 128 bytes".into()))
            }
            (CoreParams::Concurrency(_), None, None) => Err(LocalError::Params(
                "an in-flight limit needs the caller's holder id".into(),
            )),
            (params, None, _) => Ok(params),
            (_, Some(_), _) => Err(LocalError::Params("only token buckets can be paced".into())),
        }
    }

    /// The state under `key`, unless it has expired (then the key is missing).
    fn live(&self, key: &str, now_us: i64) -> Option<&Stored> {
        let now_ms = now_us.div_euclid(1_000);
        self.states
            .get(key)
            .filter(|stored| stored.expires_at_ms > now_ms)
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
                let params = self.params(call, units.saturating_mul(call.weight.max(1)))?;
                let stored = self.live(call.key, now_us);
                let op = if refund { Op::Refund } else { Op::Evaluate };
                match ask(stored, params, now_us, op, self.strict, call.key)? {
                    Answer::Decided(decision, pending) => Ok((decision, pending)),
                    Answer::Grantable(_) => Err(LocalError::Params("unexpected answer".into())),
                }
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
            (Some(State::Concurrency(mut slots)), Change::Concurrency(change)) => {
                ConcurrencyAlgorithm::apply(&mut slots, change);
                State::Concurrency(slots)
            }
            (_, Change::Concurrency(change)) => {
                State::Concurrency(ConcurrencyAlgorithm::create(change))
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

/// What to ask a limit.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Decide a call (read-only: the change is returned, not applied).
    Evaluate,
    /// Decide a refund.
    Refund,
    /// The most units, up to this many, a call could take now.
    Grantable(u64),
}

/// A limit's answer to an [`Op`].
enum Answer {
    Decided(Decision, Option<Pending>),
    Grantable(u64),
}

/// Asks one limit, with the core algorithm matching its parameters.
fn ask(
    stored: Option<&Stored>,
    params: CoreParams,
    now_us: i64,
    op: Op,
    strict: bool,
    key: &str,
) -> Result<Answer, LocalError> {
    let state = stored.map(|stored| &stored.state);
    macro_rules! ask {
        ($algorithm:ty, $variant:ident, $params:expr) => {{
            let current = match state {
                Some(State::$variant(current)) => Some(current),
                Some(_) if strict => return Err(LocalError::KindMismatch(key.to_string())),
                _ => None,
            };
            let evaluation = match op {
                Op::Grantable(up_to) => {
                    let units = <$algorithm>::grantable(current, &$params, up_to, now_us);
                    return Ok(Answer::Grantable(units));
                }
                Op::Evaluate => <$algorithm>::evaluate(current, &$params, now_us),
                Op::Refund => <$algorithm>::refund(current, &$params, now_us),
            };
            let pending = evaluation.commit.map(|commit| Pending {
                change: Change::$variant(commit.change),
                expires_at_ms: commit.expires_at_ms,
            });
            Ok(Answer::Decided(evaluation.decision, pending))
        }};
    }
    match params {
        CoreParams::TokenBucket(p) => ask!(TokenBucketAlgorithm, TokenBucket, p),
        CoreParams::SlidingWindow(p) => ask!(SlidingWindowAlgorithm, SlidingWindow, p),
        CoreParams::FixedWindow(p) => ask!(FixedWindowAlgorithm, FixedWindow, p),
        CoreParams::SlidingLog(p) => ask!(SlidingLogAlgorithm, SlidingLog, p),
        CoreParams::Concurrency(p) => ask!(ConcurrencyAlgorithm, Concurrency, p),
        CoreParams::Gcra(p) => ask!(GcraAlgorithm, Gcra, p),
    }
}

/// A core decision as the module would reply it (a wait of "never" is `None`).
fn view_of(decision: &Decision) -> View {
    View::from_fields(decision.reply_fields())
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
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "global",
                shape: bucket(100),
                weight: 1,
                max_wait_ns: None,
                holder: None,
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
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "b",
                shape: bucket(20),
                weight: 3,
                max_wait_ns: None,
                holder: None,
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
            max_wait_ns: None,
            holder: None,
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
            max_wait_ns: None,
            holder: None,
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
                max_wait_ns: None,
                holder: None,
            }];
            limits.acquire(&first, 1, None, T0).unwrap();
            let second = [LocalCall {
                key: "k",
                shape: window,
                weight: 1,
                max_wait_ns: None,
                holder: None,
            }];
            assert_eq!(limits.acquire(&second, 1, None, T0).is_err(), refuses);
        }
    }

    #[test]
    fn a_seeded_state_continues_from_the_answer() {
        let mut limits = LocalLimits::lenient();
        // 10 tokens refilled over an hour: one every 6 minutes.
        let calls = [LocalCall {
            key: "a",
            shape: bucket(10),
            weight: 2,
            max_wait_ns: None,
            holder: None,
        }];
        limits.acquire(&calls, 5, None, T0).unwrap();
        limits.seed(&calls[0], 3, T0).unwrap();
        let grant = limits.acquire(&calls, 1, None, T0).unwrap();
        assert_eq!((grant.granted, grant.views[0].remaining), (1, 1));
        assert_eq!(limits.acquire(&calls, 1, None, T0).unwrap().granted, 0);
        // Exhausted: nothing until the refill.
        limits.seed(&calls[0], 0, T0).unwrap();
        let denied = limits.acquire(&calls, 1, None, T0 + 1_000_000).unwrap();
        assert_eq!(denied.granted, 0);
        assert!(denied.views[0].retry_after.unwrap() > Duration::from_secs(600));
        // Full: as a fresh limiter.
        limits.seed(&calls[0], 10, T0).unwrap();
        assert_eq!(limits.acquire(&calls, 5, None, T0).unwrap().granted, 5);
    }

    #[test]
    fn expired_states_are_missing_keys() {
        let mut limits = LocalLimits::strict();
        let fast = shape(Algorithm::token_bucket(2, Duration::from_secs(1)).unwrap());
        let calls = [LocalCall {
            key: "a",
            shape: fast,
            weight: 1,
            max_wait_ns: None,
            holder: None,
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
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "b",
                shape: bucket(10),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "c",
                shape: bucket(10),
                weight: 1,
                max_wait_ns: None,
                holder: None,
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
