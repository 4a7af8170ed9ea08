//! The Redis store against a real server with the module: it decides exactly as the
//! in-memory store (both run the core's arithmetic), detects `RL.MULTI`, falls back to
//! `CL.THROTTLE` without it, and sorts errors into outages and refusals.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use redis_ratelimit_client::store::{
    Acquire, Capabilities, LimitCall, MemoryStore, MultiSupport, RedisStore, RedisStoreOptions,
    Refund, Store, StoreBackend, StoreError,
};
use redis_ratelimit_client::{Algorithm, Policy};
use redis_ratelimit_testkit::server::{Server, wait_until_async};

use super::one;

const HOUR: Duration = Duration::from_secs(3600);

fn url(server: &Server) -> String {
    format!("redis://127.0.0.1:{}/", server.port)
}

/// One step of a scripted sequence: acquire (units, partial min) or refund (units) on some
/// of the limits, for a holder of in-flight slots.
enum Step {
    Acquire(&'static [usize], u64, Option<u64>, Option<&'static str>),
    Refund(&'static [usize], u64, Option<&'static str>),
}

fn calls<'a>(limits: &'a [(String, Algorithm, u64)], indices: &[usize]) -> Vec<LimitCall<'a>> {
    indices
        .iter()
        .map(|&index| {
            let (key, algorithm, weight) = &limits[index];
            LimitCall {
                key,
                algorithm,
                weight: *weight,
                max_wait: None,
                lease_suffix: None,
            }
        })
        .collect()
}

/// Runs `steps` on `store`, returning what each acquire answered, without the timings
/// (which depend on each clock): (granted, binding, per limit (allowed, remaining, limit)).
async fn run(
    store: &dyn Store,
    limits: &[(String, Algorithm, u64)],
    steps: &[Step],
) -> Vec<(u64, usize, Vec<(bool, u64, u64)>)> {
    let mut answers = Vec::new();
    for step in steps {
        match step {
            Step::Acquire(indices, units, partial_min, holder) => {
                let request = Acquire {
                    limits: calls(limits, indices),
                    units: *units,
                    partial_min: *partial_min,
                    holder: *holder,
                };
                let grant = store.acquire(&request).await.unwrap();
                let views = grant
                    .views
                    .iter()
                    .map(|view| (view.allowed, view.remaining, view.limit))
                    .collect();
                answers.push((grant.granted, grant.binding, views));
            }
            Step::Refund(indices, units, holder) => {
                let request = Refund {
                    limits: calls(limits, indices),
                    units: *units,
                    holder: *holder,
                };
                store.refund(&request).await.unwrap();
            }
        }
    }
    answers
}

