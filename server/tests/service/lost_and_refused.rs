//! Issue 36 in the service: a check whose reply Redis ran but the service never heard is
//! charged once (item 2: no replay through a new connection), and a check the store refuses
//! as invalid is the caller's 400 / `INVALID_ARGUMENT`, never a fallback decision (item 5).

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_ratelimit_testkit::proxy::CuttingProxy;
use redis_ratelimit_testkit::server::{Server, wait_until};

use crate::harness::{Service, descriptor, request};

const HOURLY: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 100, name: per-key, algorithm: token_bucket}
"#;

fn body(key: &str, hits: u64) -> String {
    format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"api_key","value":"{key}"}}],"hitsAddend":"{hits}"}}]}}"#
    )
}

#[test]
fn a_check_whose_reply_is_lost_is_charged_once() {
    let redis = Server::start(&[]);
    let proxy = CuttingProxy::start(redis.port);
    let url = format!("redis://127.0.0.1:{}/", proxy.port);
    // Closed on failure: no fallback admission is owed to the store afterwards, so what the
    // store holds is the charges it ran.
    let service = Service::start(&url, &[("api.yaml", HOURLY)], &["--failure-mode", "deny"]);
    let (status, first) = service.check_json(&body("k1", 1));
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["statuses"][0]["limitRemaining"], 99);

    proxy.cut_next_reply();
    let (_, lost) = service.check_json(&body("k1", 5));
    assert_eq!(proxy.replies_cut(), 1, "the check of 5 reached Redis");
    assert_eq!(lost["decidedBy"], "fallback", "{lost}");

    // The next check reaches Redis again (a new connection): 100 - 1 - 5 - 1 once, 88 had
    // the check of 5 been sent again.
    let mut after = serde_json::Value::Null;
    let back = wait_until(Duration::from_secs(10), || {
        after = service.check_json(&body("k1", 1)).1;
        after["decidedBy"] == "store"
    });
    assert!(back, "never back on the store: {after}");
    assert_eq!(after["statuses"][0]["limitRemaining"], 93, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hits_addend_the_store_refuses_is_the_callers_error() {
    // The Functions library counts to 2^53; the module takes any 64-bit charge.
    let redis = Server::start_without_module(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("api.yaml", HOURLY)], &["--failure-mode", "allow"]);
    let huge = 1_u64 << 60;
    let (status, answer) = service.check_json(&body("k1", huge));
    assert_eq!(status, 400, "{answer}");
    let detail = answer["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("2^53"), "names the problem: {answer}");

    let mut grpc = service.grpc().await;
    let mut refused = descriptor(&[("api_key", "k1")]);
    refused.hits_addend = Some(UInt64Value { value: huge });
    let status = grpc
        .should_rate_limit(request("api", vec![refused]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("2^53"), "{status:?}");

    // Nothing was charged, and the store still decides.
    let answer = grpc
        .should_rate_limit(request("api", vec![descriptor(&[("api_key", "k1")])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(
        answer.statuses[0].limit_remaining, 99,
        "the refused checks charged nothing"
    );
}
