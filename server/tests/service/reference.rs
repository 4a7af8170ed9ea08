//! The service against envoyproxy/ratelimit's own expectations, on a real Redis with the
//! module, over gRPC and both HTTP APIs (`/json`, the reference's; `/v1/check`, this
//! service's): its README examples 1-8 (`tests/reference/readme/`), the request/answer
//! expectations of its `ratelimit_test.go` and `integration_test.go` (the latter on its
//! runtime layout, `tests/reference/runtime/`, read through `RUNTIME_ROOT` and
//! `RUNTIME_SUBDIRECTORY`), the defects a migration from it met, and its deployment
//! surface (environment variables, `/json`, `/healthcheck`). Where the service differs on
//! purpose (an unknown domain, all or nothing, the header fields), the difference is
//! tested as documented in the README.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::google::protobuf::UInt64Value;
use envoy_types::pb::google::protobuf::value::Kind;
use redis_ratelimit_testkit::server::{Server, wait_until};
use serde_json::{Value, json};

use crate::harness::{self, Service, TempDir, certificate, redis_url, tls_redis};

/// How a request reaches the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// Envoy's RLS v3.
    Grpc,
    /// The reference's `POST /json`.
    Json,
    /// This service's `POST /v1/check`.
    V1,
}

const EVERY_WAY: [Via; 3] = [Via::Grpc, Via::Json, Via::V1];

/// One descriptor of a request: its entries and its own hits.
type Ask<'a> = (&'a [(&'a str, &'a str)], Option<u64>);

/// A status as every transport can say it: the code, the limit (requests per unit, unit)
/// and what is left.
type Said = (&'static str, Option<(u64, &'static str)>, u64);

/// A status as an answer says it (owned).
type Status = (String, Option<(u64, String)>, u64);

/// A status borrowed from an answer.
type Shown<'a> = (&'a str, Option<(u64, &'a str)>, u64);

/// An answer: overall OK, each status, and each status's reset (if it has one).
#[derive(Debug)]
struct Answer {
    ok: bool,
    statuses: Vec<Status>,
    resets: Vec<Option<Duration>>,
}

impl Answer {
    fn said(&self) -> Vec<Shown<'_>> {
        self.statuses
            .iter()
            .map(|(code, limit, remaining)| {
                (
                    code.as_str(),
                    limit.as_ref().map(|(rpu, unit)| (*rpu, unit.as_str())),
                    *remaining,
                )
            })
            .collect()
    }

    fn expect(&self, ok: bool, said: &[Said], context: &str) {
        assert_eq!(self.ok, ok, "{context}: {self:?}");
        let expected: Vec<Shown<'_>> = said.to_vec();
        assert_eq!(self.said(), expected, "{context}");
    }
}

fn unit_name(unit: i32) -> String {
    Unit::try_from(unit)
        .map(|unit| unit.as_str_name().to_string())
        .unwrap_or_default()
}

fn seconds(text: &str) -> Duration {
    Duration::from_secs_f64(text.trim_end_matches('s').parse::<f64>().unwrap())
}

