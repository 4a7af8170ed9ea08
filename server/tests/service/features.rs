//! Every config feature, over gRPC.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use envoy_types::pb::google::protobuf::value::Kind;
use redis_ratelimit_testkit::server::Server;
use tonic::transport::Channel;

use crate::harness::{Service, descriptor, request, ttls};

pub const FEATURES: &str = r#"
domain: features
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-key}
    descriptors:
      - key: path
        value: "/search*"
        rate_limit: {unit: minute, requests_per_unit: 1, name: search}
      - key: path
        value: "/users/*/posts"
        rate_limit: {unit: minute, requests_per_unit: 2, name: posts}
  - key: tier
    value: gold
    rate_limit: {unlimited: true}
  - key: tier
    value: silver
    rate_limit: {unit: hour, requests_per_unit: 2, name: silver}
  - key: vip
    rate_limit: {unit: hour, requests_per_unit: 100, name: vip, replaces: [{name: silver}]}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1, name: shadow}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5, name: detailed}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window, name: sliding}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 3, name: bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra, burst: 2, name: gcra}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0, name: blocked}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 2, name: weekly}
  - key: cost
    rate_limit: {unit: hour, requests_per_unit: 10, name: cost}
"#;

type Client = RateLimitServiceClient<Channel>;

async fn ask(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// A request of one descriptor per list of entries.
async fn each(client: &mut Client, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
    let descriptors = descriptors
        .iter()
        .map(|entries| descriptor(entries))
        .collect();
    ask(client, request("features", descriptors)).await
}

/// Each status's code.
fn codes(response: &RateLimitResponse) -> Vec<i32> {
    response.statuses.iter().map(|status| status.code).collect()
}

async fn one(client: &mut Client, entries: &[(&str, &str)]) -> RateLimitResponse {
    ask(client, request("features", vec![descriptor(entries)])).await
}

fn ok(response: &RateLimitResponse) -> bool {
    response.overall_code == Code::Ok as i32
}

/// How many of `tries` identical single-descriptor requests pass.
async fn admitted(client: &mut Client, entries: &[(&str, &str)], tries: usize) -> usize {
    let mut passed = 0;
    for _ in 0..tries {
        if ok(&one(client, entries).await) {
            passed += 1;
        }
    }
    passed
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|header| header.key == name)
        .map(|header| header.value.as_str())
}

/// A string field of the response's dynamic metadata.
fn metadata_text(response: &RateLimitResponse, field: &str) -> Option<String> {
    let value = response.dynamic_metadata.as_ref()?.fields.get(field)?;
    match &value.kind {
        Some(Kind::StringValue(text)) => Some(text.clone()),
        _ => None,
    }
}

