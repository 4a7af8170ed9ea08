//! The limiter's behaviour on the in-memory store: grouping and refunds, leases, the deny
//! cache, every fallback mode and the circuit breaker, metrics. No server needed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis_ratelimit_client::store::{Capabilities, MemoryStore, Store, StoreBackend};
use redis_ratelimit_client::{
    Algorithm, BreakerConfig, CheckError, FakeClock, Fallback, Inputs, Job, JobLimit, Lease, Limit,
    Outcome, Policy, Profile, RateLimiter, Replicas, Source,
};
use redis_ratelimit_testkit::server::wait_until_async;

const HOUR: Duration = Duration::from_secs(3600);

fn bucket(capacity: u64) -> Algorithm {
    Algorithm::token_bucket(capacity, HOUR).unwrap()
}

fn limit(name: &str, capacity: u64, key: &str) -> Limit {
    Limit::new(name, bucket(capacity), key).unwrap()
}

fn user(name: &str) -> Inputs {
    Inputs::new().with("user", name)
}

/// A policy with a per-user limit and a global one, whose keys are in different slots.
fn two_slot_policy(per_user: u64, global: u64) -> Policy {
    Policy::builder("api")
        .limit(limit("global", global, "rl:{{global}}"))
        .limit(limit("per-user", per_user, "rl:{{{user}}}"))
        .build()
        .unwrap()
}

fn limiter_on(store: &Arc<MemoryStore>, policy: Policy) -> RateLimiter {
    RateLimiter::builder_shared(Arc::clone(store) as Arc<dyn Store>)
        .policy(policy)
        .build()
        .unwrap()
}

#[tokio::test]
async fn one_atomic_call_for_the_whole_policy_on_a_single_server() {
    let store = Arc::new(MemoryStore::new());
    let limiter = limiter_on(&store, two_slot_policy(2, 10));
    for _ in 0..2 {
        let decision = limiter.check("api", &user("ann")).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.source, Source::Store(StoreBackend::Memory));
    }
    assert_eq!(
        store.calls(),
        2,
        "one store call per check, both limits in it"
    );
    let denied = limiter.check("api", &user("ann")).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.binding_limit().unwrap().name.as_ref(), "per-user");
    let global = |decision: &redis_ratelimit_client::Decision| {
        decision
            .limits
            .iter()
            .find(|l| &*l.name == "global")
            .unwrap()
            .remaining
    };
    assert_eq!(
        global(&denied),
        8,
        "the fields show the global limit as it stands"
    );
    // The denied call charged nothing: Bob's next call finds 8 global units and takes one.
    let bob = limiter.check("api", &user("bob")).await.unwrap();
    assert_eq!(
        bob.limits
            .iter()
            .find(|l| &*l.name == "global")
            .unwrap()
            .remaining,
        7
    );
    let violated: Vec<&str> = denied.violated().collect();
    assert_eq!(violated, ["per-user"]);
}

#[tokio::test]
async fn groups_in_different_slots_run_most_specific_first_and_refund_on_denial() {
    let store = Arc::new(MemoryStore::new().clustered());
    // Global allows 3 in total, each user 2.
    let limiter = limiter_on(&store, two_slot_policy(2, 3));
    assert!(limiter.check("api", &user("ann")).await.unwrap().allowed);
    assert!(limiter.check("api", &user("ann")).await.unwrap().allowed);
    assert_eq!(store.calls(), 4, "two groups, two calls per check");
    // Ann is over her own limit: the per-user group (more specific) denies first and the
    // global group is not called at all.
    let denied = limiter.check("api", &user("ann")).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(store.calls(), 5);
    assert_eq!(denied.limits.len(), 1);
    // Bob passes his limit but the global one is exhausted after one more: the later
    // global denial refunds Bob's per-user unit.
    assert!(limiter.check("api", &user("bob")).await.unwrap().allowed);
    let denied = limiter.check("api", &user("bob")).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.binding_limit().unwrap().name.as_ref(), "global");
    let per_user = denied
        .limits
        .iter()
        .find(|l| &*l.name == "per-user")
        .unwrap();
    assert_eq!(per_user.remaining, 1, "the view shows the refund");
    // Proof of the refund: with the global limit out of the way (a policy with Bob's limit
    // alone, same key), Bob still has exactly one unit.
    let alone = Policy::builder("bob-only")
        .limit(limit("per-user", 2, "rl:{{{user}}}"))
        .build()
        .unwrap();
    let peek = limiter_on(&store, alone);
    assert!(peek.check("bob-only", &user("bob")).await.unwrap().allowed);
    assert!(!peek.check("bob-only", &user("bob")).await.unwrap().allowed);
}

