//! The HTTP JSON API.

use std::time::Duration;

use redis_ratelimit_testkit::server::{Server, wait_until};
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

/// A service on `redis` whose API takes the bearer token `token`, read from a file in the
/// directory it returns beside it (its `token` file).
fn guarded(redis: &Server, label: &str, token: &str) -> (Service, TempDir) {
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let secrets = TempDir::new(label);
    secrets.write("token", &format!("{token}\n"));
    let token_file = secrets.0.join("token");
    let service = Service::start(
        &url,
        &[("api.yaml", API)],
        &["--http-token-file", token_file.to_str().unwrap()],
    );
    (service, secrets)
}

#[test]
fn a_bearer_token_guards_the_api() {
    let redis = Server::start(&[]);
    let (service, _secrets) = guarded(&redis, "token", "s3cret");
    // (the Authorization field sent, the status, the WWW-Authenticate challenge)
    let cases = [
        (None, 401, Some("Bearer")),
        (Some("Bearer nope"), 401, Some("Bearer")),
        (Some("Bearer s3cret"), 200, None),
    ];
    for (authorization, status, challenge) in cases {
        let fields: Vec<(&str, &str)> = authorization
            .map(|value| ("Authorization", value))
            .into_iter()
            .collect();
        let reply = service.http("POST", "/v1/check", &body("t"), &fields);
        assert_eq!(reply.status, status, "{authorization:?}: {}", reply.body);
        assert_eq!(
            reply.header("www-authenticate"),
            challenge,
            "{authorization:?}"
        );
    }
    assert_eq!(
        service.http("GET", "/healthz", "", &[]).status,
        200,
        "probes need no token"
    );
}

#[test]
fn a_rotated_token_file_is_read_again_and_a_bad_one_keeps_the_old() {
    let redis = Server::start(&[]);
    let (service, secrets) = guarded(&redis, "rotated-token", "first");
    let token_file = secrets.0.join("token");
    let status = |token: &str| {
        let bearer = format!("Bearer {token}");
        service
            .http(
                "POST",
                "/v1/check",
                &body("r"),
                &[("Authorization", &bearer)],
            )
            .status
    };
    assert_eq!(status("first"), 200);
    // Rotated as a secret volume does (a new file swapped in): in force within seconds,
    // without a restart; the old token refused from then on.
    let rotate = |text: &str| {
        secrets.write("token.next", text);
        std::fs::rename(secrets.0.join("token.next"), &token_file).unwrap();
    };
    rotate("second\n");
    assert!(
        wait_until(Duration::from_secs(10), || status("second") == 200),
        "the new token was never read"
    );
    assert_eq!(status("first"), 401);
    // An empty file is no token: logged, and the token in force stays.
    rotate("");
    assert!(
        wait_until(Duration::from_secs(10), || {
            assert_eq!(status("second"), 200, "the token in force stays");
            service
                .log()
                .contains("the token read before stays in force")
        }),
        "{}",
        service.log()
    );
    assert_eq!(status("second"), 200);
    assert!(
        service.log().contains("its new token is in force"),
        "{}",
        service.log()
    );
}

/// A self-signed certificate valid only in January 2020 (`openssl ca`, which can date one).
fn expired_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), "01\n").unwrap();
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = ca\n[ca]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n\
         default_md = sha256\npolicy = any\nunique_subject = no\n[any]\ncommonName = supplied\n\
         [ext]\nsubjectAltName = IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    let openssl = |args: &[&str]| {
        let made = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|error| panic!("openssl is needed for this test: {error}"));
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    };
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
    ]);
    openssl(&[
        "ca",
        "-batch",
        "-config",
        "ca.cnf",
        "-selfsign",
        "-keyfile",
        "key.pem",
        "-in",
        "req.csr",
        "-out",
        "cert.pem",
        "-startdate",
        "20200101000000Z",
        "-enddate",
        "20200201000000Z",
        "-extensions",
        "ext",
        "-notext",
    ]);
    (dir.join("cert.pem"), dir.join("key.pem"))
}

#[test]
fn an_expired_certificate_is_warned_about_and_exported() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let dir = TempDir::new("expired-cert");
    let (cert, key) = expired_certificate(&dir.0);
    let service = Service::start(
        &url,
        &[("api.yaml", API)],
        &[
            "--grpc-tls-cert",
            cert.to_str().unwrap(),
            "--grpc-tls-key",
            key.to_str().unwrap(),
        ],
    );
    let log = service.log();
    assert!(
        log.contains("the grpc listener's certificate is expired") && log.contains("WARN"),
        "{log}"
    );
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(
        metrics.contains(
            "ratelimit_service_tls_certificate_not_after_seconds{listener=\"grpc\"} 1580515200"
        ),
        "2020-02-01: {metrics}"
    );
}
