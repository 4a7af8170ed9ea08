//! Criterion benches of the pure core: nanoseconds per decision for every algorithm, on a
//! fresh key (no state), in steady state (an existing limiter admitting calls as the clock
//! advances, as whole calls and as partial grants) and denied; plus argument parsing and the state codec, which also sit on the
//! command's hot path.
//!
//! Run with `make bench-criterion` (`cargo bench -p redis-ratelimit-wire --bench algorithms`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    missing_docs
)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use redis_ratelimit_core::concurrency::{
    Concurrency, ConcurrencyAlgorithm, ConcurrencyParams, HolderId,
};
use redis_ratelimit_core::fixed_window::FixedWindowAlgorithm;
use redis_ratelimit_core::gcra::GcraAlgorithm;
use redis_ratelimit_core::grant::{self, Grant};
use redis_ratelimit_core::kinds::KindState;
use redis_ratelimit_core::sliding_log::SlidingLogAlgorithm;
use redis_ratelimit_core::sliding_window::SlidingWindowAlgorithm;
use redis_ratelimit_core::token_bucket::TokenBucketAlgorithm;
use redis_ratelimit_core::{Algorithm, Commit};
use redis_ratelimit_wire::args;
use redis_ratelimit_wire::codec;

const T0_US: i64 = 1_700_000_000_000_000;

/// A partial grant taking whatever is available, at least one unit.
const PARTIAL: Grant = Grant::Partial { min: 1 };