#[tokio::test]
async fn without_rl_multi_every_limit_is_its_own_call() {
    let store = Arc::new(MemoryStore::new().with_capabilities(Capabilities {
        multi: false,
        partial: false,
    }));
    let limiter = limiter_on(&store, two_slot_policy(5, 1));
    assert!(limiter.check("api", &user("ann")).await.unwrap().allowed);
    assert_eq!(store.calls(), 2);
    let denied = limiter.check("api", &user("ann")).await.unwrap();
    assert!(!denied.allowed);
    // per-user (charged first), global (denied), refund of per-user.
    assert_eq!(store.calls(), 5);
    let per_user = denied
        .limits
        .iter()
        .find(|l| &*l.name == "per-user")
        .unwrap();
    assert_eq!(per_user.remaining, 4);
}

#[tokio::test]
async fn a_denial_is_remembered_until_its_retry_after() {
    let store = Arc::new(MemoryStore::new());
    let policy = per_user_policy(1);
    let limiter = limiter_on(&store, policy);
    assert!(limiter.check("api", &user("ann")).await.unwrap().allowed);
    let denied = limiter.check("api", &user("ann")).await.unwrap();
    assert_eq!(
        (denied.allowed, denied.source),
        (false, Source::Store(StoreBackend::Memory))
    );
    let calls = store.calls();
    let cached = limiter.check("api", &user("ann")).await.unwrap();
    assert_eq!(
        (cached.allowed, cached.source),
        (false, Source::Cache(StoreBackend::Memory))
    );
    assert_eq!(store.calls(), calls, "no store call for a cached denial");
    assert!(cached.retry_after.unwrap() <= denied.retry_after.unwrap());
    assert!(cached.retry_after.unwrap() > Duration::from_secs(3000));
    // Another key is not affected.
    assert!(limiter.check("api", &user("bob")).await.unwrap().allowed);
}

#[tokio::test]
async fn a_cost_above_a_limit_is_never_admitted() {
    let store = Arc::new(MemoryStore::new());
    let policy = per_user_policy(5);
    let limiter = limiter_on(&store, policy);
    let decision = limiter.check_cost("api", &user("ann"), 6).await.unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.retry_after, None);
}

#[tokio::test]
async fn caller_mistakes_are_errors_not_decisions() {
    let store = Arc::new(MemoryStore::new());
    let limiter = limiter_on(&store, two_slot_policy(1, 1));
    assert_eq!(
        limiter.check("nope", &user("ann")).await.unwrap_err(),
        CheckError::UnknownPolicy("nope".into())
    );
    let missing = limiter.check("api", &Inputs::new()).await.unwrap_err();
    assert_eq!(
        missing.to_string(),
        "the key template needs the input 'user'"
    );
    assert_eq!(
        limiter
            .check_cost("api", &user("ann"), 0)
            .await
            .unwrap_err(),
        CheckError::ZeroCost
    );
    // The same mistakes, found at start-up without a store call.
    assert_eq!(
        limiter.validate("api", &Inputs::new()).unwrap_err(),
        missing
    );
    limiter.validate("api", &user("any")).unwrap();
    assert_eq!(limiter.policy("api").unwrap().inputs(), ["user"]);
    assert_eq!(store.calls(), 0);
}

fn leased_policy(capacity: u64, units: u64, lifetime: Duration) -> Policy {
    Policy::builder("api")
        .limit(limit("per-user", capacity, "rl:{user}"))
        .lease(Lease::new(units).max_units(units).lifetime(lifetime))
        .build()
        .unwrap()
}

