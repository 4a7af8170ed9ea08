//! Plans for Envoy traffic: a limit with `tenant_key` takes the tenant's limit from the
//! policy store (written here through the client's store API, as `rlctl` writes it), the
//! YAML limit staying the default; a change of plan or an override applies within a second
//! and to the tenant's existing state.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_plans::PlanServer;
use redis_ratelimit_plans::spec::{LimitSpec, Pattern};
use redis_ratelimit_plans::{edit, plan_store};
use redis_ratelimit_testkit::cluster::{Cluster, keyslot};
use redis_ratelimit_testkit::sentinel::Sentinel;
use redis_ratelimit_testkit::server::Server;
use tonic::transport::Channel;

use crate::harness::{Service, descriptor, request};

pub(super) const PLANS: &str = r#"
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-minute, algorithm: sliding_window, tenant_key: tenant}
"#;

/// One change of the store, checked and written as `rlctl` does.
pub(super) async fn change(
    con: &mut (impl redis::aio::ConnectionLike + Send),
    edits: impl FnOnce(&redis_ratelimit_plans::snapshot::Snapshot) -> Vec<edit::Edit>,
) {
    let (snapshot, _) = plan_store::read(con).await.unwrap();
    let edits = edits(&snapshot);
    plan_store::write(con, snapshot.version, "test", "change", &edits)
        .await
        .unwrap();
}

/// Plan `small` (3 a minute) and tenant `acme` on it, in one change.
fn acme_on_a_small_plan(snapshot: &redis_ratelimit_plans::snapshot::Snapshot) -> Vec<edit::Edit> {
    let small = limits(&["per-minute=sliding:3/60s"]);
    let mut edits = edit::plan_set(snapshot, "small", &small).unwrap();
    let mut with_plan = snapshot.clone();
    with_plan.plans.insert("small".into(), small);
    edits.extend(edit::tenant_set(&with_plan, "acme", "small").unwrap());
    edits
}

pub(super) fn limits(texts: &[&str]) -> Vec<LimitSpec> {
    texts
        .iter()
        .map(|text| LimitSpec::parse(text).unwrap())
        .collect()
}

async fn check(client: &mut RateLimitServiceClient<Channel>, tenant: &str) -> RateLimitResponse {
    client
        .should_rate_limit(request("api", vec![descriptor(&[("tenant", tenant)])]))
        .await
        .unwrap()
        .into_inner()
}

/// Requests admitted for `tenant` until the first denial (at most 20).
async fn admitted(client: &mut RateLimitServiceClient<Channel>, tenant: &str) -> u64 {
    for count in 0..20 {
        if check(client, tenant).await.overall_code != Code::Ok as i32 {
            return count;
        }
    }
    20
}

/// Polls until `tenant` is admitted again (bounded); returns how long it took.
async fn until_admitted(client: &mut RateLimitServiceClient<Channel>, tenant: &str) -> Duration {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if check(client, tenant).await.overall_code == Code::Ok as i32 {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{tenant} was never admitted again within 3 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_gets_its_plan_and_follows_changes() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    change(&mut con, acme_on_a_small_plan).await;
    change(&mut con, |snapshot| {
        edit::plan_set(snapshot, "big", &limits(&["per-minute=sliding:6/60s"])).unwrap()
    })
    .await;
    let service = Service::start(&url, &[("plans.yaml", PLANS)], &["--plans-check-ms", "200"]);
    assert!(
        service.log().contains("plans: policy store at version 2"),
        "the plan source's status is not in the log:\n{}",
        service.log()
    );
    let mut client = service.grpc().await;

    // acme has its plan's 3 a minute, and reports it; another tenant the YAML's 2.
    let first = check(&mut client, "acme").await;
    let status = &first.statuses[0];
    assert_eq!(status.current_limit.as_ref().unwrap().requests_per_unit, 3);
    assert_eq!(status.limit_remaining, 2);
    assert_eq!(admitted(&mut client, "acme").await, 2);
    assert_eq!(admitted(&mut client, "other").await, 2);

    // To the bigger plan: within a second, and on the same state (3 used of 6).
    change(&mut con, |snapshot| {
        edit::tenant_set(snapshot, "acme", "big").unwrap()
    })
    .await;
    let took = until_admitted(&mut client, "acme").await;
    assert!(
        took <= Duration::from_secs(1),
        "the plan change took {took:?}"
    );
    assert_eq!(
        admitted(&mut client, "acme").await,
        2,
        "6 in all, not a reset"
    );

    // An override raises it, again on the same state.
    change(&mut con, |snapshot| {
        edit::override_set(
            snapshot,
            &Pattern::parse("acme").unwrap(),
            &limits(&["per-minute=sliding:8/60s"]),
            false,
            None,
        )
        .unwrap()
    })
    .await;
    let took = until_admitted(&mut client, "acme").await;
    assert!(took <= Duration::from_secs(1), "the override took {took:?}");
    assert_eq!(admitted(&mut client, "acme").await, 1, "8 in all");
    assert_eq!(
        admitted(&mut client, "other").await,
        0,
        "the default is untouched"
    );

    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(
        metrics.contains("ratelimit_plans_version 4"),
        "no plan metrics:\n{metrics}"
    );
    assert!(metrics.contains("ratelimit_plans_loaded 1"));
}

/// On a cluster, the service given only nodes that do not own the `{rl-policy}` slot reads
/// the store through the slot's primary and follows a change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_store_is_read_through_its_slot_owner() {
    let cluster = Cluster::start(3, 0);
    let owner = cluster.owner(keyslot(plan_store::VERSION_KEY)).port;
    let others: Vec<String> = cluster
        .primaries()
        .iter()
        .filter(|node| node.port != owner)
        .map(|node| format!("redis://127.0.0.1:{}/", node.port))
        .collect();
    let nodes: Vec<&str> = others.iter().map(String::as_str).collect();
    let mut con = PlanServer::cluster(&nodes, Duration::from_secs(5))
        .unwrap()
        .connect()
        .await
        .unwrap();
    change(&mut con, acme_on_a_small_plan).await;
    serves_the_plan_and_follows(&others.join(","), &["--cluster"], &mut con).await;
}