/// Benches one algorithm: `admitting` allows every call (steady state), `denying` none.
fn bench_algorithm<A: Algorithm<State: KindState>>(
    c: &mut Criterion,
    name: &str,
    admitting: &A::Params,
    denying: &A::Params,
) {
    let mut group = c.benchmark_group(name);
    group.bench_function("fresh key", |b| {
        b.iter(|| A::evaluate(None, black_box(admitting), black_box(T0_US)))
    });

    // Steady state: each iteration admits a call 1 µs after the previous one and applies it,
    // as the glue does for an existing key.
    let created = A::evaluate(None, admitting, T0_US)
        .commit
        .expect("admitted");
    let mut state = A::create(created.change);
    let mut now = T0_US;
    group.bench_function("existing, admitted", |b| {
        b.iter(|| {
            now += 1;
            let evaluation = A::evaluate(Some(&state), black_box(admitting), now);
            if let Some(Commit { change, .. }) = evaluation.commit {
                A::apply(&mut state, change);
            }
            evaluation.decision
        })
    });

    // The same traffic as a partial grant (`Grant::Partial { min: 1 }`): the closed-form
    // grantable, then the evaluation of the granted units.
    let mut granting = A::create(A::evaluate(None, admitting, T0_US).commit.unwrap().change);
    let mut now = T0_US;
    group.bench_function("existing, partial grant", |b| {
        b.iter(|| {
            now += 1;
            let granted = grant::evaluate::<A>(Some(&granting), black_box(admitting), PARTIAL, now);
            if let Some(Commit { change, .. }) = granted.evaluation.commit {
                A::apply(&mut granting, change);
            }
            granted.units
        })
    });

    let mut drained = A::create(
        A::evaluate(None, denying, T0_US)
            .commit
            .expect("admitted")
            .change,
    );
    while let Some(commit) = A::evaluate(Some(&drained), denying, T0_US).commit {
        A::apply(&mut drained, commit.change);
    }
    group.bench_function("existing, denied", |b| {
        b.iter(|| A::evaluate(Some(black_box(&drained)), black_box(denying), T0_US).decision)
    });

    group.bench_function("encode + decode", |b| {
        b.iter_batched(
            || state.clone(),
            |state| codec::decode(codec::encode(state.as_limiter()).as_bytes()).unwrap(),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn algorithms(c: &mut Criterion) {
    let slow = |args: &[&[u8]]| args::quota::token_bucket(args).unwrap();
    bench_algorithm::<TokenBucketAlgorithm>(
        c,
        "token bucket",
        &slow(&[b"1000000000", b"1000"]),
        &slow(&[b"1", b"0.001"]),
    );
    let window = |args: &[&[u8]]| args::quota::window(args).unwrap();
    let (admitting, denying) = (window(&[b"1000000000", b"60"]), window(&[b"1", b"60"]));
    bench_algorithm::<SlidingWindowAlgorithm>(c, "sliding window", &admitting, &denying);
    bench_algorithm::<FixedWindowAlgorithm>(c, "fixed window", &admitting, &denying);
    let log = |args: &[&[u8]]| args::quota::sliding_log(args, 10_000_000).unwrap();
    bench_algorithm::<SlidingLogAlgorithm>(
        c,
        "sliding log (1000 in window)",
        &log(&[b"1000", b"0.001"]),
        &log(&[b"1", b"60"]),
    );
    let throttle = |args: &[&[u8]]| args::throttle(args).unwrap();
    bench_algorithm::<GcraAlgorithm>(
        c,
        "gcra (CL.THROTTLE)",
        &throttle(&[b"1000000", b"1000000", b"1"]),
        &throttle(&[b"0", b"1", b"60"]),
    );
}

/// The concurrency limit on a key with 100 live holders (36-byte ids, as UUIDs), limit 1000:
/// acquires and releases, renewals, a denial (limit 100) and a peek. There is no codec for it
/// yet, so no encode + decode.
fn concurrency(c: &mut Criterion) {
    const HOLDERS: usize = 100;
    let id =
        |i: usize| HolderId::new(format!("{i:08}-0000-4000-8000-000000000000").as_bytes()).unwrap();
    let limit = |limit: u64| ConcurrencyParams::new(limit, 60_000_000, 1_000).unwrap();
    let mut state = Concurrency::default();
    for i in 0..HOLDERS {
        let acquired = ConcurrencyAlgorithm::evaluate(
            Some(&state),
            &limit(1_000).with_holder(id(i)),
            T0_US + i as i64,
        );
        ConcurrencyAlgorithm::apply(&mut state, acquired.commit.unwrap().change);
    }
    let (newcomer, renewing) = (id(HOLDERS), id(HOLDERS / 2));
    let acquire = limit(1_000).with_holder(newcomer);
    let renew = limit(1_000).with_holder(renewing);
    let denied = limit(HOLDERS as u64).with_holder(newcomer);
    let mut group = c.benchmark_group("concurrency (100 holders)");
    let now = T0_US + 1_000;
    group.bench_function("acquire (new holder)", |b| {
        b.iter(|| ConcurrencyAlgorithm::evaluate(Some(&state), black_box(&acquire), now))
    });
    group.bench_function("acquire + apply, release + apply", |b| {
        b.iter(|| {
            let acquired = ConcurrencyAlgorithm::evaluate(Some(&state), black_box(&acquire), now);
            ConcurrencyAlgorithm::apply(&mut state, acquired.commit.unwrap().change);
            let released = ConcurrencyAlgorithm::release(Some(&state), &newcomer, now).unwrap();
            ConcurrencyAlgorithm::apply(&mut state, released.change);
        })
    });
    let mut renewed_at = now;
    group.bench_function("renew + apply", |b| {
        b.iter(|| {
            renewed_at += 1;
            let renewal =
                ConcurrencyAlgorithm::evaluate(Some(&state), black_box(&renew), renewed_at);
            ConcurrencyAlgorithm::apply(&mut state, renewal.commit.unwrap().change);
        })
    });
    group.bench_function("acquire, partial grant", |b| {
        b.iter(|| {
            grant::evaluate::<ConcurrencyAlgorithm>(Some(&state), black_box(&acquire), PARTIAL, now)
                .units
        })
    });
    group.bench_function("denied (full)", |b| {
        b.iter(|| ConcurrencyAlgorithm::evaluate(Some(&state), black_box(&denied), now).decision)
    });
    group.finish();
}

fn parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("argument parsing");
    group.bench_function("token bucket (integer rate)", |b| {
        b.iter(|| args::quota::token_bucket(black_box(&[b"1000000", b"100"])).unwrap())
    });
    group.bench_function("token bucket (decimal rate)", |b| {
        b.iter(|| args::quota::token_bucket(black_box(&[b"1000000", b"0.001"])).unwrap())
    });
    group.bench_function("window", |b| {
        b.iter(|| args::quota::window(black_box(&[b"1000", b"86400"])).unwrap())
    });
    group.finish();
}

criterion_group!(benches, algorithms, concurrency, parsing);
criterion_main!(benches);