#[tokio::test]
async fn leases_serve_most_requests_from_memory() {
    let store = Arc::new(MemoryStore::new());
    let limiter = limiter_on(&store, leased_policy(100, 10, Duration::from_secs(60)));
    let mut sources = Vec::new();
    for _ in 0..25 {
        let decision = limiter.check("api", &user("ann")).await.unwrap();
        assert!(decision.allowed);
        sources.push(decision.source);
    }
    assert_eq!(store.calls(), 3, "one claim per 10 requests");
    assert_eq!(
        sources
            .iter()
            .filter(|s| **s == Source::Store(StoreBackend::Memory))
            .count(),
        3
    );
    assert_eq!(
        sources
            .iter()
            .filter(|s| **s == Source::Lease(StoreBackend::Memory))
            .count(),
        22
    );
    // 25 spent, 5 leased; this check spends one more: 70 in the store + 4 in the lease.
    let decision = limiter.check("api", &user("ann")).await.unwrap();
    assert_eq!(decision.remaining(), 74);
}

#[tokio::test]
async fn a_partial_claim_takes_the_last_units() {
    let store = Arc::new(MemoryStore::new());
    let limiter = limiter_on(&store, leased_policy(13, 5, Duration::from_secs(60)));
    let mut admitted = 0;
    for _ in 0..20 {
        admitted += u64::from(limiter.check("api", &user("ann")).await.unwrap().allowed);
    }
    assert_eq!(admitted, 13, "claims of 5, 5, then the 3 left");
}

#[tokio::test]
async fn unspent_lease_units_are_refunded_after_the_lifetime() {
    let store = Arc::new(MemoryStore::new());
    let lifetime = Duration::from_millis(100);
    // The first replica's lease expires on its clock, moved by hand.
    let clock = FakeClock::new();
    let first = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(leased_policy(10, 8, lifetime))
        .clock(clock.clone())
        .build()
        .unwrap();
    let second = limiter_on(&store, leased_policy(10, 8, lifetime));
    assert!(first.check("api", &user("ann")).await.unwrap().allowed); // claims 8, 7 left leased
    // The other replica gets the 2 units the store still has, then is denied.
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += u64::from(second.check("api", &user("ann")).await.unwrap().allowed);
    }
    assert_eq!(
        admitted, 2,
        "units leased by the first replica are not available"
    );
    // Once the first replica's lease expires its 7 units go back to the store (at the
    // sweeper's next round, every half lifetime).
    clock.advance(lifetime);
    let policy_without_cache = Policy::builder("peek")
        .limit(limit("per-user", 10, "rl:{user}"))
        .deny_cache(false)
        .build()
        .unwrap();
    let peek = &limiter_on(&store, policy_without_cache);
    let refunded = wait_until_async(Duration::from_secs(5), || async move {
        let decision = peek.check("peek", &user("ann")).await.unwrap();
        if decision.allowed {
            assert_eq!(decision.remaining(), 6, "7 refunded, 1 taken by this check");
        }
        decision.allowed
    })
    .await;
    assert!(refunded, "the lease was never refunded");
}

