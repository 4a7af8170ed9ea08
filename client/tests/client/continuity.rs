//! The fallback continues from the store's last answer, and what it admitted is charged to
//! the store when it answers again; a stall is not an outage; requests waiting for a lease
//! claim take its result. On the in-memory store (no server needed).

use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_client::store::{MemoryStore, Store, StoreBackend};
use redis_ratelimit_client::{
    Algorithm, BreakerConfig, FakeClock, Fallback, Inputs, Lease, Limit, Policy, RateLimiter,
    Replicas, Source,
};
use redis_ratelimit_testkit::server::wait_until_async;

const HOUR: Duration = Duration::from_secs(3600);

fn policy(capacity: u64, lease: Option<Lease>) -> Policy {
    let mut builder = Policy::builder("api")
        .limit(
            Limit::new(
                "per-user",
                Algorithm::token_bucket(capacity, HOUR).unwrap(),
                "rl:{user}",
            )
            .unwrap(),
        )
        .fallback(Fallback::Local)
        .deny_cache(false)
        .timeout(Duration::from_millis(200));
    if let Some(lease) = lease {
        builder = builder.lease(lease);
    }
    builder.build().unwrap()
}

/// How long the breaker stays open after one failure.
const OPEN_FOR: Duration = Duration::from_millis(1);

/// A limiter on a fake clock (moved by hand past the breaker's period).
fn limiter(store: &Arc<MemoryStore>, policy: Policy, replicas: u64) -> (RateLimiter, FakeClock) {
    let clock = FakeClock::new();
    let limiter = RateLimiter::builder_shared(Arc::clone(store) as Arc<dyn Store>)
        .policy(policy)
        .replicas(Replicas::fixed(replicas))
        .breaker(BreakerConfig {
            failures: 1,
            open_for: OPEN_FOR,
        })
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, clock)
}

fn ann() -> Inputs {
    Inputs::new().with("user", "ann")
}

/// Checks until one comes from the store: the breaker probes once `open_for` has passed on
/// the limiter's clock.
async fn until_the_store_answers(
    limiter: &RateLimiter,
    clock: &FakeClock,
) -> redis_ratelimit_client::Decision {
    for _ in 0..3 {
        let decision = limiter.check("api", &ann()).await.unwrap();
        if decision.source != Source::Fallback {
            return decision;
        }
        clock.advance(OPEN_FOR);
    }
    panic!("the store never answered again");
}

#[tokio::test]
async fn the_fallback_starts_from_the_stores_last_answer_and_settles_with_it() {
    let store = Arc::new(MemoryStore::new());
    let (limiter, clock) = limiter(&store, policy(30, None), 3);
    for _ in 0..24 {
        assert!(limiter.check("api", &ann()).await.unwrap().allowed);
    }
    store.set_down(true);
    let mut admitted = 0;
    for _ in 0..10 {
        let decision = limiter.check("api", &ann()).await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        admitted += u64::from(decision.allowed);
    }
    assert_eq!(
        admitted, 2,
        "6 left in the store: this replica's part is 6 / 3"
    );
    store.set_down(false);
    // The first answer charges the store the 2 units first: 6 - 2 - 1 left.
    let decision = until_the_store_answers(&limiter, &clock).await;
    assert!(decision.allowed);
    assert_eq!(decision.limits[0].remaining, 3);
}

#[tokio::test]
async fn a_flapping_store_never_grants_an_exhausted_key_a_share() {
    let store = Arc::new(MemoryStore::new());
    let (limiter, clock) = limiter(&store, policy(30, None), 1);
    for _ in 0..30 {
        assert!(limiter.check("api", &ann()).await.unwrap().allowed);
    }
    let mut admitted = 0;
    for _ in 0..5 {
        store.set_down(true);
        for _ in 0..10 {
            admitted += u64::from(limiter.check("api", &ann()).await.unwrap().allowed);
        }
        store.set_down(false);
        let decision = until_the_store_answers(&limiter, &clock).await;
        admitted += u64::from(decision.allowed);
    }
    // A unit refills every 2 minutes: none in this test.
    assert_eq!(
        admitted, 0,
        "an exhausted key admitted {admitted} through flaps"
    );
}

#[tokio::test]
async fn a_flapping_store_grants_a_share_once() {
    let store = Arc::new(MemoryStore::new());
    let (limiter, clock) = limiter(&store, policy(30, None), 2);
    // A fresh key: the store says 29 left after the first request.
    assert!(limiter.check("api", &ann()).await.unwrap().allowed);
    let mut admitted = 1;
    for _ in 0..4 {
        store.set_down(true);
        for _ in 0..30 {
            admitted += u64::from(limiter.check("api", &ann()).await.unwrap().allowed);
        }
        store.set_down(false);
        admitted += u64::from(until_the_store_answers(&limiter, &clock).await.allowed);
    }
    // Episode 1 admits 29 / 2 = 14 locally, settled on recovery (29 - 14 - 1 = 14 left);
    // episode 2 admits 7 of them, and so on: every unit admitted came from the store.
    assert!(
        admitted <= 30,
        "{admitted} admitted by one replica of a quota of 30"
    );
    let left = limiter.check("api", &ann()).await.unwrap();
    assert_eq!(
        left.limits[0].remaining + u64::from(left.allowed) + admitted,
        30,
        "the store was charged every unit the fallback admitted"
    );
}