/// Through Redis Sentinel: the store is on the primary the sentinel names, for `rlctl`'s
/// connection (the client's `PlanServer`) and the service's `--redis redis+sentinel://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sentinel_the_store_is_read_on_the_primary_it_names() {
    let primary = Server::start(&[]);
    let sentinel = Sentinel::start(&primary, "plans");
    let mut con = PlanServer::from_url(&sentinel.url(), Duration::from_secs(5))
        .unwrap()
        .connect()
        .await
        .unwrap();
    change(&mut con, acme_on_a_small_plan).await;
    let version: Option<u64> = redis::cmd("GET")
        .arg(plan_store::VERSION_KEY)
        .query(&mut primary.conn())
        .unwrap();
    assert_eq!(version, Some(1), "the change is on the primary");
    serves_the_plan_and_follows(&sentinel.url(), &[], &mut con).await;
}

/// With the store at version 1 (acme on plan `small`, 3 a minute): a service on `redis`
/// (with `extra` flags) reads it, gives acme 3, and follows a raise to 5 within a second.
async fn serves_the_plan_and_follows(
    redis: &str,
    extra: &[&str],
    con: &mut (impl redis::aio::ConnectionLike + Send),
) {
    let mut flags = extra.to_vec();
    flags.extend(["--plans-check-ms", "200"]);
    let service = Service::start(redis, &[("plans.yaml", PLANS)], &flags);
    assert!(
        service.log().contains("plans: policy store at version 1"),
        "the plan source's status is not in the log:\n{}",
        service.log()
    );
    let mut client = service.grpc().await;
    assert_eq!(admitted(&mut client, "acme").await, 3);
    change(con, |snapshot| {
        edit::plan_set(snapshot, "small", &limits(&["per-minute=sliding:5/60s"])).unwrap()
    })
    .await;
    let took = until_admitted(&mut client, "acme").await;
    assert!(took <= Duration::from_secs(1), "the change took {took:?}");
    assert_eq!(admitted(&mut client, "acme").await, 1, "5 in all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_applies_without_a_store_read() {
    // Nothing listens at this port: the YAML limit applies, and the log says why.
    let service = Service::start(
        "redis://127.0.0.1:1/",
        &[("plans.yaml", PLANS)],
        &["--failure-mode", "local", "--timeout-ms", "100"],
    );
    assert!(
        service.log().contains("policy store not read yet"),
        "{}",
        service.log()
    );
    let mut client = service.grpc().await;
    let first = check(&mut client, "acme").await;
    assert_eq!(
        first.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        2
    );
}

#[test]
fn a_bad_tenant_key_is_refused_with_its_line() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    for (config, reason) in [
        (
            "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 2, name: n, tenant_key: user}\n",
            "bad.yaml:4: 'tenant_key: user' is not a key of descriptor 'tenant'",
        ),
        (
            "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n      tenant_key: tenant\n",
            "bad.yaml:7: a limit with 'tenant_key' needs a 'name'",
        ),
        (
            "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 2, name: n, tenant_keys: tenant}\n",
            "bad.yaml:4: unknown field 'tenant_keys'",
        ),
    ] {
        let log = Service::fail_to_start(&url, &[("bad.yaml", config)]);
        assert!(log.contains(reason), "expected '{reason}' in:\n{log}");
    }
}
