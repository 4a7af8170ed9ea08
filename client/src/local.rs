//! Limits decided in process: the engine behind the local fallback and the in-memory store.
//!
//! It is `RL.MULTI` in process: the limiter states sit in a map instead of Redis keys, and
//! every call is decided by the core's own engine ([`engine`]), the one the module runs, so
//! a group is decided by the very same rules (every limit evaluated before any is charged,
//! partial grants, the binding limit, all or nothing). Only the clock differs: the caller
//! passes this process's.

use std::borrow::Cow;

use redis_ratelimit_core::Commit;
use redis_ratelimit_core::concurrency::HolderId;
use redis_ratelimit_core::decision::Decision;
use redis_ratelimit_core::engine::{self, Limits, Refused};
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Change, Limiter, LimiterRef, Quota};

use crate::expiring::Expiring;
use crate::outcome::{GroupGrant, StoreBackend, View};

/// One limit of a local group.
#[derive(Clone, Debug)]
pub(crate) struct LocalCall<'a> {
    pub(crate) key: &'a str,
    /// The limit's quota for one unit: its algorithm's, or a replica's share of it.
    pub(crate) quota: Cow<'a, Quota>,
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

/// Limiter states by key, each with its expiry (Unix ms), with Redis's expiry semantics (an
/// expired state is a missing key, and is dropped, oldest first, at the next call). A bound
/// (the fallback's) drops, for a new key at the bound, the expired states, or else the state
/// used longest ago: that key starts over from a fresh share.
#[derive(Debug, Default)]
pub(crate) struct LocalLimits {
    states: Expiring<Limiter, i64>,
    /// Refuse a key holding another algorithm (as the server does) instead of replacing it.
    strict: bool,
    /// The engine's working memory, reused from call to call.
    buffers: engine::Buffers,
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
    /// report to, and its states are only approximations anyway), at most `max_keys` of them.
    pub(crate) fn lenient(max_keys: usize) -> Self {
        Self {
            states: Expiring::bounded(max_keys),
            ..Self::default()
        }
    }

    /// Starts `call.key` over from what the store last said: `remaining` units of the
    /// call's quota left at `at_us`, as if a fresh limiter had been charged the rest then
    /// (a bucket holding `remaining` tokens, a window with the rest used). Any state the key
    /// had is replaced. Units are the limit's own (the call's weight is not applied).
    pub(crate) fn seed(
        &mut self,
        call: &LocalCall<'_>,
        remaining: u64,
        at_us: i64,
    ) -> Result<(), LocalError> {
        self.states.remove(call.key);
        let used = call.quota.advertised_quota().saturating_sub(remaining);
        if used == 0 {
            return Ok(());
        }
        let unweighted = LocalCall {
            weight: 1,
            max_wait_ns: None,
            ..call.clone()
        };
        self.acquire(&[unweighted], used, Some(1), at_us)
            .map(|_| ())
    }

    /// Takes `units × weight` from every limit, all or nothing, or with `partial_min` the
    /// most units (from `partial_min` to `units`) that every limit can give: `RL.MULTI`, run
    /// by the core's engine.
    pub(crate) fn acquire(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        partial_min: Option<u64>,
        now_us: i64,
    ) -> Result<GroupGrant, LocalError> {
        self.evaluate(calls, units, partial_min, now_us, true)
    }

    /// What [`acquire`](Self::acquire) would answer, changing nothing (`RL.PEEK`).
    pub(crate) fn peek(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        now_us: i64,
    ) -> Result<GroupGrant, LocalError> {
        self.evaluate(calls, units, None, now_us, false)
    }

    fn evaluate(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        partial_min: Option<u64>,
        now_us: i64,
        commit: bool,
    ) -> Result<GroupGrant, LocalError> {
        self.states.expire(now_us.div_euclid(1_000));
        let quotas = calls
            .iter()
            .map(|call| quota(call, !commit))
            .collect::<Result<Vec<_>, _>>()?;
        let weights: Vec<u64> = calls.iter().map(|call| call.weight.max(1)).collect();
        let limits = Limits {
            quotas: &quotas,
            weights: &weights,
            cost: units.max(1),
            grant: partial_min.map_or(Grant::Whole, |min| Grant::Partial { min }),
        };
        let held = held(&self.states, self.strict, calls, &quotas, now_us);
        let verdict = engine::acquire_many(&held, limits, now_us, &mut self.buffers)
            .map_err(|refused| mismatch(calls, refused))?;
        let views = self.buffers.per_limit().iter().map(view_of).collect();
        let commits: Vec<_> = self.buffers.take_commits().collect();
        for (call, change) in calls.iter().zip(commits).filter(|_| commit) {
            if let Some(change) = change {
                self.commit(call.key, change, now_us);
            }
        }
        Ok(GroupGrant {
            granted: verdict.units,
            binding: verdict.bound.binding,
            views,
            backend: StoreBackend::Memory,
        })
    }

