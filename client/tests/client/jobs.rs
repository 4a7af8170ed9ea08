//! Jobs (`RateLimiter::check_job`) on the in-memory store: limits in order in, statuses in
//! order out, all or nothing over the charged limits, probes read and never denying,
//! unequal charges, leases, the fallback, in-flight slots, and what is refused.

use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit_client::job::JobError;
use redis_ratelimit_client::store::{
    Acquire, BoxFuture, Capabilities, GroupGrant, MemoryStore, Refund, Store, StoreBackend,
    StoreError,
};
use redis_ratelimit_client::{
    Algorithm, CheckError, Decision, Fallback, Job, JobLimit, Lease, Profile, RateLimiter, Source,
};

const HOUR: Duration = Duration::from_secs(3600);

fn window(limit: u64) -> Algorithm {
    Algorithm::fixed_window(limit, HOUR).unwrap()
}

fn limiter(store: &Arc<MemoryStore>, profile: Profile) -> RateLimiter {
    RateLimiter::builder_shared(Arc::clone(store) as Arc<dyn Store>)
        .profile(profile)
        .build()
        .unwrap()
}

fn plain(store: &Arc<MemoryStore>) -> RateLimiter {
    limiter(store, Profile::builder("p").build().unwrap())
}

/// Each status as (name, allowed, remaining).
fn statuses(decision: &Decision) -> Vec<(&str, bool, u64)> {
    decision
        .limits
        .iter()
        .map(|limit| (&*limit.name, limit.allowed, limit.remaining))
        .collect()
}

#[tokio::test]
async fn statuses_come_back_in_the_order_given_and_a_denial_charges_nothing() {
    let store = Arc::new(MemoryStore::new());
    let limiter = plain(&store);
    let job = || {
        Job::new("p")
            .limit(JobLimit::new("wide", "k:wide", window(10)))
            .limit(JobLimit::new("narrow", "k:narrow", window(2)))
            .limit(JobLimit::new("mid", "k:mid", window(5)))
    };
    for expected in [(9, 1, 4), (8, 0, 3)] {
        let decision = limiter.check_job(&job()).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.source, Source::Store(StoreBackend::Memory));
        assert_eq!(
            statuses(&decision),
            [
                ("wide", true, expected.0),
                ("narrow", true, expected.1),
                ("mid", true, expected.2)
            ]
        );
    }
    let denied = limiter.check_job(&job()).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.binding_limit().unwrap().name.as_ref(), "narrow");
    assert_eq!(
        statuses(&denied),
        [("wide", true, 8), ("narrow", false, 0), ("mid", true, 3)],
        "the limits that would have admitted show what they still have"
    );
    assert_eq!(store.calls(), 3, "one call per job");
    let again = Job::new("p").limit(JobLimit::new("wide", "k:wide", window(10)));
    assert_eq!(
        statuses(&limiter.check_job(&again).await.unwrap()),
        [("wide", true, 7)],
        "the denial took nothing from the others"
    );
}

#[tokio::test]
async fn a_probe_reads_without_charging_and_never_denies() {
    let store = Arc::new(MemoryStore::new());
    let limiter = plain(&store);
    for _ in 0..5 {
        let job = Job::new("p").limit(JobLimit::new("h", "k:m1", window(5)));
        assert!(limiter.check_job(&job).await.unwrap().allowed);
    }
    // m1 is at its limit: probed, it is OK with nothing left; m2 is charged.
    let job = Job::new("p")
        .limit(JobLimit::new("h", "k:m1", window(5)).probe())
        .limit(JobLimit::new("h", "k:m2", window(5)));
    let decision = limiter.check_job(&job).await.unwrap();
    assert!(decision.allowed, "a probe at the limit is not over it");
    assert_eq!(statuses(&decision), [("h", true, 0), ("h", true, 4)]);
    assert_eq!(
        decision.binding_limit().unwrap().remaining,
        4,
        "probes never bind"
    );
    // A probe on a limit with units left shows them, untouched.
    let probes = Job::new("p")
        .limit(JobLimit::new("h", "k:m2", window(5)).probe())
        .limit(JobLimit::new("h", "k:m3", window(5)).probe());
    for _ in 0..2 {
        let decision = limiter.check_job(&probes).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(statuses(&decision), [("h", true, 4), ("h", true, 5)]);
    }
}

