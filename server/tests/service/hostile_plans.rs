//! Hostile and careless input the service answers through the client library, each the
//! reproduction of an outside review's finding: in-flight ids guessed and released by
//! another caller, a tenant value the store would refuse resolving a tenant's override, and
//! a policy store rebuilt at a lower version.

use std::time::Duration;

use redis_ratelimit_plans::spec::Pattern;
use redis_ratelimit_plans::{edit, plan_store};
use redis_ratelimit_testkit::server::{Server, wait_until_async};

use crate::harness::Service;
use crate::plans::{PLANS, change, limits};

const IN_FLIGHT: &str = r#"
domain: api
descriptors:
  - key: backend
    rate_limit: {unit: hour, requests_per_unit: 2, name: in-flight, algorithm: concurrency}
"#;

fn backend(value: &str) -> String {
    format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"backend","value":"{value}"}}]}}]}}"#
    )
}

fn tenant(value: &str) -> String {
    let value = serde_json::to_string(value).unwrap();
    format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"tenant","value":{value}}}]}}]}}"#
    )
}

/// Ids next to `id` as a guesser would make them: its trailing hex digits counted up and
/// down (the id's own width kept).
fn neighbours(id: &str) -> Vec<String> {
    let digits = id
        .chars()
        .rev()
        .take_while(char::is_ascii_hexdigit)
        .count()
        .min(32);
    let (prefix, tail) = id.split_at(id.len() - digits);
    let Ok(number) = u128::from_str_radix(tail, 16) else {
        return Vec::new();
    };
    (1..=16u128)
        .flat_map(|step| [number.wrapping_sub(step), number.wrapping_add(step)])
        .map(|guess| {
            let text = format!("{guess:x}");
            let padded = if tail.len() > text.len() && tail.starts_with('0') {
                format!("{guess:0width$x}", width = tail.len())
            } else {
                text
            };
            format!("{prefix}{padded}")
        })
        .collect()
}

/// The review's attack: a limit of 2, the victim holding both slots; the attacker takes a
/// slot of another key, then releases the ids next to its own. None of them is the
/// victim's: the limit still admits no third request, and the victim's own release works.
#[test]
fn an_in_flight_id_cannot_be_guessed_and_released_by_another_caller() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("api.yaml", IN_FLIGHT)], &[]);
    let victim: Vec<String> = (0..2)
        .map(|_| {
            let (status, answer) = service.check_json(&backend("db"));
            assert_eq!(
                (status, &answer["allowed"]),
                (200, &true.into()),
                "{answer}"
            );
            answer["inFlight"].as_str().unwrap().to_string()
        })
        .collect();
    let (_, own) = service.check_json(&backend("attacker"));
    let own = own["inFlight"].as_str().unwrap().to_string();
    let mut released = 0;
    for guess in neighbours(&own) {
        let body = format!(r#"{{"inFlight":"{guess}"}}"#);
        if service.http("POST", "/v1/release", &body, &[]).status == 200 {
            released += 1;
        }
    }
    let (_, third) = service.check_json(&backend("db"));
    assert_eq!(
        (released, &third["allowed"]),
        (0, &false.into()),
        "ids guessed from {own} released slots, and a limit of 2 admitted a third"
    );
    assert!(
        own.len() >= 32,
        "an id of {} characters ({own}) is too short to be unguessable",
        own.len()
    );
    for id in &victim {
        let body = format!(r#"{{"inFlight":"{id}"}}"#);
        assert_eq!(service.http("POST", "/v1/release", &body, &[]).status, 200);
    }
    // Ids do not repeat, nor share anything a guesser could count from.
    let ids: Vec<String> = (0..2)
        .map(|_| {
            service.check_json(&backend("db")).1["inFlight"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let common = ids[0]
        .chars()
        .zip(ids[1].chars())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        common < 8,
        "consecutive ids {ids:?} share a {common}-character prefix"
    );
}

/// Plan `pro`, acme on it, and acme's override of `per-minute` to 5000 (version 3).
async fn acme_at_5000(con: &mut (impl redis::aio::ConnectionLike + Send)) {
    change(con, |s| {
        edit::plan_set(s, "pro", &limits(&["per-minute=sliding:1000/60s"])).unwrap()
    })
    .await;
    change(con, |s| edit::tenant_set(s, "acme", "pro").unwrap()).await;
    change(con, |s| {
        let acme = Pattern::parse("acme").unwrap();
        edit::override_set(
            s,
            &acme,
            &limits(&["per-minute=sliding:5000/60s"]),
            false,
            None,
        )
        .unwrap()
    })
    .await;
}

/// A server whose store has acme at 5000, the service following it (and answering so),
/// and a connection to the store.
async fn serving_acme_at_5000() -> (Server, Service, redis::aio::MultiplexedConnection) {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let mut con = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    acme_at_5000(&mut con).await;
    let service = Service::start(&url, &[("plans.yaml", PLANS)], &["--plans-check-ms", "200"]);
    assert_eq!(quota(&service, "acme"), 5000);
    (redis, service, con)
}

/// The quota the service reports for a tenant value.
fn quota(service: &Service, value: &str) -> u64 {
    let (status, answer) = service.check_json(&tenant(value));
    assert_eq!(status, 200, "{answer}");
    answer["statuses"][0]["currentLimit"]["requestsPerUnit"]
        .as_u64()
        .unwrap()
}

/// A tenant value `rlctl` refuses (`acme per-minute`: a space) is no tenant: it gets the
/// YAML default, never acme's override (whose store field it spells).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_value_the_store_refuses_never_resolves_a_tenants_override() {
    let (_redis, service, _con) = serving_acme_at_5000().await;
    for value in ["acme per-minute", "acme ", "acme*", "ac{me}"] {
        assert_eq!(quota(&service, value), 2, "tenant value {value:?}");
    }
}

/// The review's sequence, as the service sees it: version 3 with acme at 5000; the four
/// content keys deleted; rebuilt to version 2 with acme at 7. The service answers 7, and its
/// metric says version 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_rebuilt_at_a_lower_version_is_served_and_reported() {
    let (_redis, service, mut con) = serving_acme_at_5000().await;
    let _: u64 = redis::cmd("DEL")
        .arg(plan_store::VERSION_KEY)
        .arg(plan_store::PLANS_KEY)
        .arg(plan_store::TENANTS_KEY)
        .arg(plan_store::OVERRIDES_KEY)
        .query_async(&mut con)
        .await
        .unwrap();
    change(&mut con, |s| {
        edit::plan_set(s, "small", &limits(&["per-minute=sliding:7/60s"])).unwrap()
    })
    .await;
    change(&mut con, |s| edit::tenant_set(s, "acme", "small").unwrap()).await;
    let service = &service;
    let moved = wait_until_async(Duration::from_secs(3), || async move {
        quota(service, "acme") == 7
    })
    .await;
    assert!(
        moved,
        "after 3 s acme still has {} (the old store's override)",
        quota(service, "acme")
    );
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(
        metrics.contains("ratelimit_plans_version 2"),
        "the metric does not say version 2:\n{}",
        metrics
            .lines()
            .filter(|line| line.contains("plans"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