#[tokio::test]
async fn release_leases_refunds_at_once() {
    let store = Arc::new(MemoryStore::new());
    let limiter = limiter_on(&store, leased_policy(10, 10, Duration::from_secs(60)));
    assert!(limiter.check("api", &user("ann")).await.unwrap().allowed);
    limiter.release_leases().await;
    let peek = limiter_on(
        &store,
        Policy::builder("peek")
            .limit(limit("per-user", 10, "rl:{user}"))
            .build()
            .unwrap(),
    );
    assert_eq!(
        peek.check("peek", &user("ann")).await.unwrap().remaining(),
        8
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_never_admit_more_than_the_quota() {
    let store = Arc::new(MemoryStore::new());
    let replicas: Vec<RateLimiter> = (0..4)
        .map(|_| limiter_on(&store, leased_policy(200, 7, Duration::from_secs(60))))
        .collect();
    let mut tasks = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        let replica = replica.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for request in 0..150 {
                // Two keys interleaved, so leases of both are outstanding at once.
                let name = if (request + index) % 2 == 0 {
                    "ann"
                } else {
                    "bob"
                };
                admitted += u64::from(replica.check("api", &user(name)).await.unwrap().allowed);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert!(admitted <= 400, "admitted {admitted} of two quotas of 200");
    assert!(
        admitted >= 400 - 2 * 4 * 7,
        "admitted {admitted}: too many units stuck in leases"
    );
}

/// Policy "api": "per-user", a limit of `capacity` on `rl:{user}`.
fn per_user_policy(capacity: u64) -> Policy {
    Policy::builder("api")
        .limit(limit("per-user", capacity, "rl:{user}"))
        .build()
        .unwrap()
}

fn failing_policy(fallback: Fallback, capacity: u64) -> Policy {
    Policy::builder("api")
        .limit(limit("per-user", capacity, "rl:{user}"))
        .fallback(fallback)
        .timeout(Duration::from_millis(20))
        .build()
        .unwrap()
}

#[tokio::test]
async fn fallback_open_admits_and_closed_denies() {
    let store = Arc::new(MemoryStore::new());
    store.set_down(true);
    let open = limiter_on(&store, failing_policy(Fallback::Open, 1));
    for _ in 0..3 {
        let decision = open.check("api", &user("ann")).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.source),
            (true, Source::Fallback)
        );
        assert_eq!(decision.outcome, Outcome::FallbackAllowed);
    }
    let closed = limiter_on(&store, failing_policy(Fallback::Closed, 100));
    let decision = closed.check("api", &user("ann")).await.unwrap();
    assert_eq!(
        (decision.allowed, decision.outcome),
        (false, Outcome::FallbackDenied)
    );
    assert!(decision.retry_after.unwrap() >= Duration::from_secs(1));
}

/// One of 4 replicas, its store down, falling back to its share of a limit of `capacity`.
fn one_of_4_on_a_store_down(capacity: u64) -> RateLimiter {
    let store = Arc::new(MemoryStore::new());
    store.set_down(true);
    RateLimiter::builder_shared(store as Arc<dyn Store>)
        .policy(failing_policy(Fallback::Local, capacity))
        .replicas(Replicas::fixed(4))
        .build()
        .unwrap()
}

#[tokio::test]
async fn fallback_local_enforces_this_replicas_share() {
    let limiter = one_of_4_on_a_store_down(30);
    let mut admitted = 0;
    for _ in 0..20 {
        let decision = limiter.check("api", &user("ann")).await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        admitted += u64::from(decision.allowed);
    }
    assert_eq!(admitted, 7, "30 / 4 rounded down");
    let decision = limiter.check("api", &user("ann")).await.unwrap();
    assert_eq!(
        decision.limits[0].quota, 7,
        "the fields show the share in force"
    );
}

/// One key checked by requests of several shapes (a service's per-user limit, asked alone
/// or with a per-route one; two policies sharing the key) has one share of its quota in a
/// fallback, whichever shape asks: the local states are the limiter's, by key.
#[tokio::test]
async fn a_key_has_one_local_share_whatever_checks_it() {
    let store = Arc::new(MemoryStore::new());
    store.set_down(true);
    let with_route = Policy::builder("api-route")
        .limit(limit("per-user", 5, "rl:{user}"))
        .limit(limit("per-route", 100, "rl:route:{user}"))
        .fallback(Fallback::Local)
        .timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    let profile = Profile::builder("jobs")
        .fallback(Fallback::Local)
        .timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(failing_policy(Fallback::Local, 5))
        .policy(with_route)
        .profile(profile)
        .build()
        .unwrap();
    let per_user = || JobLimit::new("per-user", "rl:ann", bucket(5));
    let mut admitted = 0;
    for round in 0..16 {
        let decision = match round % 4 {
            0 => limiter.check("api", &user("ann")).await.unwrap(),
            1 => limiter.check("api-route", &user("ann")).await.unwrap(),
            2 => limiter
                .check_job(&Job::new("jobs").limit(per_user()))
                .await
                .unwrap(),
            _ => limiter
                .check_job(&Job::new("jobs").limit(per_user()).limit(JobLimit::new(
                    "per-route",
                    "rl:route:ann",
                    bucket(100),
                )))
                .await
                .unwrap(),
        };
        assert_eq!(decision.source, Source::Fallback);
        admitted += u64::from(decision.allowed);
    }
    assert_eq!(
        admitted, 5,
        "one share of the per-user limit across four shapes"
    );
}

#[tokio::test]
async fn a_share_below_one_unit_admits_nothing_locally() {
    let limiter = one_of_4_on_a_store_down(3);
    assert!(!limiter.check("api", &user("ann")).await.unwrap().allowed);
}

#[tokio::test]
async fn a_slow_store_times_out_into_the_fallback_and_the_breaker_stops_calling_it() {
    let store = Arc::new(MemoryStore::new());
    store.set_delay(Duration::from_secs(5));
    // The breaker's period passes on the limiter's clock, moved by hand; the store calls'
    // timeouts are real.
    let clock = FakeClock::new();
    let open_for = Duration::from_secs(2);
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(failing_policy(Fallback::Local, 100))
        .breaker(BreakerConfig {
            failures: 3,
            open_for,
        })
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..10 {
        let started = Instant::now();
        let decision = limiter.check("api", &user("ann")).await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(decision.source, Source::Fallback);
        assert!(
            elapsed < Duration::from_millis(200),
            "answered in {elapsed:?}"
        );
        // The time the check took, on the limiter's clock too (each timeout is a failure
        // of its own, not one stall).
        clock.advance(elapsed);
    }
    assert_eq!(store.calls(), 3, "the breaker opened after 3 timeouts");
    assert!(limiter.store_unreachable());
    // The store recovers: after open_for a probe goes through and closes the circuit.
    store.set_delay(Duration::ZERO);
    assert_eq!(
        limiter.check("api", &user("ann")).await.unwrap().source,
        Source::Fallback,
        "still open"
    );
    clock.advance(open_for);
    assert_eq!(
        limiter.check("api", &user("ann")).await.unwrap().source,
        Source::Store(StoreBackend::Memory)
    );
    assert!(!limiter.store_unreachable());
}

#[tokio::test]
async fn a_store_refusal_is_an_error_outcome() {
    let store = Arc::new(MemoryStore::new());
    // Key "k" holds a fixed window; a token bucket on it is refused by the store.
    let window = Policy::builder("window")
        .limit(Limit::new("w", Algorithm::fixed_window(5, HOUR).unwrap(), "k").unwrap())
        .build()
        .unwrap();
    let bucket = Policy::builder("bucket")
        .limit(limit("b", 5, "k"))
        .fallback(Fallback::Open)
        .build()
        .unwrap();
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(window)
        .policy(bucket)
        .build()
        .unwrap();
    assert!(
        limiter
            .check("window", &Inputs::new())
            .await
            .unwrap()
            .allowed
    );
    let decision = limiter.check("bucket", &Inputs::new()).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Error);
    assert!(decision.allowed, "fallback open");
    assert!(!limiter.store_unreachable(), "a refusal is not an outage");
}

