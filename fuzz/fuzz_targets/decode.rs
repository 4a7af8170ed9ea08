//! The one state decoder (`codec::decode`, used by RDB load and RESTORE) and the effect
//! decoder (`codec::decode_effect`, used by `RL.SETSTATE` on replicas and at AOF load),
//! fed with arbitrary bytes.
//!
//! Checked beyond "no panic" (overflow checks are on in fuzz builds):
//! - whatever decodes re-encodes to exactly the same bytes (one canonical encoding, so a
//!   DUMP of a restored value equals the payload, and replicas hold the primary's bytes);
//! - a decoded state is usable: every algorithm evaluates and refunds it at extreme clocks
//!   and parameters without panicking, with sane reply fields, and every state it commits
//!   encodes to a payload that both decoders accept again (a replica never refuses what its
//!   primary propagates, and an RDB written after a RESTORE loads).
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_ratelimit_core::concurrency::{
    Concurrency, ConcurrencyAlgorithm, ConcurrencyParams, HolderId, MAX_STORED_HOLDERS, MAX_TTL_US,
    MIN_TTL_US,
};
use redis_ratelimit_core::fixed_window::FixedWindowAlgorithm;
use redis_ratelimit_core::window::WindowParams;
use redis_ratelimit_core::gcra::{GcraAlgorithm, GcraParams, MAX_TOLERANCE_NS};
use redis_ratelimit_core::sliding_log::{
    SlidingLogAction, SlidingLogAlgorithm, SlidingLogParams,
};
use redis_ratelimit_core::sliding_window::SlidingWindowAlgorithm;
use redis_ratelimit_core::time::{MAX_NOW_US, MAX_WINDOW_US, MIN_WINDOW_US};
use redis_ratelimit_core::token_bucket::{
    MAX_REFILL_NS, MAX_WAIT_NS, TokenBucketAlgorithm, TokenBucketParams,
};
use redis_ratelimit_core::{Algorithm, Evaluation};
use redis_ratelimit_wire::codec::{
    EffectBody, EffectRecord, decode, decode_effect, encode, encode_effect, encode_state_effect,
};
use redis_ratelimit_core::kinds::{Change, KindAlgorithm, KindState, Limiter};

fuzz_target!(|data: &[u8]| {
    if let Ok(limiter) = decode(data) {
        assert_eq!(encode(limiter.as_ref()).as_bytes(), data, "not canonical");
        exercise(&limiter, &clocks(data));
    }
    if let Ok(record) = decode_effect(data) {
        assert!(record.expires_at_ms >= 0);
        let encoded = match &record.body {
            EffectBody::State(limiter) => {
                encode_state_effect(record.expires_at_ms, limiter.as_ref())
            }
            EffectBody::Change(change) => encode_effect(record.expires_at_ms, change),
        };
        assert_eq!(encoded.as_bytes(), data, "effect not canonical");
        match record.body {
            EffectBody::State(limiter) => exercise(&limiter, &clocks(data)),
            EffectBody::Change(Change::Concurrency(change)) => {
                // What a replica does with it: create the key, or apply it to a list.
                let change = *change;
                let mut holders = ConcurrencyAlgorithm::create(change);
                check_state_round_trips(&holders);
                ConcurrencyAlgorithm::apply(&mut holders, change);
                check_state_round_trips(&holders);
                exercise_with::<ConcurrencyAlgorithm>(
                    &holders,
                    &holder_params(&holders),
                    &clocks(data),
                    |_| true,
                );
            }
            EffectBody::Change(Change::SlidingLog(change)) => {
                let (SlidingLogAction::Admit { units } | SlidingLogAction::Refund { units }) =
                    change.action();
                if units > MAX_EXERCISED_UNITS {
                    return; // valid (up to 10M), but slow to build on every run
                }
                // What a replica does with it: create the key, or apply it to a log.
                let mut log = SlidingLogAlgorithm::create(change);
                check_state_round_trips(&log);
                SlidingLogAlgorithm::apply(&mut log, change);
                check_state_round_trips(&log);
                // A change may add up to 10M entries; evaluating (which copies the log for
                // every commit) is only worth it, and fast, for small logs.
                if log.len() <= MAX_EXERCISED_LOG {
                    exercise_with::<SlidingLogAlgorithm>(
                        &log,
                        &log_params(),
                        &clocks(data),
                        |_| true,
                    );
                }
            }
            // Every other kind's effect carries its whole state, decoded as such.
            EffectBody::Change(other) => panic!("decoded as a change: {other:?}"),
        }
    }
});

