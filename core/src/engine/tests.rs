//! Unit tests of the engine, over states kept in a vector (as a caller keeps them).

use super::*;
use crate::decision::Retry;
use crate::kinds::Limiter;
use crate::number::Decimal;
use crate::testing::T0_US;
use crate::token_bucket::TokenBucketParams;
use crate::window::WindowParams;

/// A bucket of `capacity` tokens refilled at one per hour, for one unit.
fn bucket(capacity: u64) -> Quota {
    let rate = Decimal::parse_positive(b"0.0002").unwrap();
    Quota::TokenBucket(TokenBucketParams::new(capacity, rate, 1).unwrap())
}

fn window(limit: u64) -> Quota {
    Quota::FixedWindow(WindowParams::new(limit, 60_000_000, 1).unwrap())
}

/// Limiter states by key index, written as a caller of the engine writes them.
#[derive(Default)]
struct States(Vec<Option<Limiter>>);

impl States {
    fn with_keys(count: usize) -> Self {
        States(vec![None; count])
    }

    fn held(&self) -> Vec<Option<LimiterRef<'_>>> {
        self.0
            .iter()
            .map(|state| state.as_ref().map(Limiter::as_ref))
            .collect()
    }

    fn write(&mut self, index: usize, commit: Commit<Change>) {
        let slot = &mut self.0[index];
        match slot.as_mut() {
            Some(limiter) => commit.change.apply(limiter.as_mut()).unwrap(),
            None => *slot = Some(commit.change.create()),
        }
    }

    /// Runs a multi-limit call and, when it admits, makes its writes.
    fn call(
        &mut self,
        quotas: &[Quota],
        weights: &[u64],
        cost: u64,
        grant: Grant,
    ) -> (Verdict, Vec<Decision>) {
        let mut buffers = Buffers::default();
        let limits = Limits {
            quotas,
            weights,
            cost,
            grant,
        };
        let verdict = acquire_many(&self.held(), limits, T0_US, &mut buffers).unwrap();
        let commits: Vec<_> = buffers.take_commits().collect();
        if verdict.bound.decision.allowed {
            for (index, commit) in commits.into_iter().enumerate() {
                if let Some(commit) = commit {
                    self.write(index, commit);
                }
            }
        } else {
            assert!(commits.is_empty(), "a denial writes nothing");
        }
        (verdict, buffers.per_limit().to_vec())
    }
}

#[test]
fn every_limit_admits_or_none_is_charged() {
    let mut states = States::with_keys(2);
    let quotas = [bucket(3), bucket(100)];
    for _ in 0..3 {
        let (verdict, _) = states.call(&quotas, &[1, 1], 1, Grant::Whole);
        assert_eq!(verdict.units, 1);
    }
    let (verdict, per_limit) = states.call(&quotas, &[1, 1], 1, Grant::Whole);
    assert_eq!((verdict.units, verdict.bound.binding), (0, 0));
    assert!(!verdict.bound.decision.allowed);
    assert!(
        per_limit[1].allowed,
        "the second limit alone would have admitted"
    );
    let second = acquire(states.held()[1], &bucket(100), Grant::Whole, T0_US).unwrap();
    assert_eq!(
        second.evaluation.decision.remaining, 96,
        "the denial charged nothing"
    );
}

#[test]
fn a_partial_grant_takes_what_every_limit_can_give() {
    let mut states = States::with_keys(2);
    let quotas = [bucket(10), bucket(20)];
    let partial = Grant::Partial { min: 1 };
    let (verdict, per_limit) = states.call(&quotas, &[1, 3], 8, partial);
    assert_eq!(verdict.units, 6, "20 tokens give 6 units of weight 3");
    assert_eq!((per_limit[0].remaining, per_limit[1].remaining), (4, 2));
    let (verdict, _) = states.call(&quotas, &[1, 3], 8, partial);
    assert_eq!((verdict.units, verdict.bound.binding), (0, 1));
    assert!(matches!(verdict.bound.decision.retry, Retry::AfterMs(ms) if ms > 0));
}

#[test]
fn an_admitted_call_binds_on_the_fewest_calls_left() {
    let mut states = States::with_keys(3);
    let (verdict, _) = states.call(
        &[bucket(100), bucket(10), bucket(10)],
        &[1; 3],
        1,
        Grant::Whole,
    );
    assert_eq!(
        (verdict.units, verdict.bound.binding),
        (1, 1),
        "ties go to the lowest index"
    );
    assert_eq!(verdict.bound.decision.remaining, 9);
}

#[test]
fn a_denial_resets_when_every_limit_as_it_stands_is_unused() {
    let mut states = States::with_keys(2);
    let quotas = [window(1), bucket(100)];
    states.call(&quotas, &[1, 1], 1, Grant::Whole);
    let (verdict, per_limit) = states.call(&quotas, &[1, 1], 1, Grant::Whole);
    assert!(!verdict.bound.decision.allowed);
    // The bucket holds 99 of 100 tokens: full again in one refill interval (5000 s), not in
    // the two its own view of the call reports (as if charged).
    assert_eq!(per_limit[1].reset_after_ms, 10_000_000);
    let window_reset = per_limit[0].reset_after_ms;
    assert!(window_reset <= 60_000);
    assert_eq!(verdict.bound.decision.reset_after_ms, 5_000_000);
}

