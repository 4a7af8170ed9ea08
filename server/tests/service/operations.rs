//! Operations: Redis down under each failure mode, a reload under load, a bad config, a
//! graceful stop that gives leases back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_ratelimit_testkit::server::{Server, wait_until, wait_until_async};

use crate::harness::{Service, descriptor, on_runtime, request};

const SMALL: &str = r#"
domain: ops
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3, name: per-user, algorithm: token_bucket}
"#;

async fn code(service: &Service, value: &str) -> Result<i32, tonic::Status> {
    let mut client = service.grpc().await;
    client
        .should_rate_limit(request("ops", vec![descriptor(&[("user", value)])]))
        .await
        .map(|response| response.into_inner().overall_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_under_each_failure_mode() {
    for mode in ["allow", "deny", "local"] {
        let mut redis = Server::start(&[]);
        let url = format!("redis://127.0.0.1:{}/", redis.port);
        let service = Service::start(
            &url,
            &[("ops.yaml", SMALL)],
            &["--failure-mode", mode, "--timeout-ms", "100"],
        );
        assert_eq!(
            code(&service, "a").await.unwrap(),
            Code::Ok as i32,
            "{mode}"
        );
        assert!(wait_until(Duration::from_secs(10), || {
            service.http("GET", "/readyz", "", &[]).status == 200
        }));
        redis.kill();
        let mut codes = Vec::new();
        for _ in 0..5 {
            codes.push(code(&service, "b").await.expect("answered, not an error"));
        }
        let ok = codes
            .iter()
            .filter(|code| **code == Code::Ok as i32)
            .count();
        match mode {
            "allow" => assert_eq!(ok, 5, "{mode}: {codes:?}"),
            "deny" => {
                assert_eq!(ok, 0, "{mode}: {codes:?}");
                assert!(
                    wait_until(Duration::from_secs(10), || {
                        service.http("GET", "/readyz", "", &[]).status == 503
                    }),
                    "not ready while the store is gone and the mode denies"
                );
            }
            _ => assert_eq!(
                ok, 3,
                "{mode}: the local share is the quota (1 replica): {codes:?}"
            ),
        }
        if mode != "deny" {
            assert_eq!(
                service.http("GET", "/readyz", "", &[]).status,
                200,
                "{mode}"
            );
        }
        redis.restart(&[]);
        assert!(
            wait_until(Duration::from_secs(15), || {
                service.http("GET", "/readyz", "", &[]).status == 200
            }),
            "{mode}: ready again"
        );
        let (service, redis) = (&service, &redis);
        let back = wait_until_async(Duration::from_secs(15), || async move {
            let _ = code(service, "c").await;
            // The limits' keys (the fleet's top-keys report of the fallback's denials is
            // written too once Redis is back; it says nothing of who decides).
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("rls:*")
                .query(&mut redis.conn())
                .unwrap_or_default();
            !keys.is_empty()
        })
        .await;
        assert!(back, "{mode}: the store decides again");
    }
}

/// Requests of different shapes share a limit (Envoy sends the per-user descriptor with or
/// without the route's, by path): with the store gone, the local fallback gives the user one
/// share of it, not one per shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_fallback_gives_a_key_one_share_whatever_the_request() {
    const NESTED: &str = r#"
domain: ops
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 6, name: per-user, algorithm: token_bucket}
    descriptors:
      - key: route
        rate_limit: {unit: day, requests_per_unit: 100, name: per-route}
"#;
    let mut redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(
        &url,
        &[("ops.yaml", NESTED)],
        &["--failure-mode", "local", "--timeout-ms", "100"],
    );
    redis.kill();
    let mut client = service.grpc().await;
    let mut admitted = 0;
    for round in 0..12 {
        let mut descriptors = vec![descriptor(&[("user", "ann")])];
        if round % 2 == 1 {
            descriptors.push(descriptor(&[("user", "ann"), ("route", "/search")]));
        }
        let answer = client
            .should_rate_limit(request("ops", descriptors))
            .await
            .expect("answered by the fallback")
            .into_inner();
        admitted += usize::from(answer.overall_code == Code::Ok as i32);
    }
    assert_eq!(admitted, 6, "the per-user share, across both shapes");
}