#[tokio::test]
async fn a_stall_of_the_store_is_not_an_outage_when_it_answers_since() {
    // One slow call among fast ones: it times out after others have answered, gets one
    // more timeout, and the breaker is not tripped.
    let store = Arc::new(MemoryStore::new());
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(
            Policy::builder("api")
                .limit(Limit::new("l", Algorithm::token_bucket(1000, HOUR).unwrap(), "k").unwrap())
                .timeout(Duration::from_millis(60))
                .build()
                .unwrap(),
        )
        .breaker(BreakerConfig {
            failures: 1,
            open_for: Duration::from_secs(60),
        })
        .build()
        .unwrap();
    store.set_delay(Duration::from_millis(90));
    let slow = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.check("api", &Inputs::new()).await.unwrap() })
    };
    // Faster calls once the slow one is in the store (which reads its delay on entering).
    let entered = {
        let store = &store;
        wait_until_async(Duration::from_secs(5), || async move { store.calls() >= 1 }).await
    };
    assert!(entered, "the slow call never reached the store");
    store.set_delay(Duration::ZERO);
    assert_eq!(
        limiter.check("api", &Inputs::new()).await.unwrap().source,
        Source::Store(StoreBackend::Memory)
    );
    let slow = slow.await.unwrap();
    assert_eq!(
        slow.source,
        Source::Store(StoreBackend::Memory),
        "the slow call was waited for"
    );
    assert!(!limiter.store_unreachable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_claim_take_its_result() {
    let store = Arc::new(MemoryStore::new());
    // Claims of 4, up to 16 when 16 requests wait; the store takes 30 ms per call.
    let (limiter, _clock) = limiter(&store, policy(1000, Some(Lease::new(4).max_units(16))), 1);
    store.set_delay(Duration::from_millis(30));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &ann()).await.unwrap() })
        })
        .collect();
    let mut sources = Vec::new();
    for task in tasks {
        let decision = task.await.unwrap();
        assert!(decision.allowed);
        sources.push(decision.source);
    }
    assert!(
        !sources.contains(&Source::Fallback),
        "a waiting request fell back: {sources:?}"
    );
    assert!(
        store.calls() <= 3,
        "{} store calls for 16 requests: claims did not batch",
        store.calls()
    );

    // An exhausted key: the claim's denial answers every request that waited for it.
    let exhausted = Arc::new(MemoryStore::new());
    let (limiter, _clock) = self::limiter(&exhausted, policy(2, Some(Lease::new(2))), 1);
    assert!(limiter.check("api", &ann()).await.unwrap().allowed);
    assert!(limiter.check("api", &ann()).await.unwrap().allowed);
    let before = exhausted.calls();
    exhausted.set_delay(Duration::from_millis(30));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &ann()).await.unwrap() })
        })
        .collect();
    for task in tasks {
        let decision = task.await.unwrap();
        assert!(!decision.allowed);
        assert_ne!(decision.source, Source::Fallback);
    }
    assert!(
        exhausted.calls() - before <= 2,
        "{} claims for one denial",
        exhausted.calls() - before
    );
}

#[tokio::test]
async fn past_max_tracked_keys_the_key_set_answered_longest_ago_starts_from_a_fresh_share() {
    let store = Arc::new(MemoryStore::new());
    let clock = FakeClock::new();
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(policy(30, None))
        .breaker(BreakerConfig {
            failures: 1,
            open_for: OPEN_FOR,
        })
        .clock(clock.clone())
        .max_tracked_keys(2)
        .build()
        .unwrap();
    let user = |name: &str| Inputs::new().with("user", name);
    // 24 of 30 spent by each; "ann" answered first, so longest ago once "cy" comes.
    for name in ["ann", "bob", "cy"] {
        for _ in 0..24 {
            assert!(limiter.check("api", &user(name)).await.unwrap().allowed);
        }
    }
    store.set_down(true);
    let mut admitted = std::collections::BTreeMap::new();
    for name in ["ann", "cy"] {
        for _ in 0..10 {
            let decision = limiter.check("api", &user(name)).await.unwrap();
            assert_eq!(decision.source, Source::Fallback);
            *admitted.entry(name).or_insert(0) += u64::from(decision.allowed);
        }
    }
    assert_eq!(
        admitted["cy"], 6,
        "cy's last answer is kept: its fallback continues from the 6 left"
    );
    assert_eq!(
        admitted["ann"], 10,
        "ann's was forgotten (the bound is 2): a fresh share of 30"
    );
}