#[test]
fn a_key_of_another_algorithm_is_refused_naming_both() {
    let mut states = States::with_keys(2);
    states.call(&[bucket(5), window(5)], &[1, 1], 1, Grant::Whole);
    let mut buffers = Buffers::default();
    let limits = Limits {
        quotas: &[bucket(5), bucket(5)],
        weights: &[1, 1],
        cost: 1,
        grant: Grant::Whole,
    };
    let refused = acquire_many(&states.held(), limits, T0_US, &mut buffers);
    let expected = Refused::KindMismatch {
        index: 1,
        held: Kind::FixedWindow,
        wanted: Kind::TokenBucket,
    };
    assert_eq!(refused, Err(expected));
    let partial = Limits {
        grant: Grant::Partial { min: 1 },
        ..limits
    };
    let refused = acquire_many(&states.held(), partial, T0_US, &mut buffers);
    assert_eq!(
        refused,
        Err(expected),
        "partial grants ask the same question first"
    );
    let held = states.held()[1];
    let single = Refused::KindMismatch {
        index: 0,
        held: Kind::FixedWindow,
        wanted: Kind::TokenBucket,
    };
    assert_eq!(
        acquire(held, &bucket(5), Grant::Whole, T0_US).err(),
        Some(single)
    );
    assert_eq!(refund(held, &bucket(5), T0_US).err(), Some(single));
    let holder = HolderId::new(b"worker-1").unwrap();
    let release_refused = release(held, &holder, T0_US).err();
    assert!(matches!(
        release_refused,
        Some(Refused::KindMismatch {
            wanted: Kind::Concurrency,
            ..
        })
    ));
    let params = GcraParams::new(1, 1, 60, 1).unwrap();
    let throttle_refused = throttle(held, &params, T0_US).err();
    assert!(matches!(
        throttle_refused,
        Some(Refused::KindMismatch {
            wanted: Kind::Gcra,
            ..
        })
    ));
}

#[test]
fn a_call_without_limits_is_refused() {
    let limits = Limits {
        quotas: &[],
        weights: &[],
        cost: 1,
        grant: Grant::Whole,
    };
    let none: [Option<LimiterRef<'_>>; 0] = [];
    assert_eq!(
        acquire_many(&none, limits, T0_US, &mut Buffers::default()),
        Err(Refused::NoLimits)
    );
}

#[test]
fn releasing_a_missing_key_writes_nothing() {
    let holder = HolderId::new(b"worker-1").unwrap();
    assert_eq!(release(None, &holder, T0_US), Ok(None));
}

/// `acquire_as` after a `Quota::visit` (the module's single-key path) decides as `acquire`:
/// same decision, same write, and the same refusal of a key holding another algorithm.
#[test]
fn a_statically_typed_call_decides_as_the_type_erased_one() {
    use crate::kinds::{KindAlgorithm, KindState, QuotaVisitor};

    struct Typed<'a> {
        held: Option<LimiterRef<'a>>,
        grant: Grant,
        now_us: i64,
    }
    impl QuotaVisitor for Typed<'_> {
        type Output = Result<Granted<Change>, Refused>;
        fn visit<A: KindAlgorithm>(self, params: &A::Params) -> Self::Output {
            // What the module's value layer does with a key's value pointer.
            let held = match self.held {
                None => Ok(None),
                Some(limiter) if limiter.kind() == A::State::KIND => {
                    let state = match limiter {
                        LimiterRef::TokenBucket(state) => {
                            (state as &dyn std::any::Any).downcast_ref::<A::State>()
                        }
                        LimiterRef::FixedWindow(state) => {
                            (state as &dyn std::any::Any).downcast_ref::<A::State>()
                        }
                        _ => None,
                    };
                    Ok(state)
                }
                Some(limiter) => Err(limiter.kind()),
            };
            acquire_as::<A>(held, params, self.grant, self.now_us)
                .map(|granted| granted.map_change(A::erase))
        }
    }

    let quotas = [bucket(3), window(2)];
    let grants = [Grant::Whole, Grant::Partial { min: 1 }];
    for quota in &quotas {
        for grant in grants {
            let mut state: Option<Limiter> = None;
            for call in 0..5 {
                let now_us = T0_US + call * 1_000;
                let held = state.as_ref().map(Limiter::as_ref);
                let erased = acquire(held, quota, grant, now_us);
                let typed = quota.visit(Typed {
                    held,
                    grant,
                    now_us,
                });
                assert_eq!(typed, erased, "{quota:?} {grant:?} call {call}");
                if let Some(commit) = erased.unwrap().evaluation.commit {
                    match state.as_mut() {
                        Some(limiter) => commit.change.apply(limiter.as_mut()).unwrap(),
                        None => state = Some(commit.change.create()),
                    }
                }
            }
        }
    }
    // A bucket's key asked for a window: refused alike, naming both.
    let held = Some(Limiter::TokenBucket(
        acquire(None, &bucket(3), Grant::Whole, T0_US)
            .unwrap()
            .evaluation
            .commit
            .map(|commit| match commit.change {
                Change::TokenBucket(state) => state,
                _ => unreachable!(),
            })
            .unwrap(),
    ));
    let held = held.as_ref().map(Limiter::as_ref);
    let typed = window(2).visit(Typed {
        held,
        grant: Grant::Whole,
        now_us: T0_US,
    });
    assert_eq!(typed, acquire(held, &window(2), Grant::Whole, T0_US));
    assert!(matches!(typed, Err(Refused::KindMismatch { .. })));
}