fn grpc_request(domain: &str, descriptors: &[Ask<'_>], hits: u32) -> RateLimitRequest {
    let mut request = harness::request(
        domain,
        descriptors
            .iter()
            .map(|(entries, own)| RateLimitDescriptor {
                hits_addend: own.map(|value| UInt64Value { value }),
                ..harness::descriptor(entries)
            })
            .collect(),
    );
    request.hits_addend = hits;
    request
}

fn json_request(domain: &str, descriptors: &[Ask<'_>], hits: u32) -> String {
    let descriptors: Vec<Value> = descriptors
        .iter()
        .map(|(entries, own)| {
            let entries: Vec<Value> = entries
                .iter()
                .map(|(key, value)| json!({"key": key, "value": value}))
                .collect();
            let mut descriptor = json!({ "entries": entries });
            if let Some(own) = own {
                descriptor["hitsAddend"] = json!(own.to_string());
            }
            descriptor
        })
        .collect();
    json!({"domain": domain, "descriptors": descriptors, "hitsAddend": hits}).to_string()
}

/// Asks `service` one request `via` a transport.
/// README Example 3 (defects 7 and 8): the blocked address (0 per second) and another
/// beside it: denied; the other was not charged, so it has 10 left; both reset within the
/// second.
async fn blocked_and_another(service: &Service, via: Via, context: &str) {
    let answer = ask(
        service,
        via,
        "readme-3",
        &[
            (&[("client_ip", "198.51.100.7")], None),
            (&[("client_ip", "198.51.100.9")], None),
        ],
    )
    .await;
    answer.expect(
        false,
        &[
            ("OVER_LIMIT", Some((0, "SECOND")), 0),
            ("OK", Some((10, "SECOND")), 10),
        ],
        &format!("{context}: the other address was not charged, so it has 10 left"),
    );
    for reset in &answer.resets {
        let reset = reset.unwrap_or_else(|| panic!("{context}: both have a reset"));
        assert!(
            reset > Duration::ZERO && reset <= Duration::from_secs(1),
            "{context}: {reset:?}"
        );
    }
}

async fn ask(service: &Service, via: Via, domain: &str, descriptors: &[Ask<'_>]) -> Answer {
    ask_hits(service, via, domain, descriptors, 0).await
}

async fn ask_hits(
    service: &Service,
    via: Via,
    domain: &str,
    descriptors: &[Ask<'_>],
    hits: u32,
) -> Answer {
    if via == Via::Grpc {
        let response = service
            .grpc()
            .await
            .should_rate_limit(grpc_request(domain, descriptors, hits))
            .await
            .unwrap()
            .into_inner();
        return Answer {
            ok: response.overall_code == Code::Ok as i32,
            statuses: response
                .statuses
                .iter()
                .map(|status| {
                    (
                        Code::try_from(status.code)
                            .unwrap()
                            .as_str_name()
                            .to_string(),
                        status.current_limit.as_ref().map(|limit| {
                            (u64::from(limit.requests_per_unit), unit_name(limit.unit))
                        }),
                        u64::from(status.limit_remaining),
                    )
                })
                .collect(),
            resets: response
                .statuses
                .iter()
                .map(|status| {
                    status.duration_until_reset.as_ref().map(|reset| {
                        Duration::new(
                            u64::try_from(reset.seconds).unwrap(),
                            u32::try_from(reset.nanos).unwrap(),
                        )
                    })
                })
                .collect(),
        };
    }
    let path = if via == Via::Json {
        "/json"
    } else {
        "/v1/check"
    };
    let reply = service.http("POST", path, &json_request(domain, descriptors, hits), &[]);
    let body: Value = serde_json::from_str(&reply.body)
        .unwrap_or_else(|_| panic!("{path}: not JSON ({}): {}", reply.status, reply.body));
    let ok = body["overallCode"] == "OK";
    // /json answers 429 over the limit, as the reference; /v1/check says what to answer.
    let status = match via {
        Via::Json => u64::from(reply.status),
        _ => body["status"].as_u64().unwrap_or(0),
    };
    assert_eq!(status, if ok { 200 } else { 429 }, "{path}: {body}");
    let statuses = body["statuses"].as_array().cloned().unwrap_or_default();
    Answer {
        ok,
        // proto3 JSON leaves defaults out: no limitRemaining is 0, no requestsPerUnit 0.
        statuses: statuses
            .iter()
            .map(|status| {
                (
                    status["code"].as_str().unwrap_or("UNKNOWN").to_string(),
                    status.get("currentLimit").map(|limit| {
                        (
                            limit["requestsPerUnit"].as_u64().unwrap_or(0),
                            limit["unit"].as_str().unwrap_or("UNKNOWN").to_string(),
                        )
                    }),
                    status["limitRemaining"].as_u64().unwrap_or(0),
                )
            })
            .collect(),
        resets: statuses
            .iter()
            .map(|status| status["durationUntilReset"].as_str().map(seconds))
            .collect(),
    }
}

/// A service on `files` (a config directory of its own) with `env`: with `--redis` if
/// `redis` is given (else `REDIS_URL` must say), both listeners on loopback, and `extra`.
fn with_env(
    redis: Option<&str>,
    files: &[(&str, &str)],
    extra: &[&str],
    env: &[(&str, &str)],
) -> Service {
    let config = TempDir::new("env");
    for (name, text) in files {
        config.write(name, text);
    }
    let dir = config.0.to_string_lossy().into_owned();
    let mut args: Vec<&str> = redis.map_or_else(Vec::new, |url| vec!["--redis", url]);
    args.extend(["--config", &dir, "--grpc-listen", "127.0.0.1:0"]);
    args.extend(["--http-listen", "127.0.0.1:0"]);
    args.extend_from_slice(extra);
    Service::start_with_env(&args, env, config)
}

fn reference_file(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|error| panic!("{}: {error}", file.display()))
}

fn flush(redis: &Server) {
    let _: () = redis::cmd("FLUSHALL").query(&mut redis.conn()).unwrap();
}

const README: [&str; 9] = [
    "example1.yaml",
    "example2.yaml",
    "example3.yaml",
    "example4.yaml",
    "example4_flat.yaml",
    "example5.yaml",
    "example6.yaml",
    "example7.yaml",
    "example8.yaml",
];

fn readme_service(redis: &Server) -> Service {
    let files: Vec<(String, String)> = README
        .iter()
        .map(|name| (name.to_string(), reference_file(&format!("readme/{name}"))))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect();
    Service::start(&redis_url(redis), &files, &[])
}

/// README examples 1-8, each answered as the reference's README says, over `via`.
async fn readme_examples(service: &Service, via: Via) {
    let at = |example: &str| format!("{via:?}, README example {example}");
    // 1: two values of one key, each 500 per second.
    ask(service, via, "readme-1", &[(&[("table", "orders")], None)])
        .await
        .expect(true, &[("OK", Some((500, "SECOND")), 499)], &at("1"));
    ask(service, via, "readme-1", &[(&[("table", "users")], None)])
        .await
        .expect(true, &[("OK", None, 0)], &at("1, no such value"));
    // 2: the placeholder's nested limit and the key's own; the logical OR of both.
    let promo: [Ask<'_>; 2] = [
        (&[("kind", "promo"), ("phone", "555")], None),
        (&[("phone", "555")], None),
    ];
    for i in 0..5 {
        ask(service, via, "readme-2", &promo).await.expect(
            true,
            &[
                ("OK", Some((5, "DAY")), 4 - i),
                ("OK", Some((100, "DAY")), 99 - i),
            ],
            &at("2"),
        );
    }
    ask(service, via, "readme-2", &promo).await.expect(
        false,
        &[
            ("OVER_LIMIT", Some((5, "DAY")), 0),
            ("OK", Some((100, "DAY")), 95),
        ],
        &at("2, the sixth: the other limit not charged"),
    );
    // 3: the blocked address, and another beside it (defects 7 and 8).
    blocked_and_another(service, via, &at("3")).await;
    ask(
        service,
        via,
        "readme-3",
        &[(&[("client_ip", "198.51.100.9")], None)],
    )
    .await
    .expect(true, &[("OK", Some((10, "SECOND")), 9)], &at("3, alone"));
    // 4: a two-entry descriptor matches two levels deep only.
    let deep: [Ask<'_>; 1] = [(&[("app", "shop"), ("step", "pay")], None)];
    ask(service, via, "readme-4", &deep).await.expect(
        true,
        &[("OK", Some((300, "SECOND")), 299)],
        &at("4"),
    );
    ask(service, via, "readme-4-flat", &deep).await.expect(
        true,
        &[("OK", None, 0)],
        &at("4, the flat config"),
    );
    // 5: unlimited answers 4294967295 and no limit (defect 3).
    ask(
        service,
        via,
        "readme-5",
        &[
            (&[("directory", "ldap")], None),
            (&[("storage", "s3")], None),
        ],
    )
    .await
    .expect(
        true,
        &[
            ("OK", None, 4_294_967_295),
            ("OK", Some((100, "MINUTE")), 99),
        ],
        &at("5"),
    );
    // 6: alpha in shadow mode, beta enforced at 20 a second.
    for _ in 0..12 {
        let alpha = ask(
            service,
            via,
            "readme-6",
            &[(&[("backend", "b"), ("caller", "alpha")], None)],
        )
        .await;
        assert!(alpha.ok && alpha.statuses[0].0 == "OK", "{}", at("6"));
    }
    let mut admitted = 0;
    for _ in 0..21 {
        let beta = ask(
            service,
            via,
            "readme-6",
            &[(&[("backend", "b"), ("caller", "beta")], None)],
        )
        .await;
        admitted += u32::from(beta.ok);
    }
    // Within one second: 20 (a window boundary in between lets up to 21 through).
    assert!((20..=21).contains(&admitted), "{}: {admitted}", at("6"));
    // 7: the unnamed limit replaces the named one (defect 2).
    ask(
        service,
        via,
        "readme-7",
        &[
            (&[("plan", "basic"), ("account", "acct-1")], None),
            (&[("plan", "boost"), ("account", "acct-1")], None),
        ],
    )
    .await
    .expect(
        true,
        &[("OK", None, 0), ("OK", Some((10, "SECOND")), 9)],
        &at("7"),
    );
    // 8: detailed_metric (the metric names are checked by the caller).
    ask(service, via, "readme-8", &[(&[("device", "tv")], None)])
        .await
        .expect(true, &[("OK", Some((10, "MINUTE")), 9)], &at("8"));
    ask(service, via, "readme-8", &[(&[("device", "kiosk")], None)])
        .await
        .expect(true, &[("OK", Some((20, "MINUTE")), 19)], &at("8"));
}

// Each transport on a store flushed and a service started afresh: a service remembers
// the denials it answered (the client library's deny cache) until they expire.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_examples_over_grpc_and_both_http_apis() {
    let redis = Server::start(&[]);
    for via in EVERY_WAY {
        flush(&redis);
        let service = readme_service(&redis);
        readme_examples(&service, via).await;
        let metrics = service.http("GET", "/metrics", "", &[]).body;
        for rule in ["rule=\"device=tv\"", "rule=\"device=kiosk\""] {
            assert!(metrics.contains(rule), "example 8's metric names: {rule}");
        }
    }
}

// One test per defect a migration met (the numbers of the list it came in), each over
// gRPC and both HTTP APIs, on a config holding only what it needs: each fails on the
// service as it was before its fix.

/// A fresh store and service on `config` for each transport.
fn each_way(redis: &Server, config: &str) -> impl Iterator<Item = (Via, Service)> {
    let url = redis_url(redis);
    let config = config.to_string();
    EVERY_WAY.into_iter().map(move |via| {
        flush_url(&url);
        (via, Service::start(&url, &[("d.yaml", &config)], &[]))
    })
}

fn flush_url(url: &str) {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_1_a_whitelisted_value_loads_and_applies_no_limit() {
    let config = "domain: d
descriptors:
  - key: foo
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: foo
    value: vip
";
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, config) {
        ask(&service, via, "d", &[(&[("foo", "vip")], None)])
            .await
            .expect(true, &[("OK", None, 0)], &format!("{via:?}"));
        ask(&service, via, "d", &[(&[("foo", "x")], None)])
            .await
            .expect(true, &[("OK", Some((5, "HOUR")), 4)], &format!("{via:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_2_replaces_without_a_name_as_readme_example_7_writes_it() {
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, &reference_file("readme/example7.yaml")) {
        let basic: Ask<'_> = (&[("plan", "basic"), ("account", "acct-1")], None);
        let boost: Ask<'_> = (&[("plan", "boost"), ("account", "acct-1")], None);
        ask(&service, via, "readme-7", &[basic, boost])
            .await
            .expect(
                true,
                &[("OK", None, 0), ("OK", Some((10, "SECOND")), 9)],
                &format!("{via:?}"),
            );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_3_unlimited_answers_4294967295() {
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, &reference_file("readme/example5.yaml")) {
        ask(
            &service,
            via,
            "readme-5",
            &[(&[("directory", "ldap")], None)],
        )
        .await
        .expect(true, &[("OK", None, 4_294_967_295)], &format!("{via:?}"));
    }
}

const BYTES: &str = "domain: d
descriptors:
  - key: upload
    rate_limit: {unit: hour, requests_per_unit: 10000000}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_4_hits_above_a_million_count_and_above_the_limit_deny() {
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, BYTES) {
        let at = format!("{via:?}");
        ask_hits(&service, via, "d", &[(&[("upload", "u")], None)], 4_000_000)
            .await
            .expect(true, &[("OK", Some((10_000_000, "HOUR")), 6_000_000)], &at);
        ask_hits(&service, via, "d", &[(&[("upload", "u")], None)], u32::MAX)
            .await
            .expect(
                false,
                &[("OVER_LIMIT", Some((10_000_000, "HOUR")), 6_000_000)],
                &at,
            );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_5_hits_addend_0_asks_whether_the_limit_is_over() {
    // {h: 5}; five requests (h=m1); then [(h=m1, hits 0), (h=m2)] is OK: m1 OK with 0 left,
    // m2 charged (4 left). Read with RL.PEEK.
    let config = "domain: d
descriptors:
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 5}
";
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, config) {
        for _ in 0..5 {
            assert!(ask(&service, via, "d", &[(&[("h", "m1")], None)]).await.ok);
        }
        ask(
            &service,
            via,
            "d",
            &[(&[("h", "m1")], Some(0)), (&[("h", "m2")], None)],
        )
        .await
        .expect(
            true,
            &[("OK", Some((5, "HOUR")), 0), ("OK", Some((5, "HOUR")), 4)],
            &format!("{via:?}"),
        );
    }
}

#[test]
fn defect_6_a_limit_replacing_itself_is_refused() {
    // The reference's test/config/replaces_self.yaml.
    let redis = Server::start(&[]);
    let log = Service::fail_to_start(
        &redis_url(&redis),
        &[("bad.yaml", &reference_file("config/replaces_self.yaml"))],
    );
    assert!(log.contains("'replaces' names this limit itself"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_7_a_limit_not_charged_is_shown_as_it_stands() {
    // README Example 3: [(blocked), (another address)]: the second was not charged, so it
    // has 10 left, and a reset.
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, &reference_file("readme/example3.yaml")) {
        blocked_and_another(&service, via, &format!("{via:?}")).await;
    }
    // A shadow limit skipped after a denial: read, with what it has left.
    let shadowed = "domain: d
descriptors:
  - key: enforced
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
";
    for (via, service) in each_way(&redis, shadowed) {
        ask(&service, via, "d", &[(&[("enforced", "e")], None)]).await;
        ask(
            &service,
            via,
            "d",
            &[(&[("quiet", "q")], None), (&[("enforced", "e")], None)],
        )
        .await
        .expect(
            false,
            &[
                ("OK", Some((5, "HOUR")), 5),
                ("OVER_LIMIT", Some((1, "HOUR")), 0),
            ],
            &format!("{via:?}"),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_8_a_denial_that_never_passes_resets_at_its_windows_end() {
    let blocked = "domain: d
descriptors:
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: upload
    rate_limit: {unit: hour, requests_per_unit: 10}
";
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, blocked) {
        let never = ask(&service, via, "d", &[(&[("blocked", "b")], None)]).await;
        let beyond = ask_hits(&service, via, "d", &[(&[("upload", "u")], None)], 11).await;
        for answer in [never, beyond] {
            assert!(!answer.ok);
            let reset = answer.resets[0].expect("a reset");
            assert!(
                reset > Duration::ZERO && reset <= Duration::from_secs(3600),
                "{via:?}: {reset:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_9_what_the_reference_loads_and_refuses() {
    // A descriptor without entries is OK with no limit; unlimited with requests_per_unit
    // and no unit loads; unlimited with a unit and an empty key are refused.
    let config = "domain: d
descriptors:
  - key: batch
    rate_limit: {unlimited: true, requests_per_unit: 25}
";
    let redis = Server::start(&[]);
    for (via, service) in each_way(&redis, config) {
        ask(&service, via, "d", &[(&[], None)]).await.expect(
            true,
            &[("OK", None, 0)],
            &format!("{via:?}"),
        );
        ask(&service, via, "d", &[(&[("batch", "b")], None)])
            .await
            .expect(true, &[("OK", None, 4_294_967_295)], &format!("{via:?}"));
    }
    let url = redis_url(&redis);
    let log = Service::fail_to_start(
        &url,
        &[(
            "bad.yaml",
            &reference_file("config/unlimited_with_unit.yaml"),
        )],
    );
    assert!(log.contains("an unlimited limit has no 'unit'"), "{log}");
    let empty_key = "domain: d\ndescriptors:\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let log = Service::fail_to_start(&url, &[("bad.yaml", empty_key)]);
    assert!(log.contains("a descriptor's 'key' is empty"), "{log}");
}

#[test]
fn configs_the_reference_refuses_are_refused_at_start() {
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    for (file, reason) in [
        (
            "config/replaces_empty.yaml",
            "a replaces entry has an empty 'name'",
        ),
        ("config/duplicate_key.yaml", "is already defined at line 5"),
    ] {
        let log = Service::fail_to_start(&url, &[("bad.yaml", &reference_file(file))]);
        assert!(log.contains(reason), "{file}: {log}");
    }
}

// Hours where the reference's tests have minutes: a window boundary during a test would
// reset its counts.
const SERVICE_TEST: &str = "domain: different-domain
descriptors:
  - key: foo
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: baz
    value: qux
    rate_limit: {unlimited: true}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_service_tests_expectations() {
    // ratelimit_test.go: TestService, TestUnlimited, TestEmptyDomain, TestEmptyDescriptors.
    let redis = Server::start(&[]);
    for via in EVERY_WAY {
        flush(&redis);
        let service = Service::start(&redis_url(&redis), &[("d.yaml", SERVICE_TEST)], &[]);
        let at = format!("{via:?}");
        ask(
            &service,
            via,
            "different-domain",
            &[(&[("hello", "world")], None)],
        )
        .await
        .expect(true, &[("OK", None, 0)], &at);
        ask(
            &service,
            via,
            "different-domain",
            &[
                (&[("foo", "bar")], None),
                (&[("hello", "world")], None),
                (&[("baz", "qux")], None),
            ],
        )
        .await
        .expect(
            true,
            &[
                ("OK", Some((10, "HOUR")), 9),
                ("OK", None, 0),
                ("OK", None, 4_294_967_295),
            ],
            &at,
        );
        for _ in 0..9 {
            ask(
                &service,
                via,
                "different-domain",
                &[(&[("foo", "bar")], None)],
            )
            .await;
        }
        for order in [[0, 1], [1, 0]] {
            let pair: [Ask<'_>; 2] = [(&[("foo", "bar")], None), (&[("hello", "world")], None)];
            let asked: Vec<Ask<'_>> = order.iter().map(|index| pair[*index]).collect();
            let answer = ask(&service, via, "different-domain", &asked).await;
            let over: Said = ("OVER_LIMIT", Some((10, "HOUR")), 0);
            let none: Said = ("OK", None, 0);
            let expected = if order[0] == 0 {
                [over, none]
            } else {
                [none, over]
            };
            answer.expect(false, &expected, &at);
        }
    }
    // An empty domain or descriptor list is refused (INVALID_ARGUMENT; 400).
    let service = Service::start(&redis_url(&redis), &[("d.yaml", SERVICE_TEST)], &[]);
    let mut client = service.grpc().await;
    for (bad, reason) in [
        (
            grpc_request("", &[(&[("a", "b")], None)], 1),
            "'domain' is empty",
        ),
        (
            grpc_request("different-domain", &[], 1),
            "'descriptors' is empty",
        ),
    ] {
        let error = client.should_rate_limit(bad).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(error.message().contains(reason), "{}", error.message());
    }
    let reply = service.http("POST", "/json", r#"{"domain":"","descriptors":[]}"#, &[]);
    assert_eq!((reply.status, reply.body.as_str()), (400, "Bad Request\n"));
    let reply = service.http("POST", "/json", "{not json", &[]);
    assert_eq!((reply.status, reply.body.as_str()), (400, "Bad Request\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_domain_is_refused_where_the_reference_answers_ok() {
    // A documented difference: the reference answers OK with no limit for a domain it does
    // not know (a typo in Envoy's config then limits nothing); the service refuses it.
    let redis = Server::start(&[]);
    let service = Service::start(&redis_url(&redis), &[("d.yaml", SERVICE_TEST)], &[]);
    let error = service
        .grpc()
        .await
        .should_rate_limit(grpc_request("nowhere", &[(&[("foo", "bar")], None)], 1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("unknown domain 'nowhere'"));
    let reply = service.http(
        "POST",
        "/json",
        &json_request("nowhere", &[(&[("foo", "bar")], None)], 1),
        &[],
    );
    assert_eq!(reply.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_10_the_global_shadow_mode_from_shadow_mode() {
    // Defect 10 (ratelimit_test.go TestServiceGlobalShadowMode): SHADOW_MODE=true, the 11th
    // request on a 10/minute key is OK overall with its status OVER_LIMIT, and counted.
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    for via in EVERY_WAY {
        flush(&redis);
        let service = with_env(
            Some(&url),
            &[("d.yaml", SERVICE_TEST)],
            &[],
            &[("SHADOW_MODE", "true")],
        );
        for _ in 0..10 {
            assert!(
                ask(
                    &service,
                    via,
                    "different-domain",
                    &[(&[("foo", "k")], None)]
                )
                .await
                .ok
            );
        }
        ask(
            &service,
            via,
            "different-domain",
            &[(&[("foo", "k")], None), (&[("hello", "world")], None)],
        )
        .await
        .expect(
            true,
            &[("OVER_LIMIT", Some((10, "HOUR")), 0), ("OK", None, 0)],
            &format!("{via:?}: reported, admitted"),
        );
        let metrics = service.http("GET", "/metrics", "", &[]).body;
        for counted in [
            "ratelimit_service_global_shadow_total{domain=\"different-domain\"} 1",
            "ratelimit_service_shadow_denials_total{domain=\"different-domain\",rule=\"foo\"} 1",
        ] {
            assert!(metrics.contains(counted), "{counted}: {metrics}");
        }
        let log = service.log();
        assert!(
            log.contains("read from the environment: SHADOW_MODE"),
            "{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_references_limit_headers_from_its_variables() {
    // ratelimit_test.go TestServiceWithCustomRatelimitHeaders and
    // TestServiceWithDefaultRatelimitHeaders: the binding limit's limit, remaining and
    // reset (seconds to the window's end).
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    for (env, names) in [
        (
            vec![
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                ("LIMIT_LIMIT_HEADER", "A-Ratelimit-Limit"),
                ("LIMIT_REMAINING_HEADER", "A-Ratelimit-Remaining"),
                ("LIMIT_RESET_HEADER", "A-Ratelimit-Reset"),
            ],
            [
                "A-Ratelimit-Limit",
                "A-Ratelimit-Remaining",
                "A-Ratelimit-Reset",
            ],
        ),
        (
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
            ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
        ),
    ] {
        flush(&redis);
        let service = with_env(
            Some(&url),
            &[("d.yaml", SERVICE_TEST)],
            &["--headers", "off"],
            &env,
        );
        let mut client = service.grpc().await;
        let mut last = None;
        for _ in 0..11 {
            last = Some(
                client
                    .should_rate_limit(grpc_request(
                        "different-domain",
                        &[(&[("foo", "bar")], None), (&[("hello", "world")], None)],
                        1,
                    ))
                    .await
                    .unwrap()
                    .into_inner(),
            );
        }
        let denied = last.unwrap();
        assert_eq!(denied.overall_code, Code::OverLimit as i32);
        let headers: Vec<(&str, &str)> = denied
            .response_headers_to_add
            .iter()
            .map(|header| (header.key.as_str(), header.value.as_str()))
            .filter(|(key, _)| *key != "retry-after")
            .collect();
        assert_eq!(
            headers.len(),
            3,
            "only the reference's three (--headers off): {headers:?}"
        );
        assert_eq!(headers[0], (names[0], "10"));
        assert_eq!(headers[1], (names[1], "0"));
        assert_eq!(headers[2].0, names[2]);
        let reset: u64 = headers[2].1.parse().unwrap();
        assert!(
            (1..=3600).contains(&reset),
            "seconds to the hour's end: {reset}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ietf_fields_are_sent_where_the_reference_sends_none() {
    // A documented difference: by default the answers carry the IETF RateLimit fields
    // (and Retry-After on a denial); `--headers off` leaves what the reference sends.
    let redis = Server::start(&[]);
    let cases: [(&[&str], &[&str]); 2] = [
        (&[], &["ratelimit-policy", "ratelimit"]),
        (&["--headers", "off"], &[]),
    ];
    for (flags, fields) in cases {
        let service = Service::start(&redis_url(&redis), &[("d.yaml", SERVICE_TEST)], flags);
        let response = service
            .grpc()
            .await
            .should_rate_limit(grpc_request(
                "different-domain",
                &[(&[("foo", "bar")], None)],
                1,
            ))
            .await
            .unwrap()
            .into_inner();
        let keys: Vec<&str> = response
            .response_headers_to_add
            .iter()
            .map(|header| header.key.as_str())
            .collect();
        assert_eq!(keys, fields, "with {flags:?}");
    }
}

/// Waits (bounded) until the epoch-aligned window of `unit_s` seconds has at least two
/// seconds left, so that a few dozen requests all fall in one window.
fn away_from_the_end_of(unit_s: u64) {
    let clear = wait_until(Duration::from_secs(5), || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        unit_s - now.as_secs() % unit_s > 2
    });
    assert!(clear);
}

/// The reference's integration runtime tree, copied where a test can change it.
fn runtime_tree() -> TempDir {
    let dir = TempDir::new("runtime");
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/runtime");
    copy_tree(&from, &dir.0);
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The service configured as the reference's integration tests configure it: only
/// environment variables (`REDIS_URL` host:port over TCP, the runtime layout, ports).
fn integration_service(
    redis: &Server,
    runtime: TempDir,
    extra: &[(&str, &str)],
) -> (Service, PathBuf) {
    let root = runtime.0.join("current");
    let config = root.join("ratelimit/config");
    let address = format!("127.0.0.1:{}", redis.port);
    let root_text = root.to_string_lossy().into_owned();
    let mut env = vec![
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", address.as_str()),
        ("RUNTIME_ROOT", root_text.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
    ];
    env.extend_from_slice(extra);
    (Service::start_with_env(&[], &env, runtime), config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_integration_tests_on_its_runtime_layout() {
    // integration_test.go: testBasicBaseConfig, testConfigReload, testShareThreshold.
    let redis = Server::start(&[]);
    let (service, config) = integration_service(&redis, runtime_tree(), &[]);
    let log = service.log();
    for variable in [
        "REDIS_URL",
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "GRPC_PORT",
        "PORT",
    ] {
        assert!(log.contains(variable), "{variable} read: {log}");
    }
    let via = Via::Grpc;
    ask(&service, via, "rt-basic", &[(&[("k1", "foo")], None)])
        .await
        .expect(true, &[("OK", Some((50, "SECOND")), 49)], "k1");
    // 25 requests on 20 a minute (not across a minute's end, which would reset them).
    away_from_the_end_of(60);
    for i in 0..25u64 {
        let answer = ask(&service, via, "rt-another", &[(&[("k2", "r1")], None)]).await;
        let (code, left) = if i < 20 {
            ("OK", 19 - i)
        } else {
            ("OVER_LIMIT", 0)
        };
        answer.expect(i < 20, &[(code, Some((20, "MINUTE")), left)], "k2");
        assert!(answer.resets[0].is_some());
    }
    // Two limits of one domain, 15 requests: the hour's denials charge the minute's nothing.
    for i in 0..15u64 {
        let answer = ask(
            &service,
            via,
            "rt-another",
            &[(&[("k2", "r2")], None), (&[("k3", "r2")], None)],
        )
        .await;
        let (first, second, code) = if i < 10 {
            (19 - i, 9 - i, "OK")
        } else {
            (10, 0, "OVER_LIMIT")
        };
        answer.expect(
            i < 10,
            &[
                ("OK", Some((20, "MINUTE")), first),
                (code, Some((10, "HOUR")), second),
            ],
            "k2 and k3",
        );
        assert!(answer.resets.iter().all(Option::is_some));
    }
    // The time to reset goes down (bounded poll instead of the reference's sleep).
    let reset = |answer: Answer| answer.resets[0].unwrap();
    let first = reset(ask(&service, via, "rt-another", &[(&[("k4", "durTest")], None)]).await);
    let lower = wait_until(Duration::from_secs(5), || {
        let runtime = tokio::runtime::Handle::current();
        let next = tokio::task::block_in_place(|| {
            runtime.block_on(ask(
                &service,
                via,
                "rt-another",
                &[(&[("k4", "durTest")], None)],
            ))
        });
        reset(next) < first
    });
    assert!(lower, "duration_until_reset counts down");
    // share_threshold: docs/* share one counter, own/* do not.
    for _ in 0..10 {
        ask(
            &service,
            via,
            "rt-share",
            &[(&[("doc", "docs/a.pdf")], None)],
        )
        .await;
    }
    ask(
        &service,
        via,
        "rt-share",
        &[(&[("doc", "docs/b.csv")], None)],
    )
    .await
    .expect(false, &[("OVER_LIMIT", Some((10, "HOUR")), 0)], "shared");
    for i in 0..10 {
        let own = format!("own/{i}");
        ask(
            &service,
            via,
            "rt-share",
            &[(&[("doc_own", own.as_str())], None)],
        )
        .await
        .expect(true, &[("OK", Some((10, "HOUR")), 9)], "own");
    }
    // Reload: the reload file copied into config/, then removed.
    let unknown = service
        .grpc()
        .await
        .should_rate_limit(grpc_request("rt-reload", &[(&[("block", "foo")], None)], 1))
        .await;
    assert!(
        unknown.is_err(),
        "not loaded yet (an unknown domain: refused here)"
    );
    let reload = reference_file("runtime/current/ratelimit/reload.yaml");
    let partial = config.join(".reload.yaml.partial");
    std::fs::write(&partial, reload).unwrap();
    std::fs::rename(&partial, config.join("reload.yaml")).unwrap();
    assert!(service.wait_log("config reloaded", 1));
    ask(&service, via, "rt-reload", &[(&[("k1", "foo")], None)])
        .await
        .expect(true, &[("OK", Some((50, "SECOND")), 49)], "reloaded");
    ask(&service, via, "rt-reload", &[(&[("block", "foo")], None)])
        .await
        .expect(false, &[("OVER_LIMIT", Some((0, "SECOND")), 0)], "blocked");
    std::fs::remove_file(config.join("reload.yaml")).unwrap();
    assert!(
        service.wait_log("config reloaded", 2),
        "the removal reloads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_references_variables_configure_the_store_and_the_listeners() {
    // REDIS_URL host:port, REDIS_AUTH (user:password), CACHE_KEY_PREFIX, LOG_LEVEL; and a
    // variable with no counterpart logged once by name.
    let redis = Server::start(&["--user", "rls", "on", ">s3cret", "~*", "+@all"]);
    // Only the user the service is told of can reach the store now.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("off")
        .query(&mut redis.conn())
        .unwrap();
    let runtime = runtime_tree();
    let (service, _) = integration_service(
        &redis,
        runtime,
        &[
            ("REDIS_AUTH", "rls:s3cret"),
            ("CACHE_KEY_PREFIX", "migrated:"),
            ("LOG_LEVEL", "DEBUG"),
            ("USE_STATSD", "false"),
            ("REDIS_POOL_SIZE", "10"),
        ],
    );
    let answer = ask(&service, Via::Grpc, "rt-basic", &[(&[("k1", "x")], None)]).await;
    answer.expect(
        true,
        &[("OK", Some((50, "SECOND")), 49)],
        "through REDIS_AUTH",
    );
    let mut con = redis::Client::open(format!("redis://rls:s3cret@127.0.0.1:{}/", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key.starts_with("migrated:")),
        "{keys:?}"
    );
    let log = service.log();
    for unread in ["USE_STATSD is set", "REDIS_POOL_SIZE is set"] {
        assert_eq!(log.matches(unread).count(), 1, "{unread} once: {log}");
    }
    assert!(log.contains("LOG_LEVEL"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_store_from_redis_socket_type() {
    let dir = TempDir::new("sock");
    let socket = dir.0.join("redis.sock");
    let socket_text = socket.to_string_lossy().into_owned();
    let redis = Server::start(&["--unixsocket", &socket_text, "--unixsocketperm", "700"]);
    let service = with_env(
        None,
        &[("d.yaml", SERVICE_TEST)],
        &[],
        &[("REDIS_SOCKET_TYPE", "unix"), ("REDIS_URL", &socket_text)],
    );
    ask(
        &service,
        Via::Grpc,
        "different-domain",
        &[(&[("foo", "unix")], None)],
    )
    .await
    .expect(true, &[("OK", Some((10, "HOUR")), 9)], "over the socket");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_answers_as_the_reference() {
    let redis = Server::start(&[]);
    let service = Service::start(&redis_url(&redis), &[("d.yaml", SERVICE_TEST)], &[]);
    let reply = service.http("GET", "/healthcheck", "", &[]);
    assert_eq!((reply.status, reply.body.as_str()), (200, "OK"));
    // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy while no domain is loaded.
    let url = redis_url(&redis);
    let strict = with_env(
        Some(&url),
        &[],
        &[],
        &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")],
    );
    assert_eq!(strict.http("GET", "/healthcheck", "", &[]).status, 500);
    strict.config.write("d.yaml", SERVICE_TEST);
    assert!(strict.wait_log("config reloaded", 1));
    assert_eq!(strict.http("GET", "/healthcheck", "", &[]).status, 200);
    // Failing closed with the store gone: unhealthy.
    let mut down = Server::start(&[]);
    let closed = Service::start(
        &redis_url(&down),
        &[("d.yaml", SERVICE_TEST)],
        &["--failure-mode", "deny"],
    );
    down.kill();
    let unhealthy = wait_until(Duration::from_secs(10), || {
        closed.http("GET", "/healthcheck", "", &[]).status == 500
    });
    assert!(unhealthy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_dynamic_metadata_as_the_reference_returns_it() {
    // ratelimit_test.go TestMetadataReturnedForPassedDescriptors, on metadata.yaml.
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    let service = with_env(
        Some(&url),
        &[("m.yaml", &reference_file("config/metadata.yaml"))],
        &[],
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
    );
    let started = Instant::now();
    let response = service
        .grpc()
        .await
        .should_rate_limit(grpc_request(
            "ref-metadata",
            &[
                (&[("tier", "gold"), ("user", "u1")], None),
                (&[("api_key", "k")], Some(3)),
            ],
            1,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(started.elapsed() < Duration::from_secs(10));
    let fields = response.dynamic_metadata.unwrap().fields;
    let string = |key: &str| match fields.get(key).and_then(|value| value.kind.clone()) {
        Some(Kind::StringValue(text)) => text,
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!(string("domain"), "ref-metadata");
    assert!(matches!(
        fields.get("hitsAddend").and_then(|value| value.kind.clone()),
        Some(Kind::NumberValue(hits)) if hits == 1.0
    ));
    let Some(Kind::StructValue(metadata)) =
        fields.get("metadata").and_then(|value| value.kind.clone())
    else {
        panic!("no metadata: {fields:?}");
    };
    assert!(metadata.fields.contains_key("name"), "{metadata:?}");
    assert!(metadata.fields.contains_key("billing"), "{metadata:?}");
    let Some(Kind::ListValue(descriptors)) = fields
        .get("descriptors")
        .and_then(|value| value.kind.clone())
    else {
        panic!("no descriptors");
    };
    assert_eq!(descriptors.values.len(), 2);
    let reply = service.http(
        "POST",
        "/json",
        &json_request("ref-metadata", &[(&[("api_key", "k2")], None)], 1),
        &[],
    );
    let body: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        body["dynamicMetadata"]["metadata"]["billing"]["plan"],
        "metered"
    );
    assert_eq!(body["dynamicMetadata"]["domain"], "ref-metadata");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_store_from_redis_tls_with_an_acl_user_from_redis_auth() {
    let dir = TempDir::new("redis-tls");
    let (cert, key) = certificate(&dir.0);
    let (redis, tls_port) = tls_redis(
        &cert,
        &key,
        &["--user", "rls", "on", ">rls-secret", "~*", "+@all"],
    );
    let address = format!("127.0.0.1:{tls_port}");
    let service = with_env(
        None,
        &[("d.yaml", SERVICE_TEST)],
        &[],
        &[
            ("REDIS_URL", &address),
            ("REDIS_TLS", "true"),
            // The test's self-signed certificate is in no root store.
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
            ("REDIS_AUTH", "rls:rls-secret"),
        ],
    );
    let answer = ask(
        &service,
        Via::Grpc,
        "different-domain",
        &[(&[("foo", "tls")], None)],
    )
    .await;
    answer.expect(true, &[("OK", Some((10, "HOUR")), 9)], "over TLS");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(
        keys.len(),
        1,
        "the limit lives in Redis, reached over TLS: {keys:?}"
    );
}
