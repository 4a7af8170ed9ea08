//! Unit tests of the kinds table: its names, its facts, and the arms that refuse a key
//! holding another kind.

use super::*;
use crate::concurrency::HolderId;
use crate::number::Decimal;
use crate::testing::T0_US;

/// One quota of every kind, in [`Kind::ALL`] order, for one unit.
fn one_of_each() -> Vec<Quota> {
    let rate = Decimal::parse_positive(b"2").unwrap();
    let holder = HolderId::new(b"worker-1").unwrap();
    let slots = ConcurrencyParams::new(4, 30_000_000, 1_000).unwrap();
    vec![
        Quota::TokenBucket(TokenBucketParams::new(10, rate, 1).unwrap()),
        Quota::SlidingWindow(WindowParams::new(10, 60_000_000, 1).unwrap()),
        Quota::FixedWindow(WindowParams::new(10, 60_000_000, 1).unwrap()),
        Quota::SlidingLog(SlidingLogParams::new(10, 60_000_000, 1, 1_000).unwrap()),
        Quota::Gcra(Box::new(GcraParams::new(9, 10, 60, 1).unwrap())),
        Quota::Concurrency(Box::new(slots.with_holder(holder))),
    ]
}

#[test]
fn a_quota_is_as_small_as_a_token_bucket_s_parameters() {
    // What the engine and the glue move around per limit: the largest unboxed parameters
    // (a token bucket's 32 bytes) and the tag. GCRA's five fields and an in-flight limit's
    // holder are boxed.
    assert_eq!(std::mem::size_of::<TokenBucketParams>(), 32);
    assert_eq!(std::mem::size_of::<Quota>(), 40);
}

/// The limiter a key holds after one admitted call of `quota`.
fn limiter_after_one_call(quota: &Quota) -> Limiter {
    let granted = quota.evaluate(None, Grant::Whole, T0_US).unwrap();
    granted
        .evaluation
        .commit
        .expect("a first call is admitted")
        .change
        .create()
}

#[test]
fn the_table_lists_every_kind_once_in_byte_order() {
    let kinds: Vec<Kind> = one_of_each().iter().map(Quota::kind).collect();
    assert_eq!(kinds, Kind::ALL);
    for (byte, kind) in Kind::ALL.iter().enumerate() {
        assert_eq!(usize::from(*kind as u8), byte);
        assert_eq!(Kind::from_byte(*kind as u8), Some(*kind));
    }
    assert_eq!(
        Kind::from_byte(u8::try_from(Kind::ALL.len()).unwrap()),
        None
    );
}

#[test]
fn names_read_back() {
    for kind in Kind::ALL.iter().copied() {
        assert_eq!(Kind::from_config_name(kind.config_name()), Some(kind));
        assert_eq!(
            Kind::from_config_name(kind.short_name()),
            Some(kind),
            "an alias"
        );
        let name = kind.command_name().unwrap();
        assert_eq!(
            Kind::named(name.to_ascii_lowercase().as_bytes()),
            Some(kind)
        );
    }
    assert_eq!(
        Kind::from_config_name("Token_Bucket"),
        None,
        "config names are exact"
    );
    assert_eq!(Kind::from_config_name("TOKENBUCKET"), None);
    assert_eq!(Kind::named(b"token_bucket"), None);
    // The names configuration files already use never change; a kind added later is
    // checked by the loop above and needs no line here.
    let names: Vec<&str> = Kind::ALL.iter().map(|kind| kind.config_name()).collect();
    assert_eq!(
        names[..6],
        [
            "token_bucket",
            "sliding_window",
            "fixed_window",
            "sliding_log",
            "gcra",
            "concurrency"
        ]
    );
}

#[test]
fn a_key_of_another_kind_is_refused_naming_what_it_holds() {
    let quotas = one_of_each();
    let limiters: Vec<Limiter> = quotas.iter().map(limiter_after_one_call).collect();
    for quota in &quotas {
        for limiter in &limiters {
            let held = limiter.as_ref();
            let evaluated = quota.evaluate(Some(held), Grant::Whole, T0_US);
            let refunded = quota.refund(Some(held), T0_US);
            let grantable = quota.grantable(Some(held), 5, T0_US);
            if held.kind() == quota.kind() {
                assert!(evaluated.is_ok() && refunded.is_ok() && grantable.is_ok());
            } else {
                assert_eq!(evaluated.err(), Some(held.kind()), "{quota:?} on {held:?}");
                assert_eq!(refunded.err(), Some(held.kind()));
                assert_eq!(grantable.err(), Some(held.kind()));
            }
        }
    }
}

#[test]
fn a_change_or_state_of_another_kind_is_handed_back() {
    let quotas = one_of_each();
    for quota in &quotas {
        let change = quota
            .evaluate(None, Grant::Whole, T0_US)
            .unwrap()
            .evaluation
            .commit
            .unwrap()
            .change;
        for target in &quotas {
            let mut limiter = limiter_after_one_call(target);
            let applied = change.clone().apply(limiter.as_mut());
            let replacement = limiter_after_one_call(quota);
            let stored = replacement.clone().store_into(limiter.as_mut());
            if target.kind() == quota.kind() {
                assert_eq!(applied, Ok(()));
                assert_eq!(stored, Ok(()));
                assert_eq!(limiter, replacement);
            } else {
                assert_eq!(applied, Err(quota.kind()), "the change names its own kind");
                assert_eq!(stored, Err(replacement));
                assert_eq!(limiter.as_ref().kind(), target.kind(), "left as it was");
            }
        }
    }
}

#[test]
fn facts_are_the_algorithms() {
    let quotas = one_of_each();
    let advertised: Vec<u64> = quotas.iter().map(Quota::advertised_quota).collect();
    assert_eq!(advertised, [10, 10, 10, 10, 10, 4]);
    let windows: Vec<Duration> = quotas.iter().map(Quota::window).collect();
    let minute = Duration::from_secs(60);
    assert_eq!(
        windows,
        [
            Duration::from_secs(5),
            minute,
            minute,
            minute,
            minute,
            Duration::ZERO
        ]
    );
    let recoveries: Vec<Recovery> = quotas.iter().map(Quota::recovery).collect();
    assert_eq!(
        recoveries,
        [
            Recovery::Steady {
                interval_ns: 500_000_000
            },
            Recovery::Sliding,
            Recovery::AtReset,
            Recovery::Sliding,
            Recovery::Steady {
                interval_ns: 6_000_000_000
            },
            Recovery::OnRelease,
        ]
    );
}

#[test]
fn shares_never_add_up_to_more_than_the_quota() {
    for quota in one_of_each() {
        for replicas in [1, 2, 3, 4] {
            let share = quota.share(replicas).unwrap();
            assert_eq!(share.kind(), quota.kind());
            assert_eq!(share.cost(), quota.cost());
            assert!(share.advertised_quota() * replicas <= quota.advertised_quota());
            assert_eq!(
                share.advertised_quota(),
                quota.advertised_quota() / replicas
            );
            if let Recovery::Steady { interval_ns } = quota.recovery() {
                assert_eq!(
                    share.recovery(),
                    Recovery::Steady {
                        interval_ns: interval_ns * replicas
                    }
                );
            }
        }
        assert_eq!(quota.share(11), None, "less than one unit each");
    }
    assert_eq!(one_of_each()[0].share(0), one_of_each()[0].share(1));
}
