//! The tower layer in an axum router: status codes, header fields, bodies.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use redis_ratelimit_client::http::{Check, HeaderOptions, RateLimitLayer};
use redis_ratelimit_client::store::MemoryStore;
use redis_ratelimit_client::{Algorithm, Fallback, Limit, Policy, RateLimiter};
use tokio::sync::Notify;

use super::{header, send};

/// Policy "api": "per-key", a bucket of 2 per 20 s of each `key` input.
fn per_key(fallback: Fallback) -> Policy {
    Policy::builder("api")
        .limit(
            Limit::new(
                "per-key",
                Algorithm::token_bucket(2, Duration::from_secs(20)).unwrap(),
                "rl:{key}",
            )
            .unwrap(),
        )
        .fallback(fallback)
        .build()
        .unwrap()
}

/// The app on a fresh in-memory store, with the default header fields.
fn default_app() -> Router {
    app(
        Fallback::Local,
        MemoryStore::new(),
        HeaderOptions::default(),
    )
}

fn app(fallback: Fallback, store: MemoryStore, options: HeaderOptions) -> Router {
    let limiter = RateLimiter::builder(store)
        .policy(per_key(fallback))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, |request| {
        if request.uri.path() == "/free" {
            return None;
        }
        let check = Check::new("api");
        match request.headers.get("x-api-key") {
            Some(key) => Some(check.input("key", key.to_str().ok()?)),
            // Forgetting the input is a bug of the service: a 500, not a silent pass.
            None => Some(check),
        }
    })
    .headers(options);
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/free", get(|| async { "free" }))
        .route_layer(layer)
}

async fn get_with_key(app: &Router, path: &str, key: Option<&str>) -> Response<Body> {
    let mut request = Request::get(path);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    send(app, request).await
}