#[tokio::test]
async fn the_redis_store_decides_exactly_as_the_memory_store() {
    let server = Server::start(&[]);
    let redis = RedisStore::new(&url(&server)).unwrap();
    redis.connect().await.unwrap();
    assert_eq!(
        redis.capabilities(),
        Capabilities {
            multi: true,
            partial: true
        },
        "RL.MULTI detected"
    );
    let memory = MemoryStore::new();
    // Slow refills and long windows: nothing changes with time during the test.
    let limits = vec![
        (
            "tb".to_string(),
            Algorithm::token_bucket(10, HOUR).unwrap(),
            1,
        ),
        (
            "log".to_string(),
            Algorithm::sliding_log(7, HOUR).unwrap(),
            2,
        ),
        ("gcra".to_string(), Algorithm::gcra(5, 1, HOUR).unwrap(), 1),
        (
            "sw".to_string(),
            Algorithm::sliding_window(50, HOUR).unwrap(),
            3,
        ),
        (
            "slots".to_string(),
            Algorithm::concurrency(2, HOUR).unwrap(),
            1,
        ),
    ];
    let steps = [
        Step::Acquire(&[0], 3, None, None),
        Step::Acquire(&[0, 1], 2, None, None),
        Step::Acquire(&[0, 1, 2, 3], 1, None, None),
        // A partial grant: the bucket has 4 left.
        Step::Acquire(&[0, 3], 20, Some(1), None),
        // The log (weight 2) has 1: denied, nothing charged.
        Step::Acquire(&[2, 1], 1, None, None),
        Step::Refund(&[1], 1, None),
        Step::Acquire(&[2], 4, Some(2), None),
        Step::Acquire(&[2, 3], 3, Some(1), None),
        // A cost above the limit: never.
        Step::Acquire(&[3], 20, None, None),
        Step::Refund(&[0, 3], 2, None),
        Step::Acquire(&[0, 3], 9, Some(9), None),
        // In-flight slots: two holders fill them, a third is denied, a renewal is not a new
        // holder, a release makes room.
        Step::Acquire(&[4], 1, None, Some("a")),
        Step::Acquire(&[4, 3], 1, None, Some("b")),
        Step::Acquire(&[4, 3], 1, None, Some("c")),
        Step::Acquire(&[4], 1, None, Some("b")),
        Step::Refund(&[4], 1, Some("a")),
        Step::Acquire(&[3, 4], 1, None, Some("c")),
    ];
    let from_redis = run(&redis, &limits, &steps).await;
    let from_memory = run(&memory, &limits, &steps).await;
    assert_eq!(from_redis, from_memory);
    // The sequence exercised what it meant to.
    assert_eq!(from_redis[3].0, 4, "a partial grant below the units asked");
    assert_eq!(
        (from_redis[4].0, from_redis[4].1),
        (0, 1),
        "denied by the second limit"
    );
    assert_eq!(
        from_redis[6].0, 1,
        "a partial grant of what every limit can give"
    );
    let slots: Vec<u64> = from_redis[9..]
        .iter()
        .map(|(granted, _, _)| *granted)
        .collect();
    assert_eq!(
        slots,
        [1, 1, 0, 1, 1],
        "in-flight: a, b, c denied, b renews, c after a left"
    );
}

#[tokio::test]
async fn pacing_is_decided_alike_by_the_server_and_in_memory() {
    let server = Server::start(&[]);
    let redis = RedisStore::new(&url(&server)).unwrap();
    let memory = MemoryStore::new();
    // One token every 100 ms, a queue of up to 1 s.
    let bucket = Algorithm::token_bucket(1, Duration::from_millis(100)).unwrap();
    let mut call = one("queue", &bucket);
    call.limits[0].max_wait = Some(Duration::from_secs(1));
    let mut answers = Vec::new();
    for store in [&redis as &dyn Store, &memory] {
        let mut answer = Vec::new();
        for _ in 0..13 {
            let grant = store.acquire(&call).await.unwrap();
            let view = grant.views[0];
            answer.push((grant.granted, view.retry_after.unwrap().as_millis()));
        }
        answers.push(answer);
    }
    for answer in &answers {
        let granted: Vec<u64> = answer.iter().map(|(g, _)| *g).collect();
        assert_eq!(
            granted,
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
            "{answer:?}"
        );
        // Waits grow one interval per queued call (give or take the time between calls).
        let (_, tenth) = answer[10];
        assert!((800..=1000).contains(&tenth), "{answer:?}");
    }
}

#[tokio::test]
async fn without_rl_multi_gcra_goes_through_cl_throttle() {
    let server = Server::start(&[]);
    let options = RedisStoreOptions {
        multi: MultiSupport::No,
        ..RedisStoreOptions::default()
    };
    let store = RedisStore::with_options(&url(&server), options).unwrap();
    assert!(!store.capabilities().multi);
    let gcra = Algorithm::gcra(2, 1, HOUR).unwrap();
    let request = one("g", &gcra);
    let mut granted = Vec::new();
    for _ in 0..4 {
        granted.push(store.acquire(&request).await.unwrap().granted);
    }
    assert_eq!(granted, [1, 1, 1, 0]);
    let denied = store.acquire(&request).await.unwrap();
    assert!(denied.views[0].retry_after.unwrap() > Duration::from_secs(3000));
    // A refund is a negative quantity.
    store
        .refund(&Refund {
            limits: request.limits.clone(),
            units: 1,
            holder: None,
        })
        .await
        .unwrap();
    assert_eq!(store.acquire(&request).await.unwrap().granted, 1);
    // Partial grants need RL.MULTI: refused before anything is sent.
    let partial = Acquire {
        partial_min: Some(1),
        ..request
    };
    assert!(matches!(
        store.acquire(&partial).await,
        Err(StoreError::Server(_))
    ));
}