#[test]
fn metrics_count_decisions_by_outcome_source_and_backend() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let limiter = limiter_on(&store, leased_policy(3, 2, Duration::from_secs(60)));
            for _ in 0..5 {
                limiter.check("api", &user("ann")).await.unwrap();
            }
            store.set_down(true);
            limiter.check("api", &user("bob")).await.unwrap();
        });
    });
    let counts = super::series(&snapshotter);
    let get = |name: &str| counts.get(name).copied().unwrap_or(0.0);
    assert_eq!(
        get(
            "ratelimit_decisions_total{policy=api,limit=per-user,key_class=default,outcome=allowed,source=store,backend=memory}"
        ),
        2.0
    );
    assert_eq!(
        get(
            "ratelimit_decisions_total{policy=api,limit=per-user,key_class=default,outcome=allowed,source=lease,backend=memory}"
        ),
        1.0
    );
    assert_eq!(
        get(
            "ratelimit_decisions_total{policy=api,limit=per-user,key_class=default,outcome=denied,source=store,backend=memory}"
        ),
        1.0
    );
    assert_eq!(
        get(
            "ratelimit_decisions_total{policy=api,limit=per-user,key_class=default,outcome=denied,source=cache,backend=memory}"
        ),
        1.0
    );
    assert_eq!(
        get(
            "ratelimit_decisions_total{policy=api,limit=per-user,key_class=default,outcome=fallback_allowed,source=fallback,backend=none}"
        ),
        1.0
    );
    assert_eq!(get("ratelimit_lease_units_claimed_total{policy=api}"), 3.0);
    assert_eq!(
        get("ratelimit_store_errors_total{policy=api,kind=unavailable}"),
        1.0
    );
    assert!(get("ratelimit_store_latency_seconds{policy=api,op=claim}") >= 3.0);
    assert!(
        counts
            .keys()
            .all(|name| !name.contains("ann") && !name.contains("bob")),
        "no raw key in any label: {counts:?}"
    );
}

