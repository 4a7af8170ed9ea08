//! What an operator sees (docs/operating.md): the descriptor counters under the reference's
//! names, the decision metrics naming the limit and the key class (a plan's name for a
//! `tenant_key` rule), each limit's quota and window, the store latency as a histogram, and
//! the fleet's top denied keys at `GET /v1/top` with the concentration gauge.

use std::time::Duration;

use redis_ratelimit_plans::PlanServer;
use redis_ratelimit_plans::edit;
use redis_ratelimit_testkit::server::{Server, wait_until};
use serde_json::Value;

use crate::harness::{Service, on_runtime};
use crate::plans::{change, limits};

const CONFIG: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-key}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-minute, algorithm: sliding_window, tenant_key: tenant}
"#;

fn body(key: &str, value: &str) -> String {
    format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
    )
}

/// The value of the series `name{labels}` (labels as Prometheus writes them), if exported.
fn series(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(name_and_labels)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// Plan `gold` (3 a minute) and tenant `acme` on it.
fn acme_on_gold(url: String) {
    on_runtime(async move {
        let server = PlanServer::from_url(&url, Duration::from_secs(2)).unwrap();
        let mut con = server.connect().await.unwrap();
        change(&mut con, |snapshot| {
            let gold = limits(&["per-minute=sliding:3/60s"]);
            let mut edits = edit::plan_set(snapshot, "gold", &gold).unwrap();
            let mut with_plan = snapshot.clone();
            with_plan.plans.insert("gold".into(), gold);
            edits.extend(edit::tenant_set(&with_plan, "acme", "gold").unwrap());
            edits
        })
        .await;
    });
}

#[test]
fn operators_see_the_limit_its_class_its_quota_and_who_is_throttled() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    acme_on_gold(url.clone());
    let service = Service::start(&url, &[("api.yaml", CONFIG)], &[]);
    // per-key: 2 a minute, three checks: admitted, admitted (none left: near), denied.
    for _ in 0..3 {
        service.check_json(&body("api_key", "k1"));
    }
    // acme on plan gold (3 a minute): four checks, the fourth denied.
    for _ in 0..4 {
        service.check_json(&body("tenant", "acme"));
    }
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    let get = |name: &str| series(&metrics, name).unwrap_or_else(|| panic!("{name} in {metrics}"));
    let rule = r#"domain="api",rule="api_key""#;
    assert_eq!(
        get(&format!(
            "ratelimit_service_rate_limit_total_hits{{{rule}}}"
        )),
        3.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_service_rate_limit_over_limit{{{rule}}}"
        )),
        1.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_service_rate_limit_within_limit{{{rule}}}"
        )),
        2.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_service_rate_limit_near_limit{{{rule}}}"
        )),
        1.0
    );
    assert_eq!(
        get(&format!(
            "ratelimit_service_rate_limit_shadow_mode{{{rule}}}"
        )),
        0.0
    );
    let per_key = r#"policy="api",limit="per-key",key_class="default""#;
    assert_eq!(
        get(&format!(
            r#"ratelimit_decisions_total{{{per_key},outcome="denied",source="store",backend="module"}}"#
        )),
        1.0
    );
    assert_eq!(get(&format!("ratelimit_limit_quota{{{per_key}}}")), 2.0);
    assert_eq!(
        get(&format!("ratelimit_limit_window_seconds{{{per_key}}}")),
        60.0
    );
    assert_eq!(
        get(&format!("ratelimit_near_limit_total{{{per_key}}}")),
        1.0
    );
    // The tenant's plan is the key class; the tenant appears in no label.
    let gold = r#"policy="api",limit="per-minute",key_class="gold""#;
    assert_eq!(
        get(&format!(
            r#"ratelimit_decisions_total{{{gold},outcome="denied",source="store",backend="module"}}"#
        )),
        1.0
    );
    assert_eq!(get(&format!("ratelimit_limit_quota{{{gold}}}")), 3.0);
    assert!(
        !metrics.contains("acme") && !metrics.contains("k1"),
        "{metrics}"
    );
    assert_eq!(
        get(r#"ratelimit_fallback_mode{policy="api",mode="local"}"#),
        1.0
    );
    // A histogram with buckets (aggregated across replicas by histogram_quantile).
    assert!(
        metrics.contains(
            r#"ratelimit_store_latency_seconds_bucket{policy="api",op="acquire",le="0.0005"}"#
        ),
        "{metrics}"
    );

    // Who is throttled: written within a second, read merged.
    let mut top = Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let reply = service.http("GET", "/v1/top?policy=api&minutes=2", "", &[]);
            top = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
            top["limits"]
                .as_array()
                .is_some_and(|limits| limits.len() == 2)
        }),
        "{top}"
    );
    let limits = top["limits"].as_array().unwrap();
    let of = |name: &str| limits.iter().find(|limit| limit["limit"] == name).unwrap();
    let per_key = of("per-key");
    assert_eq!(per_key["denials"], 1);
    assert_eq!(per_key["keys"][0]["count"], 1);
    assert!(
        per_key["keys"][0]["key"]
            .as_str()
            .unwrap()
            .contains("api_key=k1"),
        "{top}"
    );
    assert_eq!(per_key["bound"], 0, "every denied key listed: exact");
    assert_eq!(per_key["top10_share"], 1.0);
    let per_minute = of("per-minute");
    assert!(
        per_minute["keys"][0]["key"]
            .as_str()
            .unwrap()
            .contains("acme"),
        "{top}"
    );
    // The concentration, fleet-wide, as a gauge.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let metrics = service.http("GET", "/metrics", "", &[]).body;
            series(
                &metrics,
                r#"ratelimit_denied_top10_share{policy="api",limit="per-key"}"#,
            ) == Some(1.0)
                && series(
                    &metrics,
                    r#"ratelimit_denied_window{policy="api",limit="per-key"}"#,
                ) == Some(1.0)
        }),
        "{}",
        service.http("GET", "/metrics", "", &[]).body
    );
    for (bad, reason) in [
        ("/v1/top", "required"),
        ("/v1/top?policy=api&minutes=0", "minutes"),
        ("/v1/top?policy=api&count=x", "count"),
        ("/v1/top?policy=api&colour=red", "colour"),
    ] {
        let reply = service.http("GET", bad, "", &[]);
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
        assert!(reply.body.contains(reason), "{bad}: {}", reply.body);
    }
}
