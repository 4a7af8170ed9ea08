//! Two `RateLimitLayer`s stacked in an axum router (a default policy on every route, a
//! route's own inside it), against a real server with the module (issue 36, item 3): a
//! request the route's policy refuses spends nothing of the default policy (refused searches
//! never lock the user out of `/items`), its 429's `RateLimit`, `RateLimit-Policy` and
//! `Retry-After` all describe the limit that refused it, and an admitted response lists
//! both policies' items.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use redis_ratelimit_client::http::{Check, RateLimitLayer};
use redis_ratelimit_client::store::{
    Acquire, BoxFuture, Capabilities, GroupGrant, MemoryStore, RedisStore, Refund, Store,
    StoreBackend, StoreError,
};
use redis_ratelimit_client::{Algorithm, Inputs, Limit, Policy, RateLimiter, Source};
use redis_ratelimit_testkit::server::Server;
use tokio::sync::Notify;

use super::{header, send};

const DEFAULT_QUOTA: u64 = 6;
const SEARCH_QUOTA: u64 = 3;
/// A day: no window ends during a test (but at midnight UTC).
const WINDOW: Duration = Duration::from_secs(86_400);
const SEARCHES: usize = 10;

fn policy(name: &str, limit: &str, algorithm: Algorithm, key: &str) -> Policy {
    Policy::builder(name)
        .limit(Limit::new(limit, algorithm, key).unwrap())
        // Generous: these tests are about what is charged, not about a loaded machine's
        // latency (a fallback decision would make the counts meaningless).
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn limiter(server: &Server) -> RateLimiter {
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let fixed = |quota| Algorithm::fixed_window(quota, WINDOW).unwrap();
    RateLimiter::builder(RedisStore::new(&url).unwrap())
        .policy(policy("api", "per-key", fixed(DEFAULT_QUOTA), "api:{user}"))
        .policy(policy(
            "search",
            "searches",
            fixed(SEARCH_QUOTA),
            "search:{user}",
        ))
        .policy(policy(
            "uploads",
            "in-flight",
            Algorithm::concurrency(1, Duration::from_secs(30)).unwrap(),
            "uploads:{user}",
        ))
        .build()
        .unwrap()
}

/// A check of `policy` keyed by the `x-user` header.
fn by_user(policy: &'static str) -> impl Fn(&http::request::Parts) -> Option<Check> + Clone {
    move |request| {
        let user = request.headers.get("x-user")?.to_str().ok()?;
        Some(Check::new(policy).input("user", user))
    }
}

/// `/items` under the default policy alone, `/search` under the default and its own.
fn app(limiter: &RateLimiter, default: &'static str) -> Router {
    let search = RateLimitLayer::new(limiter.clone(), by_user("search"));
    Router::new()
        .route("/items", get(|| async { "items" }))
        .route("/search", get(|| async { "results" }).route_layer(search))
        .layer(RateLimitLayer::new(limiter.clone(), by_user(default)))
}

async fn get_as(app: &Router, path: &str, user: &str) -> Response<Body> {
    send(app, Request::get(path).header("x-user", user)).await
}

/// A 429 of the search policy: every field about that limit alone, and they agree.
fn assert_refused_by_searches(response: &Response<Body>) {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(response, "ratelimit-policy"),
        Some(format!(r#""searches";q={SEARCH_QUOTA};w={}"#, WINDOW.as_secs()).as_str()),
        "RateLimit-Policy names another policy than the refusing one"
    );
    let service = header(response, "ratelimit").unwrap();
    let t = service
        .strip_prefix(r#""searches";r=0;t="#)
        .unwrap_or_else(|| {
            panic!("RateLimit names another limit than the refusing one: {service}")
        });
    assert_eq!(
        Some(t),
        header(response, "retry-after"),
        "RateLimit's t and Retry-After disagree"
    );
    assert_eq!(response.headers().get_all("retry-after").iter().count(), 1);
}

#[tokio::test]
async fn refused_searches_spend_nothing_of_the_default_and_the_429_agrees() {
    let server = Server::start(&[]);
    let app = app(&limiter(&server), "api");
    let mut searches = Vec::new();
    for _ in 0..SEARCHES {
        searches.push(get_as(&app, "/search", "ada").await);
    }
    let mut items = Vec::new();
    for _ in 0..=(DEFAULT_QUOTA - SEARCH_QUOTA) {
        items.push(get_as(&app, "/items", "ada").await.status());
    }
    let served = usize::try_from(SEARCH_QUOTA).unwrap();
    let statuses: Vec<StatusCode> = searches.iter().map(Response::status).collect();
    let mut expected = vec![StatusCode::OK; served];
    expected.resize(SEARCHES, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses, expected);
    // Only the served searches spent the default policy.
    let mut expected = vec![StatusCode::OK; usize::try_from(DEFAULT_QUOTA - SEARCH_QUOTA).unwrap()];
    expected.push(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(items, expected, "refused searches spent the default policy");
    for refused in &searches[served..] {
        assert_refused_by_searches(refused);
    }
    // An admitted search lists both policies' items, the default's (checked first) first.
    let admitted = &searches[0];
    let service = header(admitted, "ratelimit").unwrap();
    let (per_key, searches_item) = service.split_once(", ").unwrap();
    assert!(per_key.starts_with(r#""per-key";r=5;t="#), "{service}");
    assert!(
        searches_item.starts_with(r#""searches";r=2;t="#),
        "{service}"
    );
    assert_eq!(
        header(admitted, "ratelimit-policy"),
        Some(r#""per-key";q=6;w=86400, "searches";q=3;w=86400"#)
    );
    assert_eq!(header(admitted, "retry-after"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_refused_searches_gives_the_default_back_exactly_once() {
    let server = Server::start(&[]);
    let app = app(&limiter(&server), "api");
    let burst = 40;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..burst {
        let app = app.clone();
        tasks.spawn(async move { get_as(&app, "/search", "crowd").await.status() });
    }
    let mut searched = tasks.join_all().await;
    searched.sort();
    let mut listed = Vec::new();
    for _ in 0..DEFAULT_QUOTA {
        listed.push(get_as(&app, "/items", "crowd").await.status());
    }
    // The search limit serves 3 of the 40; every refusal gives the default back exactly once
    // (a refund sent twice would leave /items more than 6 - 3, a lost one fewer), and no
    // denial remembered while the burst held the default keeps /items refused.
    let served = usize::try_from(SEARCH_QUOTA).unwrap();
    let mut expected = vec![StatusCode::OK; served];
    expected.resize(burst, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(searched, expected);
    let mut expected = vec![StatusCode::OK; usize::try_from(DEFAULT_QUOTA - SEARCH_QUOTA).unwrap()];
    expected.resize(
        usize::try_from(DEFAULT_QUOTA).unwrap(),
        StatusCode::TOO_MANY_REQUESTS,
    );
    assert_eq!(
        listed, expected,
        "refused searches spent the default policy"
    );
}

#[tokio::test]
async fn a_refusal_frees_the_defaults_in_flight_slot() {
    let server = Server::start(&[]);
    let app = app(&limiter(&server), "uploads");
    let mut codes = Vec::new();
    for _ in 0..SEARCH_QUOTA + 2 {
        codes.push(get_as(&app, "/search", "bob").await.status());
    }
    let mut expected = vec![StatusCode::OK; usize::try_from(SEARCH_QUOTA).unwrap()];
    expected.extend([StatusCode::TOO_MANY_REQUESTS; 2]);
    assert_eq!(
        codes, expected,
        "the default's one slot is free again after each"
    );
    assert_eq!(
        get_as(&app, "/items", "bob").await.status(),
        StatusCode::OK,
        "the slot of the refused searches was released"
    );
}

/// The memory store, holding back the reply of one denial until told: a check the store
/// denied before a give-back, answered after it.
struct HeldDenial {
    store: MemoryStore,
    hold: AtomicBool,
    held: Notify,
    answer: Notify,
}

impl Store for HeldDenial {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(async move {
            let grant = self.store.acquire(request).await?;
            if grant.granted == 0 && self.hold.swap(false, Ordering::SeqCst) {
                self.held.notify_one();
                self.answer.notified().await;
            }
            Ok(grant)
        })
    }

    fn refund<'a>(&'a self, request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        self.store.refund(request)
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    fn slot(&self, key: &str) -> Option<u16> {
        self.store.slot(key)
    }
}

#[tokio::test]
async fn a_denial_answered_after_a_give_back_is_not_remembered() {
    let store = Arc::new(HeldDenial {
        store: MemoryStore::new(),
        hold: AtomicBool::new(false),
        held: Notify::new(),
        answer: Notify::new(),
    });
    let one = Algorithm::fixed_window(1, WINDOW).unwrap();
    let limiter = RateLimiter::builder_shared(store.clone())
        .policy(policy("api", "per-key", one, "api:{user}"))
        .build()
        .unwrap();
    let inputs = Inputs::new().with("user", "ada");
    let spent = limiter.check("api", &inputs).await.unwrap();
    assert!(spent.allowed);
    // A second check is denied by the store (the one unit is spent), its answer held back.
    store.hold.store(true, Ordering::SeqCst);
    let denied = tokio::spawn({
        let (limiter, inputs) = (limiter.clone(), inputs.clone());
        async move { limiter.check("api", &inputs).await.unwrap() }
    });
    store.held.notified().await;
    // The first request is refused by another policy: its unit goes back.
    limiter.give_back("api", &inputs, 1, &spent).await.unwrap();
    store.answer.notify_one();
    assert!(!denied.await.unwrap().allowed);
    // The denial predates the refund: remembered, it would refuse what the store admits.
    let after = limiter.check("api", &inputs).await.unwrap();
    assert!(after.allowed, "refused from memory: {after:?}");
    assert_eq!(after.source, Source::Store(StoreBackend::Memory));
}

#[tokio::test]
async fn give_back_frees_an_admissions_units_once_and_nothing_for_a_denial() {
    let one = Algorithm::fixed_window(2, WINDOW).unwrap();
    let limiter = RateLimiter::builder(MemoryStore::new())
        .policy(policy("api", "per-key", one, "api:{user}"))
        .build()
        .unwrap();
    let inputs = Inputs::new().with("user", "ada");
    let first = limiter.check("api", &inputs).await.unwrap();
    let second = limiter.check("api", &inputs).await.unwrap();
    let denied = limiter.check("api", &inputs).await.unwrap();
    assert!(first.allowed && second.allowed && !denied.allowed);
    // Giving back a denial gives nothing; giving back an admission once frees one unit.
    limiter.give_back("api", &inputs, 1, &denied).await.unwrap();
    limiter.give_back("api", &inputs, 1, &first).await.unwrap();
    assert!(limiter.check("api", &inputs).await.unwrap().allowed);
    assert!(!limiter.check("api", &inputs).await.unwrap().allowed);
}
