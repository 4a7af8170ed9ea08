//! The HTTP JSON API.

use redis_ratelimit_testkit::server::Server;
use serde_json::json;

use crate::harness::{Service, TempDir};

const API: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-key}
  - key: backend
    rate_limit: {unit: minute, requests_per_unit: 2, name: in-flight, algorithm: concurrency}
"#;

fn body(key: &str) -> String {
    format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"api_key","value":"{key}"}}]}}],"hitsAddend":1}}"#
    )
}

#[test]
fn checks_statuses_headers_and_problems() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("api.yaml", API)], &[]);
    assert!(
        !service.log().contains("plans:"),
        "a config without tenant_key follows no policy store"
    );
    for left in [1, 0] {
        let (status, answer) = service.check_json(&body("k1"));
        assert_eq!(status, 200);
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["overallCode"], "OK");
        assert_eq!(answer["status"], 200);
        assert_eq!(
            (&answer["decidedBy"], &answer["backend"]),
            (&json!("store"), &json!("module"))
        );
        let first = &answer["statuses"][0];
        assert_eq!(first["code"], "OK");
        assert_eq!(first["currentLimit"]["name"], "per-key");
        assert_eq!(first["currentLimit"]["unit"], "MINUTE");
        assert_eq!(first["limitRemaining"], left);
        assert!(first["durationUntilReset"].as_str().unwrap().ends_with('s'));
        assert_eq!(
            answer["headers"]["ratelimit-policy"],
            "\"per-key\";q=2;w=60"
        );
    }
    let (_, denied) = service.check_json(&body("k1"));
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["overallCode"], "OVER_LIMIT");
    assert_eq!(denied["status"], 429);
    assert_eq!(denied["deniedBy"][0], "per-key");
    assert_eq!(denied["backend"], "module");
    assert!(denied["headers"]["retry-after"].as_str().is_some());
    // snake_case field names are proto3 JSON too.
    let (_, snake) = service.check_json(
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k2"}],"hits_addend":"2"}]}"#,
    );
    assert_eq!(snake["statuses"][0]["limitRemaining"], 0);

    for (bad, reason) in [
        ("{", "malformed JSON"),
        (
            r#"{"domain":"api","descriptors":[{"entriez":[]}]}"#,
            "entriez",
        ),
        (
            r#"{"domain":"nope","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}"#,
            "unknown domain 'nope'",
        ),
        (
            r#"{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"x"}],"limit":{"requestsPerUnit":1,"unit":"FORTNIGHT"}}]}"#,
            "unit",
        ),
    ] {
        let reply = service.http("POST", "/v1/check", bad, &[]);
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        let problem: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(problem["status"], 400);
        assert!(
            problem["detail"].as_str().unwrap().contains(reason),
            "{}",
            reply.body
        );
    }
    assert_eq!(service.http("GET", "/healthz", "", &[]).status, 200);
    assert_eq!(service.http("GET", "/readyz", "", &[]).status, 200);
    let metrics = service.http("GET", "/metrics", "", &[]);
    assert!(
        metrics.body.contains("ratelimit_service_requests_total{"),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("ratelimit_decisions_total{"),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .lines()
            .filter(|line| line.starts_with("ratelimit_decisions_total{"))
            .all(|line| line.contains("backend=\"module\"")),
        "{}",
        metrics.body
    );
}

/// On a server without the module the service runs the Functions library, and says so.
#[test]
fn the_answer_names_the_backend_that_decided() {
    let redis = Server::start_without_module(&["--enable-module-command", "no"]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("api.yaml", API)], &[]);
    let (status, answer) = service.check_json(&body("k1"));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (&answer["decidedBy"], &answer["backend"]),
        (&json!("store"), &json!("functions"))
    );
    drop(redis);
    // Redis gone: the failure mode decides, and no backend did.
    let (_, fallback) = service.check_json(&body("k3"));
    assert_eq!(fallback["decidedBy"], "fallback", "{fallback}");
    assert!(fallback.get("backend").is_none(), "{fallback}");
}

#[test]
fn in_flight_limits_are_released() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("api.yaml", API)], &[]);
    let backend =
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"backend","value":"db"}]}]}"#;
    let (_, first) = service.check_json(backend);
    let (_, second) = service.check_json(backend);
    let (_, third) = service.check_json(backend);
    assert_eq!(
        (
            first["allowed"].clone(),
            second["allowed"].clone(),
            third["allowed"].clone()
        ),
        (true.into(), true.into(), false.into())
    );
    let id = first["inFlight"].as_str().unwrap();
    let release = format!(r#"{{"inFlight":"{id}"}}"#);
    assert_eq!(
        service.http("POST", "/v1/release", &release, &[]).status,
        200
    );
    assert_eq!(
        service.http("POST", "/v1/release", &release, &[]).status,
        404,
        "released once"
    );
    let (_, again) = service.check_json(backend);
    assert_eq!(again["allowed"], true, "the slot came back");
}

#[test]
fn a_bearer_token_guards_the_api() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let secrets = TempDir::new("token");
    secrets.write("token", "s3cret\n");
    let token_file = secrets.0.join("token");
    let service = Service::start(
        &url,
        &[("api.yaml", API)],
        &["--http-token-file", token_file.to_str().unwrap()],
    );
    let refused = service.http("POST", "/v1/check", &body("t"), &[]);
    assert_eq!(refused.status, 401);
    assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
    let wrong = service.http(
        "POST",
        "/v1/check",
        &body("t"),
        &[("Authorization", "Bearer nope")],
    );
    assert_eq!(wrong.status, 401);
    let allowed = service.http(
        "POST",
        "/v1/check",
        &body("t"),
        &[("Authorization", "Bearer s3cret")],
    );
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(
        service.http("GET", "/healthz", "", &[]).status,
        200,
        "probes need no token"
    );
}