/// Largest replicated log change that is applied.
const MAX_EXERCISED_UNITS: u32 = 65_536;

/// Longest log a replicated change builds that is also evaluated.
const MAX_EXERCISED_LOG: usize = 4_096;

/// Server clocks to evaluate at: the whole accepted range, a realistic instant, and instants
/// taken from the payload itself (so stored times are hit exactly and just around).
fn clocks(data: &[u8]) -> Vec<i64> {
    let mut clocks = vec![0, 1, 1_700_000_000_000_000, MAX_NOW_US - 1, MAX_NOW_US];
    for chunk in data.chunks(8).take(4) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let value = i64::from_le_bytes(bytes);
        for candidate in [
            value,
            value / 1_000,
            value.saturating_add(1),
            value.saturating_sub(1),
        ] {
            clocks.push(candidate.clamp(0, MAX_NOW_US));
        }
    }
    clocks
}

fn exercise(limiter: &Limiter, clocks: &[i64]) {
    match limiter {
        Limiter::TokenBucket(state) => {
            let params = [
                (1, 1, 1),
                (10, 2_000_000_000, 3),
                (1, MAX_REFILL_NS, 1),
                (3, 1_000, 5),
            ]
            .map(|(capacity, interval, cost)| {
                TokenBucketParams::from_interval(capacity, interval, cost).unwrap()
            });
            let mut params = params.to_vec();
            params.push(TokenBucketParams::from_interval(MAX_REFILL_NS, 1, u64::MAX).unwrap());
            // Pacing: calls admitted into debt, up to the longest wait.
            for (capacity, interval) in [(1, 1_000_000), (5, MAX_REFILL_NS / 5)] {
                let paced = TokenBucketParams::from_interval(capacity, interval, 2).unwrap();
                params.push(paced.with_max_wait_ns(MAX_WAIT_NS).unwrap());
            }
            exercise_with::<TokenBucketAlgorithm>(state, &params, clocks, |_| true);
        }
        Limiter::SlidingWindow(state) => {
            exercise_with::<SlidingWindowAlgorithm>(state, &window_params(), clocks, |_| true)
        }
        Limiter::FixedWindow(state) => {
            exercise_with::<FixedWindowAlgorithm>(state, &window_params(), clocks, |_| true)
        }
        Limiter::SlidingLog(state) => {
            exercise_with::<SlidingLogAlgorithm>(state, &log_params(), clocks, |_| true)
        }
        Limiter::Gcra(state) => {
            // (max_burst, count, period s, quantity): intervals of 1 ns, 2 s and 100 years.
            let params = [
                (0, 1_000_000_000, 1, 1),
                (15, 1, 2, 1),
                (15, 1, 2, 0),
                (15, 1, 2, -3),
                (15, 1, 2, i64::MIN),
                (0, 1, MAX_TOLERANCE_NS / 1_000_000_000, i64::MAX),
                (MAX_TOLERANCE_NS - 1, 1_000_000_000, 1, 2),
            ]
            .map(|(burst, count, period, quantity)| {
                GcraParams::new(burst, count, period, quantity).unwrap()
            });
            // redis-cell reports an infinite `remaining` (i64::MAX) for intervals under 1 µs,
            // and CL.THROTTLE copies it: only longer intervals keep remaining ≤ limit.
            exercise_with::<GcraAlgorithm>(state, &params, clocks, |params| {
                params.interval_ns() >= 1_000
            });
        }
        Limiter::Concurrency(state) => {
            exercise_with::<ConcurrencyAlgorithm>(state, &holder_params(state), clocks, |_| true)
        }
    }
}

/// Acquires by a new holder and by every stored one, at several limits and ttls, and peeks.
fn holder_params(state: &Concurrency) -> Vec<ConcurrencyParams> {
    let mut ids: Vec<HolderId> = state
        .holders()
        .take(8)
        .filter_map(|(_, id)| HolderId::new(id).ok())
        .collect();
    ids.push(HolderId::new(b"new holder").unwrap());
    let mut params = Vec::new();
    for (limit, ttl_us) in [(1, MIN_TTL_US as u64), (3, 60_000_000), (100_000, MAX_TTL_US as u64)] {
        let base = ConcurrencyParams::new(limit, ttl_us, MAX_STORED_HOLDERS).unwrap();
        params.push(base);
        params.extend(ids.iter().map(|id| base.with_holder(*id)));
    }
    params
}