    /// Gives `units × weight` back to every limit, never beyond its limit (an in-flight
    /// limit frees the holder's slot).
    pub(crate) fn refund(
        &mut self,
        calls: &[LocalCall<'_>],
        units: u64,
        now_us: i64,
    ) -> Result<(), LocalError> {
        let quotas = calls
            .iter()
            .map(|call| {
                Ok(quota(call, false)?.with_cost(units.max(1).saturating_mul(call.weight.max(1))))
            })
            .collect::<Result<Vec<_>, LocalError>>()?;
        let held = held(&self.states, self.strict, calls, &quotas, now_us);
        let commits = held
            .iter()
            .zip(&quotas)
            .enumerate()
            .map(|(index, (held, quota))| {
                engine::refund(*held, quota, now_us)
                    .map(|evaluation| evaluation.commit)
                    .map_err(|refused| mismatch(calls, shift(refused, index)))
            })
            .collect::<Result<Vec<_>, LocalError>>()?;
        for (call, commit) in calls.iter().zip(commits) {
            if let Some(commit) = commit {
                self.commit(call.key, commit, now_us);
            }
        }
        Ok(())
    }

    /// Writes a commit to `key`: applied to its live limiter of the same kind, otherwise
    /// creating one; a limiter left holding nothing goes, as the module deletes its key.
    fn commit(&mut self, key: &str, commit: Commit<Change>, now_us: i64) {
        let Commit {
            change,
            expires_at_ms,
        } = commit;
        let now_ms = now_us.div_euclid(1_000);
        let live = live(&self.states, key, now_us)
            .is_some_and(|limiter| limiter.as_ref().kind() == change.kind());
        let stored = match self.states.get_mut(key) {
            Some(stored) if live => stored,
            _ => {
                self.states
                    .insert(key, change.create(), expires_at_ms, now_ms);
                return;
            }
        };
        // The kinds match (checked above), so the change applies.
        let _ = change.apply(stored.as_mut());
        if stored.as_ref().is_vacant() {
            self.states.remove(key);
        } else {
            self.states.renew(key, expires_at_ms);
        }
    }
}

/// Each call's live limiter in `states`; unless `strict`, a limiter of another kind than the
/// call's counts as missing (its commit replaces it).
fn held<'s>(
    states: &'s Expiring<Limiter, i64>,
    strict: bool,
    calls: &[LocalCall<'_>],
    quotas: &[Quota],
    now_us: i64,
) -> Vec<Option<LimiterRef<'s>>> {
    calls
        .iter()
        .zip(quotas)
        .map(|(call, quota)| {
            live(states, call.key, now_us)
                .map(Limiter::as_ref)
                .filter(|held| strict || held.kind() == quota.kind())
        })
        .collect()
}

/// The state under `key`, unless it has expired (then the key is missing).
fn live<'s>(states: &'s Expiring<Limiter, i64>, key: &str, now_us: i64) -> Option<&'s Limiter> {
    let now_ms = now_us.div_euclid(1_000);
    states
        .get(key)
        .filter(|(_, expires_at_ms)| *expires_at_ms > now_ms)
        .map(|(limiter, _)| limiter)
}