fn metadata_names(response: &RateLimitResponse, field: &str) -> Vec<String> {
    let Some(metadata) = &response.dynamic_metadata else {
        return Vec::new();
    };
    match metadata
        .fields
        .get(field)
        .and_then(|value| value.kind.as_ref())
    {
        Some(Kind::ListValue(list)) => list
            .values
            .iter()
            .filter_map(|value| match &value.kind {
                Some(Kind::StringValue(name)) => Some(name.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_config_feature() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("features.yaml", FEATURES)], &[]);
    let mut client = service.grpc().await;

    // A fixed window per value, with its status: code, the limit and its name, what is left,
    // when it resets; the denial's headers and metadata name it.
    for left in [2u32, 1, 0] {
        let response = one(&mut client, &[("api_key", "k1")]).await;
        assert!(ok(&response));
        let status = &response.statuses[0];
        assert_eq!(status.code, Code::Ok as i32);
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit),
            ("per-key", 3)
        );
        assert_eq!(limit.unit, Unit::Minute as i32);
        assert_eq!(status.limit_remaining, left);
        let reset = status.duration_until_reset.as_ref().unwrap();
        assert!((0..=60).contains(&reset.seconds), "{reset:?}");
        assert!(
            header(&response, "ratelimit")
                .unwrap()
                .starts_with("\"per-key\";r=")
        );
        assert!(header(&response, "retry-after").is_none());
    }
    let denied = one(&mut client, &[("api_key", "k1")]).await;
    assert_eq!(denied.overall_code, Code::OverLimit as i32);
    assert_eq!(denied.statuses[0].code, Code::OverLimit as i32);
    let retry: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(
        header(&denied, "ratelimit-policy"),
        Some("\"per-key\";q=3;w=60")
    );
    assert_eq!(
        metadata_names(&denied, "denied_by"),
        vec!["per-key".to_string()]
    );
    assert_eq!(
        metadata_text(&denied, "decided_by").as_deref(),
        Some("store")
    );
    assert_eq!(metadata_text(&denied, "backend").as_deref(), Some("module"));
    // Another value has its own counter.
    assert!(ok(&one(&mut client, &[("api_key", "k2")]).await));

    // Nested descriptors with a trailing and an inner wildcard.
    assert_eq!(
        admitted(&mut client, &[("api_key", "n1"), ("path", "/search/q")], 3).await,
        1
    );
    assert_eq!(
        admitted(
            &mut client,
            &[("api_key", "n1"), ("path", "/users/7/posts")],
            4
        )
        .await,
        2
    );
    let unmatched = one(
        &mut client,
        &[("api_key", "n1"), ("path", "/users/7/likes")],
    )
    .await;
    assert!(ok(&unmatched));
    assert!(unmatched.statuses[0].current_limit.is_none());
    assert!(ok(&one(&mut client, &[("nothing", "x")]).await));

    // Unlimited.
    assert_eq!(admitted(&mut client, &[("tier", "gold")], 5).await, 5);
    assert!(
        one(&mut client, &[("tier", "gold")]).await.statuses[0]
            .current_limit
            .is_none()
    );

    // replaces: with vip in the request, silver is not applied.
    for _ in 0..4 {
        let both = each(&mut client, &[&[("tier", "silver")], &[("vip", "v")]]).await;
        assert!(ok(&both));
        assert!(both.statuses[0].current_limit.is_none());
        assert_eq!(both.statuses[1].current_limit.as_ref().unwrap().name, "vip");
    }
    assert_eq!(admitted(&mut client, &[("tier", "silver")], 3).await, 2);

    // shadow_mode: decides and reports, never denies.
    assert_eq!(admitted(&mut client, &[("shadowed", "s")], 3).await, 3);
    let shadow = one(&mut client, &[("shadowed", "s")]).await;
    assert_eq!(shadow.statuses[0].code, Code::Ok as i32);
    assert_eq!(
        metadata_names(&shadow, "shadow_denied_by"),
        vec!["shadow".to_string()]
    );

    // The algorithms.
    assert_eq!(admitted(&mut client, &[("sliding", "a")], 4).await, 2);
    assert_eq!(admitted(&mut client, &[("bucket", "a")], 5).await, 3);
    assert_eq!(admitted(&mut client, &[("gcra", "a")], 4).await, 2);
    let weekly = one(&mut client, &[("weekly", "a")]).await;
    assert_eq!(
        weekly.statuses[0].current_limit.as_ref().unwrap().unit,
        Unit::Week as i32
    );

    // requests_per_unit 0 denies, and nothing else of the request is charged.
    let blocked = each(&mut client, &[&[("cost", "b")], &[("blocked", "x")]]).await;
    assert!(!ok(&blocked));
    assert_eq!(codes(&blocked), [Code::Ok as i32, Code::OverLimit as i32]);
    assert_eq!(
        one(&mut client, &[("cost", "b")]).await.statuses[0].limit_remaining,
        9
    );

    // hits_addend: the request's, a descriptor's own, and 0 to check without consuming.
    let mut hits = request("features", vec![descriptor(&[("cost", "h")])]);
    hits.hits_addend = 4;
    assert_eq!(ask(&mut client, hits).await.statuses[0].limit_remaining, 6);
    let with_own = |value: u64| {
        let mut own = descriptor(&[("cost", "h")]);
        own.hits_addend = Some(UInt64Value { value });
        let mut request = request("features", vec![own]);
        request.hits_addend = 3; // the descriptor's own wins
        request
    };
    for _ in 0..3 {
        let probe = ask(&mut client, with_own(0)).await;
        assert!(ok(&probe));
        assert_eq!(
            probe.statuses[0].limit_remaining, 6,
            "a probe consumes nothing"
        );
    }
    let too_many = ask(&mut client, with_own(7)).await;
    assert!(!ok(&too_many));
    assert_eq!(too_many.statuses[0].limit_remaining, 6);
    assert!(ok(&ask(&mut client, with_own(6)).await));
    let exhausted = ask(&mut client, with_own(0)).await;
    assert!(
        ok(&exhausted),
        "a probe asks whether the limit is over, as the reference: at it, it is not"
    );
    assert_eq!(exhausted.statuses[0].limit_remaining, 0);

    // All or nothing: a denial charges no other descriptor.
    let before = one(&mut client, &[("cost", "aon")]).await.statuses[0].limit_remaining;
    for _ in 0..3 {
        let pair = each(&mut client, &[&[("api_key", "k1")], &[("cost", "aon")]]).await;
        assert!(!ok(&pair));
        assert_eq!(codes(&pair), [Code::OverLimit as i32, Code::Ok as i32]);
    }
    let after = one(&mut client, &[("cost", "aon")]).await.statuses[0].limit_remaining;
    assert_eq!(after, before - 1, "only the lone check charged it");

    // The descriptor's limit override.
    let mut overridden = descriptor(&[("api_key", "o1")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 2,
    });
    let first = ask(&mut client, request("features", vec![overridden.clone()])).await;
    assert!(ok(&first));
    assert_eq!(
        first.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        1
    );
    assert!(!ok(&ask(
        &mut client,
        request("features", vec![overridden])
    )
    .await));

    // detailed_metric: the request's values label the metric.
    assert!(ok(&one(&mut client, &[("detailed", "v1")]).await));
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(metrics.contains("rule=\"detailed=v1\""), "{metrics}");
    assert!(
        metrics.contains("ratelimit_service_shadow_denials_total"),
        "{metrics}"
    );

    // Every key expires.
    let mut con = redis.conn();
    let keys = ttls(&mut con);
    assert!(keys.len() >= 10, "{keys:?}");
    for (key, ttl) in keys {
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_charges_nothing() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(
        &url,
        &[("features.yaml", FEATURES)],
        &["--max-descriptors", "4"],
    );
    let mut client = service.grpc().await;
    let long = "v".repeat(300);
    let cases: Vec<(RateLimitRequest, &str)> = vec![
        (
            request("nope", vec![descriptor(&[("api_key", "k")])]),
            "unknown domain 'nope'",
        ),
        (
            request("features", vec![descriptor(&[("api_key", "k")]); 5]),
            "at most 4",
        ),
        (
            request("features", vec![descriptor(&[("api_key", &long)])]),
            "longer than 256 bytes",
        ),
        (request("features", vec![]), "'descriptors' is empty"),
    ];
    for (bad, reason) in cases {
        let error = client.should_rate_limit(bad).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(error.message().contains(reason), "{}", error.message());
    }
    let mut con = redis.conn();
    assert!(ttls(&mut con).is_empty(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_12_and_legacy_headers() {
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(
        &url,
        &[("features.yaml", FEATURES)],
        &["--headers", "draft-12", "--legacy-headers"],
    );
    let mut client = service.grpc().await;
    let mut hits = request("features", vec![descriptor(&[("cost", "x")])]);
    hits.hits_addend = 2;
    let response = ask(&mut client, hits).await;
    assert_eq!(
        header(&response, "ratelimit-policy"),
        Some("\"cost\";q=10;w=3600")
    );
    let field = header(&response, "ratelimit").unwrap();
    assert!(
        field.starts_with("\"cost\";a=8;w=") && field.ends_with(";c=2"),
        "{field}"
    );
    assert_eq!(header(&response, "x-ratelimit-limit"), Some("10"));
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("8"));
}

/// Envoy sends one descriptor twice when two actions produce it: the reference counts each
/// in turn; this was a 500 (INTERNAL: "two limits of the job use the key ...").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_descriptor_twice_is_charged_twice_in_turn_over_grpc_and_http() {
    let redis = Server::start(&[]);
    let service = Service::start(
        &crate::harness::redis_url(&redis),
        &[("f.yaml", FEATURES)],
        &[],
    );
    let mut client = service.grpc().await;
    let twice = |key: &str| {
        request(
            "features",
            vec![
                descriptor(&[("api_key", key)]),
                descriptor(&[("api_key", key)]),
            ],
        )
    };
    let remaining = |response: &RateLimitResponse| -> Vec<(i32, u32)> {
        response
            .statuses
            .iter()
            .map(|status| (status.code, status.limit_remaining))
            .collect()
    };
    let (passed, over) = (Code::Ok as i32, Code::OverLimit as i32);
    // per-key is 3 a minute: 2 left after the first, 1 after the second.
    let first = ask(&mut client, twice("grpc")).await;
    assert!(ok(&first));
    assert_eq!(remaining(&first), [(passed, 2), (passed, 1)]);
    // 1 left: the first fits, the second does not, and nothing is charged.
    let second = ask(&mut client, twice("grpc")).await;
    assert!(!ok(&second));
    assert_eq!(remaining(&second), [(passed, 1), (over, 1)]);
    assert!(ok(&one(&mut client, &[("api_key", "grpc")]).await));

    let body = r#"{"domain":"features","descriptors":[{"entries":[{"key":"api_key","value":"http"}]},{"entries":[{"key":"api_key","value":"http"}]}]}"#;
    let (status, answer) = service.check_json(body);
    assert_eq!(status, 200, "{answer}");
    let left: Vec<&serde_json::Value> = answer["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|status| &status["limitRemaining"])
        .collect();
    assert_eq!(left, [2, 1], "{answer}");
    let (status, answer) = service.check_json(body);
    assert_eq!(
        (status, &answer["status"]),
        (200, &serde_json::json!(429)),
        "{answer}"
    );
    assert_eq!(answer["statuses"][0]["code"], "OK", "{answer}");
    assert_eq!(answer["statuses"][1]["code"], "OVER_LIMIT", "{answer}");
    assert_eq!(
        answer["deniedBy"],
        serde_json::json!(["per-key"]),
        "{answer}"
    );
}