#[tokio::test]
async fn unequal_charges_are_taken_all_or_nothing() {
    let store = Arc::new(MemoryStore::new());
    let limiter = plain(&store);
    let job = |a: u64, b: u64| {
        Job::new("p")
            .limit(JobLimit::new("a", "k:a", window(10)).units(a))
            .limit(JobLimit::new("b", "k:b", window(10)).units(b))
    };
    let decision = limiter.check_job(&job(3, 7)).await.unwrap();
    assert_eq!(statuses(&decision), [("a", true, 7), ("b", true, 3)]);
    let denied = limiter.check_job(&job(1, 4)).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(statuses(&denied), [("a", true, 7), ("b", false, 3)]);
    let never = limiter.check_job(&job(11, 1)).await.unwrap();
    assert!(!never.allowed);
    assert_eq!(never.retry_after, None, "more than the limit can ever pass");
    assert_eq!(
        statuses(&limiter.check_job(&job(7, 3)).await.unwrap()),
        [("a", true, 0), ("b", true, 0)]
    );
}

#[tokio::test]
async fn leases_pay_for_jobs_that_charge_alike() {
    let store = Arc::new(MemoryStore::new());
    let profile = Profile::builder("leased")
        .lease(Lease::new(5).max_units(5).lifetime(HOUR))
        .build()
        .unwrap();
    let limiter = limiter(&store, profile);
    let job = Job::new("leased").limit(JobLimit::new("k", "k:leased", window(20)));
    let first = limiter.check_job(&job).await.unwrap();
    assert_eq!(first.source, Source::Store(StoreBackend::Memory));
    assert_eq!(
        first.limits[0].remaining, 19,
        "the claimed units count as left"
    );
    let second = limiter.check_job(&job).await.unwrap();
    assert_eq!(second.source, Source::Lease(StoreBackend::Memory));
    assert_eq!(store.calls(), 1);
    // A probe must read the store: such a job is not leased.
    let probed = Job::new("leased")
        .limit(JobLimit::new("k", "k:leased", window(20)))
        .limit(JobLimit::new("other", "k:other", window(20)).probe());
    let decision = limiter.check_job(&probed).await.unwrap();
    assert_eq!(decision.source, Source::Store(StoreBackend::Memory));
    limiter.release_leases().await;
    let after = Job::new("leased").limit(JobLimit::new("k", "k:leased", window(20)).probe());
    assert_eq!(
        limiter.check_job(&after).await.unwrap().limits[0].remaining,
        17,
        "the unspent units went back: two admitted from the lease, one from the store"
    );
}

#[tokio::test]
async fn the_local_fallback_decides_jobs_probes_included() {
    let store = Arc::new(MemoryStore::new());
    let profile = Profile::builder("local")
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let limiter = limiter(&store, profile);
    store.set_down(true);
    let job = Job::new("local")
        .limit(JobLimit::new("k", "k:1", window(2)))
        .limit(JobLimit::new("seen", "k:2", window(3)).probe());
    let first = limiter.check_job(&job).await.unwrap();
    assert_eq!(first.source, Source::Fallback);
    assert!(first.allowed);
    assert_eq!(statuses(&first), [("k", true, 1), ("seen", true, 3)]);
    assert!(limiter.check_job(&job).await.unwrap().allowed);
    let third = limiter.check_job(&job).await.unwrap();
    assert!(!third.allowed, "the local share is spent");
    assert_eq!(statuses(&third)[1], ("seen", true, 3));

    let closed = RateLimiter::builder_shared(Arc::clone(&store) as Arc<dyn Store>)
        .profile(
            Profile::builder("closed")
                .fallback(Fallback::Closed)
                .timeout(Duration::from_millis(50))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let blanket = closed
        .check_job(&Job::new("closed").limit(JobLimit::new("k", "k:3", window(2))))
        .await
        .unwrap();
    assert!(!blanket.allowed);
    assert!(blanket.limits.is_empty(), "no limit was consulted");
}

#[tokio::test]
async fn in_flight_slots_of_a_job_are_released_through_its_profile() {
    let store = Arc::new(MemoryStore::new());
    // Leases do not apply to a job holding slots (a slot is one request's).
    let profile = Profile::builder("p")
        .lease(Lease::new(5).lifetime(HOUR))
        .build()
        .unwrap();
    let limiter = limiter(&store, profile);
    let slots = Algorithm::concurrency(1, HOUR).unwrap();
    let job = Job::new("p")
        .label("api")
        .limit(JobLimit::new("slots", "k:slots", slots))
        .limit(JobLimit::new("rate", "k:rate", window(10)));
    let held = limiter.check_job(&job).await.unwrap();
    assert!(held.allowed);
    assert_eq!(&*held.policy, "api", "the label names the decision");
    let in_flight = held.in_flight.clone().expect("a slot is held");
    assert_eq!(held.source, Source::Store(StoreBackend::Memory));
    let busy = limiter.check_job(&job).await.unwrap();
    assert!(!busy.allowed, "the one slot is taken");
    assert_eq!(busy.source, Source::Store(StoreBackend::Memory));
    limiter.release(&in_flight).await;
    assert!(limiter.check_job(&job).await.unwrap().allowed);
}

/// A store without a read-only call: the trait's default peek takes and gives back.
struct NoPeek(MemoryStore);

impl Store for NoPeek {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        self.0.acquire(request)
    }

    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.refund(request)
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn slot(&self, key: &str) -> Option<u16> {
        self.0.slot(key)
    }
}