/// The quota of one call, for one unit: its own, paced or holding the caller's slot. An
/// in-flight limit needs the caller's holder, except for a peek (which reports the free slots).
fn quota(call: &LocalCall<'_>, peek: bool) -> Result<Quota, LocalError> {
    match (call.quota.as_ref(), call.max_wait_ns, call.holder) {
        (Quota::TokenBucket(bucket), Some(wait_ns), _) => bucket
            .with_max_wait_ns(wait_ns)
            .map(Quota::TokenBucket)
            .map_err(|_| LocalError::Params("MAXWAIT is at most a day".into())),
        (Quota::Concurrency(slots), None, Some(holder)) => HolderId::new(holder.as_bytes())
            .map(|holder| Quota::Concurrency(Box::new(slots.with_holder(holder))))
            .map_err(|_| LocalError::Params("a holder id is 1 to 128 bytes".into())),
        (quota @ Quota::Concurrency(_), None, None) if peek => Ok(quota.clone()),
        (Quota::Concurrency(_), None, None) => Err(LocalError::Params(
            "an in-flight limit needs the caller's holder id".into(),
        )),
        (quota, None, _) => Ok(quota.clone()),
        (_, Some(_), _) => Err(LocalError::Params("only token buckets can be paced".into())),
    }
}

/// The refusal of a single-key call, said of key `index` of its group.
fn shift(refused: Refused, index: usize) -> Refused {
    match refused {
        Refused::KindMismatch { held, wanted, .. } => Refused::KindMismatch {
            index,
            held,
            wanted,
        },
        other => other,
    }
}

/// The engine's refusal as a local error, naming the key.
fn mismatch(calls: &[LocalCall<'_>], refused: Refused) -> LocalError {
    match refused {
        Refused::KindMismatch { index, .. } => LocalError::KindMismatch(
            calls
                .get(index)
                .map_or_else(String::new, |call| call.key.to_string()),
        ),
        Refused::NoLimits => LocalError::Params("a group needs at least one limit".into()),
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

    fn quota(algorithm: Algorithm) -> Cow<'static, Quota> {
        Cow::Owned(algorithm.as_quota().clone())
    }

    fn bucket(capacity: u64) -> Cow<'static, Quota> {
        quota(Algorithm::token_bucket(capacity, Duration::from_secs(3600)).unwrap())
    }

    #[test]
    fn all_or_nothing_across_limits() {
        let mut limits = LocalLimits::strict();
        let calls = [
            LocalCall {
                key: "user",
                quota: bucket(3),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "global",
                quota: bucket(100),
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
                quota: bucket(10),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "b",
                quota: bucket(20),
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
            quota: bucket(5),
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
            quota: bucket(5),
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
        let window = quota(Algorithm::fixed_window(5, Duration::from_secs(60)).unwrap());
        for (mut limits, refuses) in [
            (LocalLimits::strict(), true),
            (
                LocalLimits::lenient(crate::expiring::DEFAULT_MAX_KEYS),
                false,
            ),
        ] {
            let first = [LocalCall {
                key: "k",
                quota: bucket(5),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            }];
            limits.acquire(&first, 1, None, T0).unwrap();
            let second = [LocalCall {
                key: "k",
                quota: window.clone(),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            }];
            assert_eq!(limits.acquire(&second, 1, None, T0).is_err(), refuses);
        }
    }

    #[test]
    fn a_bounded_map_forgets_the_state_used_longest_ago() {
        let mut limits = LocalLimits::lenient(2);
        let call = |key| LocalCall {
            key,
            quota: bucket(3),
            weight: 1,
            max_wait_ns: None,
            holder: None,
        };
        for key in ["a", "b", "a", "c"] {
            limits.acquire(&[call(key)], 1, None, T0).unwrap();
        }
        let left = |limits: &mut LocalLimits, key| {
            limits.peek(&[call(key)], 1, T0).unwrap().views[0].remaining
        };
        // "b" was used longest ago: forgotten, it starts over as a key never used.
        assert_eq!(limits.states.len(), 2);
        assert_eq!(left(&mut limits, "b"), left(&mut limits, "never"));
        assert_eq!(left(&mut limits, "a") + 2, left(&mut limits, "never"));
    }

    #[test]
    fn a_seeded_state_continues_from_the_answer() {
        let mut limits = LocalLimits::lenient(crate::expiring::DEFAULT_MAX_KEYS);
        // 10 tokens refilled over an hour: one every 6 minutes.
        let calls = [LocalCall {
            key: "a",
            quota: bucket(10),
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
        let fast = quota(Algorithm::token_bucket(2, Duration::from_secs(1)).unwrap());
        let calls = [LocalCall {
            key: "a",
            quota: fast,
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
                quota: bucket(100),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "b",
                quota: bucket(10),
                weight: 1,
                max_wait_ns: None,
                holder: None,
            },
            LocalCall {
                key: "c",
                quota: bucket(10),
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