/// The decision metrics name the binding limit and the class of its keys, count the units
/// and the checks that left a limit near its quota, and give each limit's quota and window.
#[test]
fn metrics_name_the_limit_its_key_class_and_its_quota() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let minute = Duration::from_secs(60);
            let hour = Duration::from_secs(3_600);
            let api = Policy::builder("api")
                .key_class("user")
                .limit(
                    Limit::new(
                        "per-minute",
                        Algorithm::fixed_window(5, minute).unwrap(),
                        "m:{user}",
                    )
                    .unwrap(),
                )
                .limit(
                    Limit::new(
                        "per-hour",
                        Algorithm::fixed_window(100, hour).unwrap(),
                        "h:{user}",
                    )
                    .unwrap(),
                )
                .build()
                .unwrap();
            let closed = Policy::builder("closed")
                .limit(limit("per-user", 10, "c:{user}"))
                .fallback(Fallback::Closed)
                .build()
                .unwrap();
            let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
                .policy(api)
                .policy(closed)
                .build()
                .unwrap();
            for _ in 0..6 {
                limiter.check_cost("api", &user("ann"), 1).await.unwrap();
            }
            store.set_down(true);
            let denied = limiter.check("closed", &user("bob")).await.unwrap();
            assert!(!denied.allowed && denied.limits.is_empty());
        });
    });
    let series = super::series(&snapshotter);
    let get = |name: &str| series.get(name).copied().unwrap_or(-1.0);
    let of = |limit: &str| format!("policy=api,limit={limit},key_class=user");
    // Admitted: bound by the limit closest to running out; the 6th denied by per-minute.
    assert_eq!(
        get(&format!(
            "ratelimit_decisions_total{{{},outcome=allowed,source=store,backend=memory}}",
            of("per-minute")
        )),
        5.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_decisions_total{{{},outcome=denied,source=store,backend=memory}}",
            of("per-minute")
        )),
        1.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_decision_units_total{{{},outcome=allowed,source=store}}",
            of("per-minute")
        )),
        5.0
    );
    // Under 20 % of 5 left (0 units) once; per-hour never near.
    assert_eq!(
        get(&format!(
            "ratelimit_near_limit_total{{{}}}",
            of("per-minute")
        )),
        1.0
    );
    assert_eq!(
        get(&format!("ratelimit_near_limit_total{{{}}}", of("per-hour"))),
        -1.0
    );
    assert_eq!(
        get(&format!("ratelimit_limit_quota{{{}}}", of("per-minute"))),
        5.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_limit_window_seconds{{{}}}",
            of("per-minute")
        )),
        60.0
    );
    assert_eq!(
        get(&format!("ratelimit_limit_quota{{{}}}", of("per-hour"))),
        100.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_limit_window_seconds{{{}}}",
            of("per-hour")
        )),
        3_600.0
    );
    assert_eq!(get("ratelimit_fallback_mode{policy=api,mode=local}"), 1.0);
    assert_eq!(get("ratelimit_fallback_mode{policy=api,mode=open}"), 0.0);
    assert_eq!(
        get("ratelimit_fallback_mode{policy=closed,mode=closed}"),
        1.0
    );
    // A blanket fallback consulted no limit.
    assert_eq!(
        get(
            "ratelimit_decisions_total{policy=closed,limit=_none,key_class=default,outcome=fallback_denied,source=fallback,backend=none}"
        ),
        1.0
    );
}