#[tokio::test]
async fn a_store_without_peek_probes_by_taking_and_giving_back() {
    let limiter = RateLimiter::builder(NoPeek(MemoryStore::new()))
        .profile(Profile::builder("p").build().unwrap())
        .build()
        .unwrap();
    let charge = Job::new("p").limit(JobLimit::new("k", "k", window(3)));
    limiter.check_job(&charge).await.unwrap();
    let probe = Job::new("p").limit(JobLimit::new("k", "k", window(3)).probe());
    for _ in 0..3 {
        let decision = limiter.check_job(&probe).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(statuses(&decision), [("k", true, 2)]);
    }
}

#[tokio::test]
async fn what_cannot_be_checked_is_refused_before_any_call() {
    let store = Arc::new(MemoryStore::new());
    let limiter = plain(&store);
    let refused = |job: Job| {
        let limiter = limiter.clone();
        async move { limiter.check_job(&job).await.unwrap_err() }
    };
    assert_eq!(
        refused(Job::new("nope").limit(JobLimit::new("k", "k", window(1)))).await,
        CheckError::UnknownPolicy("nope".into())
    );
    assert_eq!(
        refused(Job::new("p")).await,
        CheckError::Job(JobError::NoLimits)
    );
    assert_eq!(
        refused(
            Job::new("p")
                .limit(JobLimit::new("a", "k", window(1)))
                .limit(JobLimit::new("b", "k", window(1)))
        )
        .await,
        CheckError::Job(JobError::DuplicateKey("k".into()))
    );
    assert_eq!(
        refused(Job::new("p").limit(JobLimit::new("a", "k", window(1)).units(0))).await,
        CheckError::Job(JobError::ZeroUnits("a".into()))
    );
    let many = (0..17).fold(Job::new("p"), |job, index| {
        job.limit(JobLimit::new("a", format!("k{index}"), window(1)))
    });
    assert_eq!(
        refused(many).await,
        CheckError::Job(JobError::TooManyLimits(17))
    );
    // An algorithm the server would refuse cannot even be built, so no job carries one.
    assert!(Algorithm::fixed_window(1, Duration::from_nanos(1)).is_err());
    assert_eq!(store.calls(), 0);
    assert!(
        RateLimiter::builder(MemoryStore::new())
            .profile(Profile::builder("p").build().unwrap())
            .profile(Profile::builder("p").build().unwrap())
            .build()
            .is_err(),
        "two profiles of one name"
    );
    assert!(
        Profile::builder("p")
            .timeout(Duration::ZERO)
            .build()
            .is_err()
    );
}

#[tokio::test]
async fn a_limit_changed_on_the_same_key_is_not_answered_from_an_old_denial() {
    // A plan's amount changes, its key does not: the remembered denial was for the old one.
    let store = Arc::new(MemoryStore::new());
    let limiter = plain(&store);
    let with = |limit: u64| Job::new("p").limit(JobLimit::new("k", "k:plan", window(limit)));
    assert!(limiter.check_job(&with(1)).await.unwrap().allowed);
    let denied = limiter.check_job(&with(1)).await.unwrap();
    assert_eq!(denied.source, Source::Store(StoreBackend::Memory));
    assert_eq!(
        limiter.check_job(&with(1)).await.unwrap().source,
        Source::Cache(StoreBackend::Memory),
        "remembered"
    );
    let raised = limiter.check_job(&with(3)).await.unwrap();
    assert!(raised.allowed, "the raised limit is asked");
    assert_eq!(raised.limits[0].remaining, 1);
}