#[tokio::test]
async fn refusals_and_outages_are_told_apart() {
    let server = Server::start(&[]);
    let store = RedisStore::new(&url(&server)).unwrap();
    let bucket = Algorithm::token_bucket(5, HOUR).unwrap();
    let window = Algorithm::fixed_window(5, HOUR).unwrap();
    let on = |algorithm| one("k", algorithm);
    store.acquire(&on(&bucket)).await.unwrap();
    let refused = store.acquire(&on(&window)).await.unwrap_err();
    assert!(matches!(refused, StoreError::Server(_)), "{refused}");
    assert!(!refused.is_unavailability());
    assert!(
        refused.to_string().contains("ERR key holds a token bucket"),
        "the server's words: {refused}"
    );

    // A node demoted to a replica (a failover) answers READONLY: an outage, not a refusal.
    let replica = Server::start(&[]);
    replica.replicate_from(&server);
    let demoted = RedisStore::new(&url(&replica)).unwrap();
    let read_only = demoted.acquire(&on(&bucket)).await.unwrap_err();
    assert!(read_only.is_unavailability(), "{read_only}");

    // Nothing listens on this port: connection refused, an outage, and quickly.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    let started = Instant::now();
    let outage = nowhere.acquire(&on(&bucket)).await.unwrap_err();
    assert!(outage.is_unavailability(), "{outage}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_store_made_while_redis_is_down_connects_when_it_comes_up() {
    let mut server = Server::start(&[]);
    let store = RedisStore::new(&url(&server)).unwrap();
    server.kill();
    let bucket = Algorithm::token_bucket(5, HOUR).unwrap();
    let request = one("k", &bucket);
    assert!(
        store
            .acquire(&request)
            .await
            .unwrap_err()
            .is_unavailability()
    );
    server.restart(&[]);
    assert_eq!(store.acquire(&request).await.unwrap().granted, 1);
    assert!(
        store.capabilities().multi,
        "capabilities learned on connecting"
    );
}

/// Forwards TCP connections to port `target`, each chunk delayed by `delay`: a server far
/// away.
async fn slow_proxy(target: u16, delay: Duration) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

    async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            // The delay is what is simulated: a server far away.
            tokio::time::sleep(delay).await;
            if to.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(("127.0.0.1", target))
                .await
                .unwrap();
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(pipe(client_read, server_write, delay));
            tokio::spawn(pipe(server_read, client_write, delay));
        }
    });
    port
}

#[tokio::test]
async fn a_connection_slower_to_set_up_than_the_timeout_still_gets_made() {
    use redis_ratelimit_client::{Inputs, Limit, Policy, RateLimiter, Source};

    let server = Server::start(&[]);
    // 8 ms each way: a call takes about 16 ms, within the 30 ms timeout, but setting up the
    // connection (connect, handshake, COMMAND INFO) takes several round trips, longer.
    let port = slow_proxy(server.port, Duration::from_millis(8)).await;
    let store = RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    let policy = Policy::builder("api")
        .limit(Limit::new("k", Algorithm::token_bucket(1000, HOUR).unwrap(), "k").unwrap())
        .timeout(Duration::from_millis(30))
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(store).policy(policy).build().unwrap();
    let limiter = &limiter;
    let connected = wait_until_async(Duration::from_secs(10), || async move {
        let decision = limiter.check("api", &Inputs::new()).await.unwrap();
        decision.source == Source::Store(StoreBackend::Module)
    })
    .await;
    assert!(
        connected,
        "never connected: each check's timeout cancelled the connection attempt"
    );
}