/// `ratelimit_decisions_total{policy=api,...}` counted in a recorder, by its labels.
fn decisions_in(snapshot: metrics_util::debugging::Snapshot) -> Vec<(String, u64)> {
    let mut counted: Vec<(String, u64)> = snapshot
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "ratelimit_decisions_total")
        .filter_map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            match value {
                DebugValue::Counter(count) => Some((labels.join(","), count)),
                _ => None,
            }
        })
        .collect();
    counted.sort();
    counted
}

/// The limiter keeps its metrics as handles; a check under another recorder than the one
/// they were registered with (a recorder installed after the first checks, another test's
/// local one) is counted in the recorder in scope, as when each call built its labels.
#[test]
fn metrics_follow_the_recorder_in_scope() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let limiter = runtime.block_on(async {
        let limiter = limiter_on(&store, per_user_policy(100));
        // No recorder yet: counted nowhere (the facade's no-op recorder).
        limiter.check("api", &user("ann")).await.unwrap();
        limiter
    });
    let (first, second) = (DebuggingRecorder::new(), DebuggingRecorder::new());
    let (first_seen, second_seen) = (first.snapshotter(), second.snapshotter());
    for (recorder, checks) in [(&first, 2), (&second, 3), (&first, 1)] {
        metrics::with_local_recorder(recorder, || {
            runtime.block_on(async {
                for _ in 0..checks {
                    limiter.check("api", &user("ann")).await.unwrap();
                }
            });
        });
    }
    let allowed =
        "policy=api,limit=per-user,key_class=default,outcome=allowed,source=store,backend=memory"
            .to_string();
    assert_eq!(decisions_in(first_seen.snapshot()), [(allowed.clone(), 3)]);
    assert_eq!(decisions_in(second_seen.snapshot()), [(allowed, 3)]);
}

#[tokio::test]
async fn a_paced_limit_admits_on_a_schedule() {
    let store = Arc::new(MemoryStore::new());
    let queue = Limit::new(
        "queue",
        Algorithm::token_bucket(1, Duration::from_millis(100)).unwrap(),
        "q:{user}",
    )
    .unwrap()
    .max_wait(Duration::from_millis(500))
    .unwrap();
    let policy = Policy::builder("api")
        .limit(queue)
        .limit(limit("daily", 100, "d:{user}"))
        .build()
        .unwrap();
    let limiter = limiter_on(&store, policy);
    let mut waits = Vec::new();
    for _ in 0..6 {
        let decision = limiter.check("api", &user("ann")).await.unwrap();
        assert!(decision.allowed);
        waits.push(decision.wait.as_millis());
    }
    assert_eq!(waits[0], 0);
    for (index, wait) in waits.iter().enumerate().skip(1) {
        let expected = 100 * index as u128;
        // The schedule, less the time between calls (generous for a loaded machine).
        assert!((expected - 50..=expected).contains(wait), "waits {waits:?}");
    }
    // The queue is full: denied, with when a call would fit in the queue again.
    let denied = limiter.check("api", &user("ann")).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.binding_limit().unwrap().name.as_ref(), "queue");
    assert!(denied.retry_after.unwrap() > Duration::from_millis(50));
    // The paced limit is called on its own, the daily one in its own call.
    assert_eq!(store.calls(), 6 * 2 + 1);
}

fn in_flight_policy(slots: u64) -> Policy {
    Policy::builder("api")
        .limit(limit("per-user", 100, "r:{user}"))
        .limit(
            Limit::new(
                "in-flight",
                Algorithm::concurrency(slots, Duration::from_secs(30)).unwrap(),
                "f:{user}",
            )
            .unwrap(),
        )
        .fallback(Fallback::Local)
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap()
}

