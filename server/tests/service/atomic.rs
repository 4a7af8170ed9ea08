//! All or nothing: 16 concurrent clients over three descriptors of which one binds, and a
//! Redis Cluster with the descriptors in two slots (the earlier group refunded).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_ratelimit_testkit::cluster::{Cluster, keyslot};
use redis_ratelimit_testkit::server::Server;

use crate::harness::{Service, descriptor, request};

/// Token buckets refilled over a day: during a test, less than one unit comes back.
const RACE: &str = r#"
domain: race
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 100, name: per-user, algorithm: token_bucket}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1000, name: per-tenant, algorithm: token_bucket}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 40, name: per-route, algorithm: token_bucket}
"#;

/// What a limit has left, asked without consuming (hits 0).
async fn remaining(service: &Service, entries: &[(&str, &str)]) -> u32 {
    let mut probe = descriptor(entries);
    probe.hits_addend = Some(UInt64Value { value: 0 });
    let mut client = service.grpc().await;
    let response = client
        .should_rate_limit(request("race", vec![probe]))
        .await
        .unwrap()
        .into_inner();
    response.statuses[0].limit_remaining
}

/// 16 clients at once, each sending `request()` `calls` times; every denial goes through
/// `check_denied`. Returns how many were admitted.
async fn race(
    service: &Service,
    calls: usize,
    request: fn() -> RateLimitRequest,
    check_denied: fn(&RateLimitResponse),
) -> u32 {
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = service.grpc().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u32;
            for _ in 0..calls {
                let response = client
                    .should_rate_limit(request())
                    .await
                    .unwrap()
                    .into_inner();
                if response.overall_code == Code::Ok as i32 {
                    admitted += 1;
                } else {
                    check_denied(&response);
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_all_or_nothing() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("race.yaml", RACE)], &[]);
    let three = || {
        request(
            "race",
            vec![
                descriptor(&[("user", "u1")]),
                descriptor(&[("tenant", "t1")]),
                descriptor(&[("route", "r1")]),
            ],
        )
    };
    let admitted = race(&service, 10, three, |denied| {
        assert_eq!(denied.statuses[2].code, Code::OverLimit as i32);
        assert_eq!(denied.statuses[0].code, Code::Ok as i32);
    })
    .await;
    assert_eq!(admitted, 40, "exactly the binding limit's quota");
    assert_eq!(remaining(&service, &[("route", "r1")]).await, 0);
    assert_eq!(
        remaining(&service, &[("user", "u1")]).await,
        100 - 40,
        "no denial charged it"
    );
    assert_eq!(remaining(&service, &[("tenant", "t1")]).await, 1000 - 40);
}

/// On a cluster: the most specific descriptor ([tenant, user]) is called first, the route
/// binds last, so every denial refunds the groups charged before it.
const CLUSTER: &str = r#"
domain: race
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1000, name: per-tenant, algorithm: token_bucket}
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 100, name: tenant-user, algorithm: token_bucket}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 5, name: per-route, algorithm: token_bucket}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_with_descriptors_in_two_slots_refunds() {
    let cluster = Cluster::start(3, 0);
    let nodes: Vec<String> = cluster
        .primaries()
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}/", node.port))
        .collect();
    let service = Service::start(&nodes.join(","), &[("race.yaml", CLUSTER)], &["--cluster"]);
    let specific = "rls:race:tenant=t2:user=u2|token_bucket:86400";
    let route = "rls:race:route=r2|token_bucket:86400";
    assert_ne!(
        keyslot(specific),
        keyslot(route),
        "the test needs two slots"
    );
    let three = || {
        request(
            "race",
            vec![
                descriptor(&[("tenant", "t2")]),
                descriptor(&[("route", "r2")]),
                descriptor(&[("tenant", "t2"), ("user", "u2")]),
            ],
        )
    };
    let admitted = race(&service, 2, three, |denied| {
        assert_eq!(denied.statuses[1].code, Code::OverLimit as i32);
    })
    .await;
    assert_eq!(admitted, 5, "the route's bound");
    assert_eq!(remaining(&service, &[("route", "r2")]).await, 0);
    assert_eq!(
        remaining(&service, &[("tenant", "t2"), ("user", "u2")]).await,
        100 - 5,
        "charged first, refunded on every denial"
    );
    assert_eq!(remaining(&service, &[("tenant", "t2")]).await, 1000 - 5);
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("ratelimit_group_refunds_total") && !line.ends_with(" 0")),
        "{metrics}"
    );
}