#[tokio::test]
async fn a_restarted_server_is_reconnected_to() {
    let mut server = Server::start(&[]);
    let store = RedisStore::new(&url(&server)).unwrap();
    let bucket = Algorithm::token_bucket(5, HOUR).unwrap();
    let request = one("k", &bucket);
    assert_eq!(store.acquire(&request).await.unwrap().granted, 1);
    server.restart(&[]);
    let (store, request) = (&store, &request);
    let reconnected = wait_until_async(Duration::from_secs(10), || async move {
        store.acquire(request).await.is_ok()
    })
    .await;
    assert!(reconnected, "never reconnected");
}

#[tokio::test]
async fn configuration_mistakes_name_what_is_wrong() {
    use redis_ratelimit_client::store::RedisStore;
    let error = RedisStore::new("localhost:6379").err().unwrap().to_string();
    assert!(
        error.contains("'localhost:6379' is not a Redis URL") && !error.contains("refused"),
        "{error}"
    );
    // A port nobody listens on: the error names the address.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let store = RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    let error = store.connect().await.unwrap_err().to_string();
    assert!(
        error.contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{error}"
    );
}

/// Checks through a limiter on `server` with `Backend::Auto`: a plain policy (store calls,
/// then a denial remembered) and a leased one (a claim, then units from the lease). Returns
/// the backend resolved, every decision's source, and each `ratelimit_decisions_total` and
/// `ratelimit_store_backend` series recorded (name{labels} -> value).
fn decisions_on(
    server: &Server,
) -> (
    Option<StoreBackend>,
    Vec<redis_ratelimit_client::Source>,
    std::collections::BTreeMap<String, f64>,
) {
    use metrics_util::debugging::DebuggingRecorder;
    use redis_ratelimit_client::{Inputs, Lease, Limit, Policy, RateLimiter};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (backend, sources) = metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = RedisStore::new(&url(server)).unwrap();
            let bucket = Algorithm::token_bucket(2, HOUR).unwrap();
            let plain = Policy::builder("plain")
                .limit(Limit::new("k", bucket.clone(), "plain").unwrap())
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            let leased = Policy::builder("leased")
                .limit(Limit::new("k", bucket, "leased").unwrap())
                .lease(Lease::new(2).max_units(2).lifetime(HOUR))
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            let limiter = RateLimiter::builder(store.clone())
                .policy(plain)
                .policy(leased)
                .build()
                .unwrap();
            let mut sources = Vec::new();
            for policy in ["plain", "plain", "plain", "plain", "leased", "leased"] {
                let decision = limiter.check(policy, &Inputs::new()).await.unwrap();
                sources.push(decision.source);
            }
            limiter.release_leases().await;
            (store.backend(), sources)
        })
    });
    let mut series = super::series(&snapshotter);
    series.retain(|name, _| {
        name.starts_with("ratelimit_decisions_total{")
            || name.starts_with("ratelimit_store_backend{")
    });
    (backend, sources, series)
}