fn window_params() -> Vec<WindowParams> {
    [
        (1, MIN_WINDOW_US, 1),
        (u64::from(u32::MAX), MAX_WINDOW_US, 1),
        (10, 60_000_000, 3),
        (5, 1_000, 10),
    ]
    .map(|(limit, window, cost)| WindowParams::new(limit, window, cost).unwrap())
    .to_vec()
}

fn log_params() -> Vec<SlidingLogParams> {
    [
        (1, MIN_WINDOW_US, 1),
        (10_000, MAX_WINDOW_US, 1),
        (100, 60_000_000, 7),
        (3, 1_000, 5),
    ]
    .map(|(limit, window, cost)| SlidingLogParams::new(limit, window, cost, 10_000).unwrap())
    .to_vec()
}

/// Encodes a state for RDB and decodes it back: it must be accepted and equal.
fn check_state_round_trips<S: KindState + PartialEq + std::fmt::Debug>(state: &S) {
    let encoded = encode(state.as_limiter());
    let decoded = decode(encoded.as_bytes()).unwrap_or_else(|error| {
        panic!("a state the algorithm produced is refused ({error}): {state:?}")
    });
    assert_eq!(decoded, state.clone().into_limiter());
}

fn exercise_with<A>(
    state: &A::State,
    params: &[A::Params],
    clocks: &[i64],
    remaining_bounded: fn(&A::Params) -> bool,
) where
    A: KindAlgorithm,
    A::State: PartialEq + std::fmt::Debug,
    A::Change: Clone + std::fmt::Debug,
{
    for params in params {
        for &now in clocks {
            let evaluation = A::evaluate(Some(state), params, now);
            check_fields(&evaluation, true, remaining_bounded(params));
            commit::<A>(state, evaluation);
            let evaluation = A::refund(Some(state), params, now);
            check_fields(&evaluation, false, remaining_bounded(params));
            commit::<A>(state, evaluation);
        }
    }
}

fn check_fields<C>(evaluation: &Evaluation<C>, acquire: bool, remaining_bounded: bool) {
    let [allowed, remaining, retry, reset, limit] = evaluation.decision.reply_fields();
    assert!(allowed == 0 || allowed == 1);
    assert!(limit >= 1);
    assert!(remaining >= 0);
    if remaining_bounded {
        assert!(remaining <= limit, "remaining {remaining} of {limit}");
    }
    assert!(retry >= -1 && reset >= 0);
    if acquire {
        // Admitted calls may be told to wait (pacing); denied ones always are.
        assert!(
            allowed == 1 || retry != 0,
            "retry {retry} when allowed = {allowed}"
        );
        // Admitted calls may write nothing (CL.THROTTLE with a quantity of 0 or below).
        assert!(evaluation.commit.is_none() || allowed == 1);
    }
}

/// What the glue does with a commit: apply it, store the state (RDB) and propagate the
/// effect (replicas, AOF); each must be accepted by the matching decoder.
fn commit<A>(state: &A::State, evaluation: Evaluation<A::Change>)
where
    A: KindAlgorithm,
    A::State: PartialEq + std::fmt::Debug,
    A::Change: Clone + std::fmt::Debug,
{
    let Some(commit) = evaluation.commit else {
        return;
    };
    assert!(
        commit.expires_at_ms > 0,
        "expiry {} for {:?}",
        commit.expires_at_ms,
        commit.change
    );
    let mut after = state.clone();
    A::apply(&mut after, commit.change.clone());
    check_state_round_trips(&after);
    let effect = encode_effect(commit.expires_at_ms, &A::erase(commit.change.clone()));
    match decode_effect(effect.as_bytes()) {
        Ok(EffectRecord { expires_at_ms, .. }) => assert_eq!(expires_at_ms, commit.expires_at_ms),
        Err(error) => panic!(
            "a replica would refuse the effect ({error}): {:?}",
            commit.change
        ),
    }
}