fn versioned(name: &str) -> String {
    format!(
        "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: {{unit: day, requests_per_unit: 1000000, name: {name}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_under_load_fails_no_request() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Arc::new(Service::start(&url, &[("ops.yaml", &versioned("v0"))], &[]));
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for worker in 0..4 {
        let mut client = service.grpc().await;
        let (stop, answered, failed) = (
            Arc::clone(&stop),
            Arc::clone(&answered),
            Arc::clone(&failed),
        );
        load.push(tokio::spawn(async move {
            let mut names = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let value = format!("w{worker}");
                match client
                    .should_rate_limit(request("ops", vec![descriptor(&[("user", &value)])]))
                    .await
                {
                    Ok(response) => {
                        let response = response.into_inner();
                        if response.overall_code != Code::Ok as i32 {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(limit) = &response.statuses[0].current_limit {
                            names.push(limit.name.clone());
                        }
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            names
        }));
    }
    for version in 1..=5 {
        service
            .config
            .write("ops.yaml", &versioned(&format!("v{version}")));
        assert!(
            service.wait_log("config reloaded", version),
            "{}",
            service.log()
        );
    }
    // A last batch of requests on the final config.
    let before = answered.load(Ordering::Relaxed);
    assert!(wait_until(Duration::from_secs(10), || answered
        .load(Ordering::Relaxed)
        > before + 20));
    stop.store(true, Ordering::Relaxed);
    let mut last_names = Vec::new();
    for task in load {
        let names = task.await.unwrap();
        last_names.push(names.last().cloned().unwrap_or_default());
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed");
    assert!(answered.load(Ordering::Relaxed) > 50);
    assert!(last_names.iter().all(|name| name == "v5"), "{last_names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_is_refused_and_the_old_one_served() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("ops.yaml", SMALL)], &[]);
    service.config.write(
        "ops.yaml",
        "domain: ops\ndescriptors:\n  - key: user\n    rate_limt: {unit: day, requests_per_unit: 1}\n",
    );
    assert!(
        service.wait_log("config change refused", 1),
        "{}",
        service.log()
    );
    let log = service.log();
    assert!(
        log.contains("ops.yaml:4: unknown field 'rate_limt' in a descriptor"),
        "{log}"
    );
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(
        metrics.contains("ratelimit_config_reloads_total{result=\"refused\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("ratelimit_config_valid 0"), "{metrics}");
    // The old config is served: 3 a day.
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(code(&service, "old").await.unwrap());
    }
    assert_eq!(
        codes
            .iter()
            .filter(|code| **code == Code::Ok as i32)
            .count(),
        3,
        "{codes:?}"
    );
    // A second file declaring the same domain is refused too, naming both places.
    service.config.write("ops.yaml", SMALL);
    service.config.write("again.yaml", SMALL);
    assert!(
        service.wait_log("is already defined at", 1),
        "{}",
        service.log()
    );

    // At start, a bad config stops the service with the reason.
    let log = Service::fail_to_start(
        &url,
        &[(
            "x.yaml",
            "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        )],
    );
    assert!(log.contains("x.yaml:4: unknown unit 'fortnight'"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_gives_leases_back() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let config = "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100, name: per-user, algorithm: token_bucket}\n";
    let mut leased = Service::start(&url, &[("ops.yaml", config)], &["--lease", "10"]);
    for _ in 0..3 {
        assert_eq!(code(&leased, "l").await.unwrap(), Code::Ok as i32);
    }
    let plain = Service::start(&url, &[("ops.yaml", config)], &[]);
    let left = |service: &Service| {
        let mut probe = descriptor(&[("user", "l")]);
        probe.hits_addend = Some(UInt64Value { value: 0 });
        let grpc = service.grpc;
        on_runtime(async move {
            let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://{grpc}")).await.unwrap();
            client
                .should_rate_limit(request("ops", vec![probe]))
                .await
                .unwrap()
                .into_inner()
                .statuses[0]
                .limit_remaining
        })
    };
    // (The first check may be made before the store's capabilities are known, unleased;
    // then a lease of 10 is claimed.) Three spent, so 97 once the unspent units are back.
    let before = left(&plain);
    assert!(before <= 90, "a lease of 10 units is out: {before}");
    assert!(leased.terminate(), "a clean exit:\n{}", leased.log());
    assert!(leased.log().contains("giving leases back"));
    assert_eq!(left(&plain), 97, "the unspent units came back");
}

/// On a Valkey 9.1 without the module or its Lua engine (its `lua` module unloaded), the
/// service says at start, in one line, what is missing and what to do (the client's backend
/// probe), instead of counting every check as an `error` decision with nothing logged.
#[test]
fn a_valkey_without_the_module_or_lua_is_named_in_the_log_at_start() {
    let server = redis_ratelimit_testkit::server::valkey_without_lua();
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let service = Service::start(&url, &[("ops.yaml", &versioned("v0"))], &[]);
    let wanted = "the ratelimit module is not loaded and the server has no Lua engine";
    assert!(
        wait_until(Duration::from_secs(10), || {
            service.log().contains(wanted)
        }),
        "log:\n{}",
        service.log()
    );
    let line = service
        .log()
        .lines()
        .find(|line| line.contains(wanted))
        .map(str::to_string)
        .unwrap();
    assert!(line.contains("load the module"), "{line}");
}