#[tokio::test]
async fn in_flight_slots_are_held_until_released() {
    let store = Arc::new(MemoryStore::new());
    let limiter = limiter_on(&store, in_flight_policy(2));
    let first = limiter.check("api", &user("ann")).await.unwrap();
    let second = limiter.check("api", &user("ann")).await.unwrap();
    assert!(first.allowed && second.allowed);
    let (first, second) = (first.in_flight.unwrap(), second.in_flight.unwrap());
    assert_ne!(
        first.holder(),
        second.holder(),
        "every request holds its own slot"
    );
    let full = limiter.check("api", &user("ann")).await.unwrap();
    assert!(!full.allowed);
    assert_eq!(full.binding_limit().unwrap().name.as_ref(), "in-flight");
    assert!(full.in_flight.is_none());
    // The refused request took nothing from the rate limit either.
    let rate = |decision: &redis_ratelimit_client::Decision| {
        decision
            .limits
            .iter()
            .find(|l| &*l.name == "per-user")
            .unwrap()
            .remaining
    };
    assert_eq!(rate(&full), 98);
    // A release makes room at once: a full in-flight limit is not remembered as a denial.
    limiter.release(&first).await;
    let third = limiter.check("api", &user("ann")).await.unwrap();
    assert!(third.allowed, "{third:?}");
    assert_eq!(third.source, Source::Store(StoreBackend::Memory));
    // Another user has slots of their own.
    assert!(limiter.check("api", &user("bob")).await.unwrap().allowed);
    limiter.release(&second).await;
    limiter.release(&third.in_flight.unwrap()).await;
    let after = limiter.check("api", &user("ann")).await.unwrap();
    let slots = after.limits.iter().find(|l| l.in_flight).unwrap();
    assert_eq!(slots.remaining, 1, "two free, one just taken");
}

#[tokio::test]
async fn in_flight_slots_fall_back_to_a_local_share_and_are_released_there() {
    let store = Arc::new(MemoryStore::new());
    store.set_down(true);
    let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .policy(in_flight_policy(4))
        .replicas(Replicas::fixed(2))
        .build()
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        let decision = limiter.check("api", &user("ann")).await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        if let Some(in_flight) = decision.in_flight {
            held.push(in_flight);
        }
    }
    assert_eq!(held.len(), 2, "4 slots over 2 replicas: 2 here");
    limiter.release(&held[0]).await;
    let decision = limiter.check("api", &user("ann")).await.unwrap();
    assert!(decision.allowed, "the local slot was released");
}

/// Denials reported for the fleet's top keys (here on the in-memory store) come back merged
/// by key, and the reporter exports the limit's concentration: one key took every denial.
#[test]
fn denials_are_reported_for_the_top_keys_and_their_concentration() {
    use redis_ratelimit_client::top::{TopKeys, TopQuery};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let share = "ratelimit_denied_top10_share{policy=api,limit=per-user}";
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let limiter = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
                .policy(
                    Policy::builder("api")
                        .limit(limit("per-user", 1, "rl:{user}"))
                        .build()
                        .unwrap(),
                )
                .top_keys(TopKeys {
                    report_every: Duration::from_millis(20),
                    ..TopKeys::default()
                })
                .build()
                .unwrap();
            // ann: 1 admitted, 4 denied (the store, then the deny cache); bob: admitted.
            for _ in 0..5 {
                limiter.check("api", &user("ann")).await.unwrap();
            }
            limiter.check("api", &user("bob")).await.unwrap();
            let mut top = Vec::new();
            for _ in 0..200 {
                top = limiter.top_denied(&TopQuery::new("api")).await.unwrap();
                let exported = super::series(&snapshotter).get(share).copied();
                if !top.is_empty() && exported == Some(1.0) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(top.len(), 1, "{top:?}");
            assert_eq!(
                (top[0].limit.as_str(), top[0].denials, top[0].bound),
                ("per-user", 4, 0)
            );
            let keys: Vec<(&str, u64, u64)> = top[0]
                .keys
                .iter()
                .map(|key| (key.key.as_str(), key.count, key.lower))
                .collect();
            assert_eq!(keys, [("rl:ann", 4, 4)]);
            assert_eq!(top[0].top10_share, 1.0);
        });
    });
    let series = super::series(&snapshotter);
    assert_eq!(series.get(share), Some(&1.0), "{series:?}");
    assert_eq!(
        series.get("ratelimit_denied_window{policy=api,limit=per-user}"),
        Some(&4.0)
    );
    assert!(
        series
            .get("ratelimit_top_reports_total{result=ok}")
            .is_some_and(|count| *count >= 1.0)
    );
}