/// Every decision names the backend that answered, whichever `Backend::Auto` found: the
/// store call's, the lease's claim, the remembered denial's; so do the metrics.
fn assert_decided_by(server: &Server, expected: StoreBackend) {
    use redis_ratelimit_client::Source;

    let (backend, sources, series) = decisions_on(server);
    assert_eq!(backend, Some(expected));
    let name = expected.as_str();
    assert_eq!(
        sources,
        [
            Source::Store(expected),
            Source::Store(expected),
            Source::Store(expected),
            Source::Cache(expected),
            Source::Store(expected),
            Source::Lease(expected),
        ],
        "{name}: the plain policy's two admissions, its denial and the denial remembered; \
         the leased policy's claim of two units and the second unit spent from it"
    );
    let expected_series: std::collections::BTreeMap<String, f64> = [
        (format!("ratelimit_decisions_total{{policy=plain,limit=k,key_class=default,outcome=allowed,source=store,backend={name}}}"), 2.0),
        (format!("ratelimit_decisions_total{{policy=plain,limit=k,key_class=default,outcome=denied,source=store,backend={name}}}"), 1.0),
        (format!("ratelimit_decisions_total{{policy=plain,limit=k,key_class=default,outcome=denied,source=cache,backend={name}}}"), 1.0),
        (format!("ratelimit_decisions_total{{policy=leased,limit=k,key_class=default,outcome=allowed,source=store,backend={name}}}"), 1.0),
        (format!("ratelimit_decisions_total{{policy=leased,limit=k,key_class=default,outcome=allowed,source=lease,backend={name}}}"), 1.0),
        (format!("ratelimit_store_backend{{backend={name}}}"), 1.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(series, expected_series);
}

#[test]
fn decisions_name_the_module_when_the_server_has_it() {
    let server = Server::start(&[]);
    assert_decided_by(&server, StoreBackend::Module);
}

#[test]
fn decisions_name_the_functions_library_on_a_server_without_the_module() {
    let server = Server::start_without_module(&["--enable-module-command", "no"]);
    assert_decided_by(&server, StoreBackend::Functions);
}

#[test]
fn decisions_name_scripts_where_function_is_refused() {
    // A host that renamed FUNCTION away: the library cannot be loaded, so it runs as a script.
    let server = Server::start_without_module(&["--rename-command", "FUNCTION", ""]);
    assert_decided_by(&server, StoreBackend::Scripts);
}

#[tokio::test]
async fn a_script_or_library_the_server_lost_is_loaded_again() {
    use redis_ratelimit_client::Backend;

    // A restart, a failover, SCRIPT FLUSH or FUNCTION FLUSH: the next call gets NOSCRIPT or
    // "Function not found", loads the code again and retries.
    for (backend, flush, answered) in [
        (Backend::Scripts, "SCRIPT", StoreBackend::Scripts),
        (Backend::Functions, "FUNCTION", StoreBackend::Functions),
    ] {
        let server = Server::start_without_module(&[]);
        let options = RedisStoreOptions {
            backend,
            ..RedisStoreOptions::default()
        };
        let store = RedisStore::with_options(&url(&server), options).unwrap();
        let bucket = Algorithm::token_bucket(5, HOUR).unwrap();
        let grant = store.acquire(&one("k", &bucket)).await.unwrap();
        assert_eq!((grant.granted, grant.backend), (1, answered));
        let flush = || {
            let _: () = redis::cmd(flush)
                .arg("FLUSH")
                .query(&mut server.conn())
                .unwrap();
        };
        flush();
        let grant = store.acquire(&one("k", &bucket)).await.unwrap();
        assert_eq!(
            (grant.granted, grant.views[0].remaining),
            (1, 3),
            "{backend}"
        );
        flush();
        let refund = Refund {
            limits: one("k", &bucket).limits,
            units: 2,
            holder: None,
        };
        store.refund(&refund).await.unwrap();
        let grant = store.acquire(&one("k", &bucket)).await.unwrap();
        assert_eq!(grant.views[0].remaining, 4, "{backend}");
    }
}

/// `Store::peek` on a server (the module's `RL.PEEK`, and the Functions library's
/// `rl_peek`) answers as the memory store does, and changes nothing.
async fn peeks_on(server: &Server) {
    let redis = RedisStore::new(&url(server)).unwrap();
    redis.connect().await.unwrap();
    let memory = MemoryStore::new();
    let limits = vec![
        (
            "tb".to_string(),
            Algorithm::token_bucket(4, HOUR).unwrap(),
            1,
        ),
        (
            "fw".to_string(),
            Algorithm::fixed_window(3, HOUR).unwrap(),
            1,
        ),
        ("gcra".to_string(), Algorithm::gcra(2, 1, HOUR).unwrap(), 1),
        (
            "slots".to_string(),
            Algorithm::concurrency(1, HOUR).unwrap(),
            1,
        ),
    ];
    for store in [&redis as &dyn Store, &memory] {
        run(
            store,
            &limits,
            &[
                Step::Acquire(&[0, 1, 2], 2, None, None),
                Step::Acquire(&[3], 1, None, Some("a")),
            ],
        )
        .await;
    }
    let mut answers = Vec::new();
    for store in [&redis as &dyn Store, &memory] {
        let mut seen = Vec::new();
        for units in [1, 2, 5] {
            let request = Acquire {
                limits: calls(&limits, &[0, 1, 2, 3]),
                units,
                partial_min: None,
                holder: None,
            };
            // Twice: a peek takes nothing.
            for _ in 0..2 {
                let grant = store.peek(&request).await.unwrap();
                seen.push((
                    grant.granted,
                    grant
                        .views
                        .iter()
                        .map(|view| (view.allowed, view.remaining, view.limit))
                        .collect::<Vec<_>>(),
                ));
            }
        }
        answers.push(seen);
    }
    assert_eq!(
        answers[0], answers[1],
        "the server reads as the memory store"
    );
    assert_eq!(
        answers[0][0],
        (
            0,
            vec![(true, 1, 4), (true, 0, 3), (true, 0, 3), (false, 0, 1)]
        ),
        "a peek of one unit after two were taken: the bucket (4) would have 1 left, the \
         window and GCRA (3) none; the one slot is held"
    );
    assert_eq!(
        answers[0][2].1[1],
        (false, 1, 3),
        "a peek of two: the window cannot, and shows the 1 it has"
    );
}

#[tokio::test]
async fn peeks_read_the_module_and_change_nothing() {
    let server = Server::start(&[]);
    peeks_on(&server).await;
}

#[tokio::test]
async fn peeks_read_the_functions_library_and_change_nothing() {
    let server = Server::start_without_module(&["--enable-module-command", "no"]);
    peeks_on(&server).await;
}

/// Issue 36, item 5: a request the store refuses as invalid is the caller's error (a typed
/// error naming what is wrong), never an outage and never a fallback decision, even under
/// `Fallback::Open`; nothing is charged and the store keeps deciding.
async fn refused_as_invalid_on(server: &Server, policy: Policy, cost: u64, named: &str) {
    use redis_ratelimit_client::{CheckError, Inputs, RateLimiter};

    let store = RedisStore::new(&url(server)).unwrap();
    let limiter = RateLimiter::builder(store).policy(policy).build().unwrap();
    let inputs = Inputs::new().with("key", "k");
    for _ in 0..5 {
        match limiter.check_cost("api", &inputs, cost).await {
            Err(CheckError::Refused(why)) => assert!(why.contains(named), "{why}"),
            other => panic!("a refused argument decided as {other:?}"),
        }
    }
    assert!(!limiter.store_unreachable(), "a refusal is not an outage");
    if cost > 1 {
        let decision = limiter.check("api", &inputs).await.unwrap();
        assert!(decision.source.is_store(), "{:?}", decision.source);
        assert_eq!(
            decision.limits[0].remaining, 4,
            "nothing was charged by the refused checks"
        );
    }
}

fn open_policy(algorithm: Algorithm) -> Policy {
    use redis_ratelimit_client::{Fallback, Limit};
    Policy::builder("api")
        .limit(Limit::new("limit", algorithm, "invalid:{key}").unwrap())
        .fallback(Fallback::Open)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_argument_the_module_refuses_is_the_callers_error_not_a_fallback() {
    let server = Server::start(&[]);
    // The module's ratelimit.max-log-entries is 10,000 by default.
    let log = Algorithm::sliding_log(20_000, HOUR).unwrap();
    refused_as_invalid_on(&server, open_policy(log), 1, "max-log-entries").await;
}

#[tokio::test]
async fn a_cost_the_library_refuses_is_the_callers_error_not_a_fallback() {
    let server = Server::start_without_module(&[]);
    let bucket = Algorithm::token_bucket(5, HOUR).unwrap();
    refused_as_invalid_on(&server, open_policy(bucket), 1 << 60, "2^53").await;
}
