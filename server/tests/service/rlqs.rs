//! RLQS through the real binary's gRPC listener (`--rlqs`): a stream lives longer than
//! `--request-timeout-ms` (tonic's timeout bounds a call until its answer's head, so an RLS
//! check whole and only the opening of an RLQS stream) and is renewed after it; open streams
//! do not hold the connection's `--grpc-concurrency` (a check and another stream are served
//! beside them on the same connection), their bound being the RLQS streams' (1024) and
//! `--max-streams` per connection.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_testkit::server::Server;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;

use crate::harness::{Service, descriptor, redis_url, request};

const CONFIG: &str = "
domain: edge
descriptors:
  - key: route
    rate_limit: {unit: second, requests_per_unit: 1000}
";

/// The request timeout the service is given; the stream is held four times as long.
const REQUEST_TIMEOUT_MS: u64 = 300;

fn report(route: &str, allowed: u64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "edge".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("route".to_string(), route.to_string())].into(),
            }),
            time_elapsed: None,
            num_requests_allowed: allowed,
            num_requests_denied: 0,
        }],
    }
}

/// The size of an answer's token bucket (each one comes after a `deny_all` for the same
/// bucket, which makes Envoy start it full).
fn max_tokens(answer: &RateLimitQuotaResponse) -> Option<u32> {
    answer
        .bucket_action
        .iter()
        .find_map(|action| match action.bucket_action.as_ref()? {
            Action::QuotaAssignmentAction(assignment) => {
                match assignment.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
                    Strategy::TokenBucket(bucket) => Some(bucket.max_tokens),
                    _ => None,
                }
            }
            Action::AbandonAction(_) => None,
        })
}

/// Opens a stream on `channel` reporting `route`; the sender keeps it open.
async fn open(
    channel: &Channel,
    route: &str,
) -> (
    mpsc::Sender<RateLimitQuotaUsageReports>,
    Streaming<RateLimitQuotaResponse>,
) {
    let (reports, inbound) = mpsc::channel(16);
    reports.send(report(route, 0)).await.unwrap();
    let answers = RateLimitQuotaServiceClient::new(channel.clone())
        .stream_rate_limit_quotas(ReceiverStream::new(inbound))
        .await
        .unwrap()
        .into_inner();
    (reports, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_request_timeout_and_holds_no_concurrency_slot() {
    let redis = Server::start(&[]);
    let timeout = REQUEST_TIMEOUT_MS.to_string();
    let service = Service::start(
        &redis_url(&redis),
        &[("edge.yaml", CONFIG)],
        &[
            "--rlqs",
            "--rlqs-ttl-ms",
            "200",
            "--request-timeout-ms",
            &timeout,
            "--grpc-concurrency",
            "1",
        ],
    );
    // One HTTP/2 connection for the streams and the check.
    let channel = Channel::from_shared(format!("http://{}", service.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let opened = Instant::now();
    let (reports, mut answers) = open(&channel, "hot").await;
    let first = tokio::time::timeout(Duration::from_secs(5), answers.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        max_tokens(&first).is_some_and(|tokens| tokens > 0),
        "{first:?}"
    );

    // Beside the open stream, on the same connection with --grpc-concurrency 1: a second
    // stream is assigned, and an RLS check is answered.
    let (_second_reports, mut second) = open(&channel, "cold").await;
    let assigned = tokio::time::timeout(Duration::from_secs(5), second.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(max_tokens(&assigned).is_some(), "{assigned:?}");
    let checked = RateLimitServiceClient::new(channel.clone())
        .should_rate_limit(request("edge", vec![descriptor(&[("route", "rls")])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(checked.overall_code, 1, "OK: {checked:?}");

    // Held four request timeouts, reporting as Envoy does (a request each time, so the
    // bucket is never abandoned): renewals keep coming, the last after the timeout passed.
    let hold = Duration::from_millis(REQUEST_TIMEOUT_MS * 4);
    let mut renewals_after_timeout = 0;
    let mut reporting = tokio::time::interval(Duration::from_millis(50));
    while opened.elapsed() < hold {
        tokio::select! {
            _ = reporting.tick() => reports.send(report("hot", 1)).await.unwrap(),
            answer = answers.message() => {
                let answer = answer
                    .unwrap_or_else(|status| panic!("the stream was cut at {:?}: {status:?}", opened.elapsed()))
                    .unwrap_or_else(|| panic!("the stream ended at {:?}", opened.elapsed()));
                assert!(max_tokens(&answer).is_some(), "{answer:?}");
                if opened.elapsed() > Duration::from_millis(REQUEST_TIMEOUT_MS * 2) {
                    renewals_after_timeout += 1;
                }
            }
        }
    }
    assert!(
        renewals_after_timeout >= 2,
        "renewals after twice the request timeout: {renewals_after_timeout}\n{}",
        service.log()
    );
}