async fn body(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 10_000)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn admitted_responses_carry_the_fields_refusals_are_429_problems() {
    let app = default_app();
    let first = get_with_key(&app, "/", Some("alice")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some(r#""per-key";q=2;w=20"#)
    );
    // One token used, the next comes 10 s (one interval) from now.
    assert_eq!(header(&first, "ratelimit"), Some(r#""per-key";r=1;t=10"#));
    assert_eq!(header(&first, "retry-after"), None);
    assert_eq!(
        header(&first, "x-ratelimit-limit"),
        None,
        "legacy fields are opt-in"
    );
    assert_eq!(body(first).await, "ok");

    assert_eq!(
        get_with_key(&app, "/", Some("alice")).await.status(),
        StatusCode::OK
    );
    let refused = get_with_key(&app, "/", Some("alice")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&refused, "content-type"),
        Some("application/problem+json")
    );
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((9..=10).contains(&retry), "Retry-After {retry}");
    let t: u64 = header(&refused, "ratelimit")
        .unwrap()
        .strip_prefix(r#""per-key";r=0;t="#)
        .unwrap()
        .parse()
        .unwrap();
    assert!(t <= retry, "t={t} must not point past Retry-After={retry}");
    let text = body(refused).await;
    assert!(text.contains("\"status\":429"), "{text}");
    assert!(text.contains("#quota-exceeded"), "{text}");
    assert!(
        text.contains("\"violated-policies\":[\"per-key\"]"),
        "{text}"
    );

    // Another key has its own quota.
    assert_eq!(
        get_with_key(&app, "/", Some("bob")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn legacy_fields_on_request() {
    let options = HeaderOptions {
        legacy: true,
        on_admitted: true,
    };
    let app = app(Fallback::Local, MemoryStore::new(), options);
    let response = get_with_key(&app, "/", Some("alice")).await;
    assert_eq!(header(&response, "x-ratelimit-limit"), Some("2"));
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(header(&response, "x-ratelimit-reset"), Some("10"));
}

#[tokio::test]
async fn fields_only_on_refusals_when_asked() {
    let options = HeaderOptions {
        legacy: false,
        on_admitted: false,
    };
    let app = app(Fallback::Local, MemoryStore::new(), options);
    let response = get_with_key(&app, "/", Some("alice")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "ratelimit"), None);
}

#[tokio::test]
async fn unclassified_requests_pass_untouched() {
    let app = default_app();
    for _ in 0..5 {
        let response = get_with_key(&app, "/free", None).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
}

#[tokio::test]
async fn a_check_that_cannot_be_made_is_a_500() {
    let app = default_app();
    let response = get_with_key(&app, "/", None).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    // The detail (which input, which template) is the operator's, not the client's.
    let text = body(response).await;
    assert!(text.contains("could not be checked"), "{text}");
    assert!(!text.contains("key") && !text.contains("rl:"), "{text}");

    // The detail goes where the service says.
    let reported = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let limiter = RateLimiter::builder(MemoryStore::new())
        .policy(per_key(Fallback::Local))
        .build()
        .unwrap();
    let sink = Arc::clone(&reported);
    let layer = RateLimitLayer::new(limiter, |_request| Some(Check::new("api"))).on_error(
        move |check, error| {
            sink.lock()
                .unwrap()
                .push(format!("{}: {error}", check.policy))
        },
    );
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(layer);
    let response = get_with_key(&app, "/", None).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        reported.lock().unwrap().as_slice(),
        ["api: the key template needs the input 'key'"]
    );
}

#[tokio::test]
async fn failing_closed_without_a_store_is_a_503() {
    let store = MemoryStore::new();
    store.set_down(true);
    let app = app(Fallback::Closed, store, HeaderOptions::default());
    let response = get_with_key(&app, "/", Some("alice")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(header(&response, "retry-after").is_some());
    // No limit was consulted: no quota is shown, and none is said to be violated.
    assert_eq!(header(&response, "ratelimit-policy"), None);
    assert_eq!(header(&response, "ratelimit"), None);
    let text = body(response).await;
    assert!(text.contains("#temporary-reduced-capacity"), "{text}");
    assert!(!text.contains("violated-policies"), "{text}");
}

#[tokio::test]
async fn a_paced_request_is_held_for_its_turn() {
    let queue = Limit::new(
        "queue",
        Algorithm::token_bucket(1, Duration::from_millis(100)).unwrap(),
        "q",
    )
    .unwrap()
    .max_wait(Duration::from_secs(1))
    .unwrap();
    let policy = Policy::builder("paced").limit(queue).build().unwrap();
    let limiter = RateLimiter::builder(MemoryStore::new())
        .policy(policy)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(RateLimitLayer::new(limiter, |_| Some(Check::new("paced"))));
    let started = std::time::Instant::now();
    for _ in 0..4 {
        assert_eq!(get_with_key(&app, "/", None).await.status(), StatusCode::OK);
    }
    let elapsed = started.elapsed();
    // Four calls one interval apart: the last proceeds 300 ms after the first.
    assert!(elapsed >= Duration::from_millis(290), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn in_flight_slots_are_released_when_the_service_has_answered() {
    let slots = Limit::new(
        "in-flight",
        Algorithm::concurrency(1, Duration::from_secs(30)).unwrap(),
        "slots",
    )
    .unwrap();
    let policy = Policy::builder("slots").limit(slots).build().unwrap();
    let limiter = RateLimiter::builder(MemoryStore::new())
        .policy(policy)
        .build()
        .unwrap();
    // The service holds a request until the test lets it go: its slot is taken for as long
    // as the test needs, with no guess at how long that is.
    let (entered, let_go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (entered, let_go) = (Arc::clone(&entered), Arc::clone(&let_go));
        move || {
            let (entered, let_go) = (Arc::clone(&entered), Arc::clone(&let_go));
            async move {
                entered.notify_one();
                let_go.notified().await;
                "slow"
            }
        }
    };
    let app = Router::new()
        .route("/", get(handler))
        .route_layer(RateLimitLayer::new(limiter, |_| Some(Check::new("slots"))));
    let (first, second) = tokio::join!(get_with_key(&app, "/", None), async {
        entered.notified().await;
        let second = get_with_key(&app, "/", None).await;
        let_go.notify_one();
        second
    });
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        second.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the one slot was taken"
    );
    assert_eq!(
        header(&second, "ratelimit-policy"),
        Some(r#""in-flight";q=1;qu="concurrent-requests""#)
    );
    assert_eq!(header(&second, "ratelimit"), Some(r#""in-flight";r=0"#));
    // The first request has been answered: its slot is free again.
    let_go.notify_one();
    assert_eq!(get_with_key(&app, "/", None).await.status(), StatusCode::OK);
}
