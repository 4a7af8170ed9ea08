//! The stated bound, measured: fake Envoy instances (tonic client streams behaving as
//! Envoy 1.40's filter does: a token bucket per assignment, replaced by a changed strategy,
//! expired at its TTL, usage reported at a fixed interval) offer several times the quota
//! of one bucket to the service on a real redis-server with the module. In every Redis
//! window (1 s, aligned to the epoch) the requests they admitted are at most the quota plus
//! the tokens outstanding at its start; a planted bug (assignments not charged) breaks it.
//! Also: allow_all, deny_all, bad input refused, TTL 0 at stop.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::r#type::v3::TokenBucket;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use redis_ratelimit_client::store::{
    Acquire, BoxFuture, Capabilities, GroupGrant, RedisStore, Refund,
    Store, StoreBackend, StoreError,
};
use redis_ratelimit_client::{Profile, RateLimiter};
use redis_ratelimit_plans::PlanOptions;
use redis_ratelimit_testkit::server::Server;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Rlqs, Settings};
use crate::cli::DEFAULT_MAX_DEPTH;
use crate::config::assemble;
use crate::engine::{Engine, EngineSettings, PROFILE};
use crate::grpc::Authenticate;
use crate::plans::Plans;
use crate::request::Bounds;

const QUOTA_PER_SECOND: u64 = 60;
const CONFIG: &str = "domain: edge
descriptors:
  - key: route
    value: hot
    descriptors:
      - key: tier
        rate_limit: {unit: second, requests_per_unit: 60}
  - key: route
    value: free
    rate_limit: {unlimited: true}
  - key: route
    value: closed
    rate_limit: {unit: second, requests_per_unit: 0}
";

/// A store that grants what it is asked without charging anything: the planted bug.
struct Uncharged;

impl Store for Uncharged {
    fn acquire<'a>(
        &'a self,
        request: &'a Acquire<'a>,
    ) -> BoxFuture<'a, Result<GroupGrant, StoreError>> {
        Box::pin(async move {
            Ok(GroupGrant {
                granted: request.units,
                binding: 0,
                views: Vec::new(),
                backend: StoreBackend::Module,
            })
        })
    }
    fn refund<'a>(&'a self, _request: &'a Refund<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            multi: true,
            partial: true,
        }
    }
    fn slot(&self, _key: &str) -> Option<u16> {
        None
    }
}

fn engine(store: Arc<dyn Store>) -> Arc<Engine> {
    let config = assemble(
        vec![(PathBuf::from("edge.yaml"), CONFIG.to_string())],
        DEFAULT_MAX_DEPTH,
    )
    .unwrap_or_else(|errors| panic!("{errors:?}"));
    let limiter = RateLimiter::builder_shared(store)
        .profile(Profile::builder(PROFILE).build().unwrap())
        .build()
        .unwrap();
    let plans = Plans::new(
        vec!["redis://127.0.0.1:1/".into()],
        false,
        PlanOptions::default(),
    );
    Arc::new(Engine::new(
        config,
        limiter,
        plans,
        EngineSettings {
            bounds: Bounds::default(),
            key_prefix: "rlqs-test:".into(),
            shadow_mode: false,
            reference_metadata: false,
            max_held: 1024,
            near_limit_ratio: 0.8,
        },
    ))
}

/// The service on a loopback port: its address and the handle that stops it.
async fn serve(store: Arc<dyn Store>, ttl: Duration) -> (String, Rlqs) {
    let rlqs = Rlqs::new(
        engine(Arc::clone(&store)),
        store,
        Settings {
            ttl,
            max_value_bytes: 256,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let service = rlqs.clone().service(Authenticate::new(None));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    (format!("http://{address}"), rlqs)
}

fn bucket(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What one fake Envoy saw: its admissions (Unix seconds).
#[derive(Default)]
struct Seen {
    admitted: Vec<f64>,
    denied: u64,
    assignments: u64,
}

/// Envoy 1.40's `AtomicTokenBucketImpl` as the filter builds it from an assignment
/// (`createTokenBucketFromAction`): at most `max_tokens`; starting with `max_tokens` when
/// no token bucket is live, else with `max_tokens ×` the fraction the live one still holds
/// (rounded down); refilled at `tokens_per_fill / whole seconds of fill_interval` per
/// second; a request takes 1 token.
struct EnvoyTokenBucket {
    max_tokens: f64,
    per_second: f64,
    /// The instant the bucket was last empty (tokens = elapsed since then × rate).
    empty_at: Instant,
}

impl EnvoyTokenBucket {
    fn new(bucket: &TokenBucket, replaced: Option<&Self>) -> Self {
        let fill_seconds = bucket.fill_interval.map_or(0, |interval| interval.seconds);
        let per_second = f64::from(bucket.tokens_per_fill.map_or(1, |fill| fill.value))
            / fill_seconds.max(0) as f64;
        let max_tokens = f64::from(bucket.max_tokens);
        let initial = match replaced {
            Some(old) => (max_tokens * (old.remaining() / old.max_tokens)).floor(),
            None => max_tokens,
        };
        let now = Instant::now();
        Self {
            max_tokens,
            per_second,
            empty_at: now
                .checked_sub(Duration::from_secs_f64(initial / per_second))
                .unwrap_or(now),
        }
    }

    fn remaining(&self) -> f64 {
        self.max_tokens
            .min(self.empty_at.elapsed().as_secs_f64() * self.per_second)
    }

    fn consume(&mut self) -> bool {
        let now = Instant::now();
        let tokens = (self.max_tokens)
            .min(now.duration_since(self.empty_at).as_secs_f64() * self.per_second);
        if tokens < 1.0 {
            return false;
        }
        self.empty_at = now
            .checked_sub(Duration::from_secs_f64((tokens - 1.0) / self.per_second))
            .unwrap_or(now);
        true
    }
}

/// Envoy 1.40's `protoTokenBucketsEq`: a renewal equal in these keeps the live bucket.
fn same_bucket(new: &TokenBucket, old: &TokenBucket) -> bool {
    new.max_tokens == old.max_tokens
        && new.tokens_per_fill.map(|fill| fill.value) == old.tokens_per_fill.map(|fill| fill.value)
        && new.fill_interval.map(|interval| interval.nanos)
            == old.fill_interval.map(|interval| interval.nanos)
}

/// One fake Envoy: offers a request every `every` for `run`, reports every
/// `report_every` (Envoy 1.40: 5 s), as the filter would: a token bucket per assignment,
/// kept when a renewal's is the same, started from the live one's fraction when replaced,
/// expired (denied, the token bucket dropped) after the whole seconds of its TTL.
async fn envoy(
    url: String,
    id: BucketId,
    every: Duration,
    report_every: Duration,
    run: Duration,
) -> Seen {
    let mut client = RateLimitQuotaServiceClient::connect(url).await.unwrap();
    let (reports, inbound) = mpsc::channel(16);
    let first = RateLimitQuotaUsageReports {
        domain: "edge".into(),
        bucket_quota_usages: vec![usage(&id, 0, 0)],
    };
    reports.send(first).await.unwrap();
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(inbound))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Seen::default();
    let mut live: Option<(TokenBucket, EnvoyTokenBucket)> = None;
    let mut expires = Instant::now();
    let (mut allowed, mut denied) = (0u64, 0u64);
    let started = Instant::now();
    let mut requests = tokio::time::interval(every);
    let mut reporting = tokio::time::interval(report_every);
    reporting.tick().await;
    while started.elapsed() < run {
        tokio::select! {
            _ = requests.tick() => {
                let admit = Instant::now() < expires
                    && live.as_mut().is_some_and(|(_, bucket)| bucket.consume());
                if admit {
                    allowed += 1;
                    seen.admitted.push(now_seconds());
                } else {
                    denied += 1;
                    seen.denied += 1;
                }
            }
            _ = reporting.tick() => {
                let report = RateLimitQuotaUsageReports {
                    domain: String::new(),
                    bucket_quota_usages: vec![usage(&id, allowed, denied)],
                };
                (allowed, denied) = (0, 0);
                if reports.send(report).await.is_err() { break; }
            }
            answer = answers.message() => {
                let Ok(Some(answer)) = answer else { break };
                for action in answer.bucket_action {
                    let Some(Action::QuotaAssignmentAction(assignment)) = action.bucket_action else { continue };
                    // Envoy 1.40 reads only the whole seconds of the TTL.
                    let ttl_seconds = assignment.assignment_time_to_live.map_or(3600, |ttl| ttl.seconds);
                    let strategy = assignment.rate_limit_strategy.and_then(|s| s.strategy);
                    // An expired assignment fell back to DENY_ALL, its token bucket dropped.
                    let current = if Instant::now() < expires { live.take() } else { None };
                    live = match strategy {
                        Some(Strategy::TokenBucket(new)) => match current {
                            Some((old, bucket)) if same_bucket(&new, &old) => Some((new, bucket)),
                            Some((_, bucket)) => {
                                let replacing = EnvoyTokenBucket::new(&new, Some(&bucket));
                                Some((new, replacing))
                            }
                            None => Some((new, EnvoyTokenBucket::new(&new, None))),
                        },
                        _ => None,
                    };
                    expires = Instant::now() + Duration::from_secs(ttl_seconds.clamp(0, 3600) as u64);
                    seen.assignments += 1;
                }
            }
        }
    }
    seen
}

fn usage(id: &BucketId, allowed: u64, denied: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id.clone()),
        time_elapsed: None,
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// One sample of the service's own accounting, taken between `from` and `to` (Unix seconds).
struct Sample {
    from: f64,
    to: f64,
    charged: u64,
    refunded: u64,
}

/// Per whole window inside the run: (admitted, quota + outstanding at its start `s`). The
/// outstanding tokens are the service's: charged − refunded − admitted before `s`, with
/// the charges read from the first sample taken wholly after `s` and the refunds from the
/// last taken wholly before it, so that timing can only loosen the check.
fn windows(seen: &[Seen], samples: &[Sample]) -> Vec<(u64, u64)> {
    let mut admitted: Vec<f64> = seen
        .iter()
        .flat_map(|s| s.admitted.iter().copied())
        .collect();
    admitted.sort_by(f64::total_cmp);
    let mut out = Vec::new();
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return out;
    };
    let mut start = first.to.ceil();
    while start + 1.0 <= last.from {
        let in_window = admitted
            .iter()
            .filter(|t| **t >= start && **t < start + 1.0)
            .count() as u64;
        let before = admitted.iter().filter(|t| **t < start).count() as u64;
        let Some(charged) = samples
            .iter()
            .find(|sample| sample.from >= start)
            .map(|s| s.charged)
        else {
            break;
        };
        let refunded = samples
            .iter()
            .rev()
            .find(|sample| sample.to <= start)
            .map_or(0, |sample| sample.refunded);
        let outstanding = charged.saturating_sub(refunded).saturating_sub(before);
        out.push((in_window, QUOTA_PER_SECOND + outstanding));
        start += 1.0;
    }
    out
}

/// Spans of consecutive windows whose admissions exceed `k × Q +` the outstanding tokens at
/// the span's start (the bound over a span of `k` Redis windows, each holding at most `Q`):
/// (first window, windows, admitted, bound).
fn spans_over_the_bound(windows: &[(u64, u64)]) -> Vec<(usize, usize, u64, u64)> {
    let mut over = Vec::new();
    for first in 0..windows.len() {
        let mut admitted = 0;
        for (offset, window) in windows[first..].iter().enumerate() {
            admitted += window.0;
            let bound = windows[first].1 + offset as u64 * QUOTA_PER_SECOND;
            if admitted > bound {
                over.push((first, offset + 1, admitted, bound));
            }
        }
    }
    over
}

/// Both services' tokens charged and refunded.
fn tokens_of(services: &[Rlqs]) -> (u64, u64) {
    services
        .iter()
        .map(Rlqs::tokens)
        .fold((0, 0), |(charged, refunded), (c, r)| {
            (charged + c, refunded + r)
        })
}

/// Three fake Envoys at 5x the quota on two services sharing `store` (Envoys 0 and 2 on
/// the first, Envoy 1 on the second): each service splits the quota among its own streams,
/// so together they ask twice the quota, and only the store's charges keep the fleet
/// within it.
async fn three_envoys(store: Arc<dyn Store>) -> (Vec<(u64, u64)>, (u64, u64)) {
    let mut urls = Vec::new();
    let mut services = Vec::new();
    for _ in 0..2 {
        let (url, rlqs) = serve(Arc::clone(&store), Duration::from_secs(2)).await;
        urls.push(url);
        services.push(rlqs);
    }
    let id = bucket(&[("tier", "gold"), ("route", "hot")]);
    let sampling = tokio_util::sync::CancellationToken::new();
    let sampler = {
        let (services, sampling) = (services.clone(), sampling.clone());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !sampling.is_cancelled() {
                let from = now_seconds();
                let (charged, refunded) = tokens_of(&services);
                let to = now_seconds();
                samples.push(Sample {
                    from,
                    to,
                    charged,
                    refunded,
                });
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        })
    };
    let envoys: Vec<_> = (0..3)
        .map(|index| {
            tokio::spawn(envoy(
                urls[index % 2].clone(),
                id.clone(),
                Duration::from_millis(10),
                Duration::from_secs(5),
                Duration::from_millis(14_000),
            ))
        })
        .collect();
    let mut seen = Vec::new();
    for envoy in envoys {
        seen.push(envoy.await.unwrap());
    }
    sampling.cancel();
    let samples = sampler.await.unwrap();
    for rlqs in &services {
        rlqs.stop();
    }
    assert!(
        seen.iter().all(|s| s.assignments > 5),
        "every Envoy was assigned, renewed"
    );
    (windows(&seen, &samples), tokens_of(&services))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_stays_within_the_quota_plus_the_outstanding_tokens() {
    let redis = Server::start(&[]);
    let store: Arc<dyn Store> =
        Arc::new(RedisStore::new(&format!("redis://127.0.0.1:{}/", redis.port)).unwrap());
    let (windows, (charged, refunded)) = three_envoys(store).await;
    println!(
        "RLQS bound, 3 Envoys at 5x a quota of {QUOTA_PER_SECOND}/s: (admitted, bound) per 1 s window: {windows:?}; tokens charged {charged}, refunded {refunded}"
    );
    let over = spans_over_the_bound(&windows);
    assert!(over.is_empty(), "spans over the bound: {over:?}");
    assert!(windows.len() >= 3, "{windows:?}");
    for (admitted, bound) in &windows {
        assert!(
            admitted <= bound,
            "admitted {admitted} > bound {bound}: {windows:?}"
        );
        // Demand is 5x the quota: at least half of the quota is used.
        assert!(
            *admitted as f64 >= 0.5 * QUOTA_PER_SECOND as f64,
            "utilisation: {windows:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planted_bug_assignments_not_charged_is_caught() {
    let (windows, _) = three_envoys(Arc::new(Uncharged)).await;
    let over = spans_over_the_bound(&windows);
    let whole = over
        .iter()
        .find(|span| span.0 == 0 && span.1 == windows.len());
    println!(
        "planted bug (not charged): (admitted, bound) per window: {windows:?}; \
         over the whole run (first, windows, admitted, bound): {whole:?}"
    );
    assert!(
        whole.is_some(),
        "the check missed assignments that were never charged: {windows:?}"
    );
}

/// The first answer of a stream opened with `reports`.
async fn first_answer(
    url: &str,
    reports: Vec<RateLimitQuotaUsageReports>,
) -> Result<RateLimitQuotaResponse, tonic::Status> {
    let mut client = RateLimitQuotaServiceClient::connect(url.to_string())
        .await
        .unwrap();
    let (sender, inbound) = mpsc::channel(16);
    for report in reports {
        sender.send(report).await.unwrap();
    }
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(inbound))
        .await?
        .into_inner();
    let answer = tokio::time::timeout(Duration::from_secs(5), answers.message())
        .await
        .unwrap()?;
    drop(sender);
    answer.ok_or_else(|| tonic::Status::cancelled("no answer"))
}

fn blanket_of(answer: &RateLimitQuotaResponse) -> Option<i32> {
    match answer.bucket_action.first()?.bucket_action.as_ref()? {
        Action::QuotaAssignmentAction(assignment) => {
            match assignment.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
                Strategy::BlanketRule(rule) => Some(*rule),
                Strategy::TokenBucket(_) | Strategy::RequestsPerTimeUnit(_) => None,
            }
        }
        Action::AbandonAction(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_is_allow_all_and_zero_is_deny_all_and_bad_input_is_refused() {
    let redis = Server::start(&[]);
    let store: Arc<dyn Store> =
        Arc::new(RedisStore::new(&format!("redis://127.0.0.1:{}/", redis.port)).unwrap());
    let (url, _rlqs) = serve(store, Duration::from_secs(2)).await;
    let report = |domain: &str, entries: &[(&str, &str)]| RateLimitQuotaUsageReports {
        domain: domain.into(),
        bucket_quota_usages: vec![usage(&bucket(entries), 0, 0)],
    };
    let free = first_answer(&url, vec![report("edge", &[("route", "free")])])
        .await
        .unwrap();
    assert_eq!(blanket_of(&free), Some(BlanketRule::AllowAll as i32));
    let closed = first_answer(&url, vec![report("edge", &[("route", "closed")])])
        .await
        .unwrap();
    assert_eq!(blanket_of(&closed), Some(BlanketRule::DenyAll as i32));
    let no_domain = first_answer(&url, vec![report("", &[("route", "free")])])
        .await
        .unwrap_err();
    assert_eq!(
        no_domain.code(),
        tonic::Code::InvalidArgument,
        "{no_domain:?}"
    );
    assert!(no_domain.message().contains("domain"), "{no_domain:?}");
    let unknown = first_answer(&url, vec![report("nowhere", &[("route", "free")])])
        .await
        .unwrap_err();
    assert!(
        unknown.message().contains("unknown domain 'nowhere'"),
        "{unknown:?}"
    );
    let empty = first_answer(&url, vec![report("edge", &[])])
        .await
        .unwrap_err();
    assert!(empty.message().contains("no entries"), "{empty:?}");
    let wide: Vec<(String, String)> = (0..6).map(|i| (format!("k{i}"), "v".to_string())).collect();
    let wide: Vec<(&str, &str)> = wide.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let too_wide = first_answer(&url, vec![report("edge", &wide)])
        .await
        .unwrap_err();
    assert!(too_wide.message().contains("more than 5"), "{too_wide:?}");
    // A bad report after a good one: refused, nothing charged for the bad one.
    let mut mixed = report("edge", &[("route", "hot"), ("tier", "gold")]);
    mixed.bucket_quota_usages.push(usage(&bucket(&[]), 0, 0));
    let refused = first_answer(&url, vec![mixed]).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let mut connection = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rlqs-test:*")
        .query(&mut connection)
        .unwrap();
    assert!(
        keys.is_empty(),
        "a refused report charged nothing: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_expires_every_assignment_at_once() {
    let redis = Server::start(&[]);
    let store: Arc<dyn Store> =
        Arc::new(RedisStore::new(&format!("redis://127.0.0.1:{}/", redis.port)).unwrap());
    let (url, rlqs) = serve(store, Duration::from_secs(10)).await;
    let mut client = RateLimitQuotaServiceClient::connect(url).await.unwrap();
    let (sender, inbound) = mpsc::channel(4);
    sender
        .send(RateLimitQuotaUsageReports {
            domain: "edge".into(),
            bucket_quota_usages: vec![usage(&bucket(&[("route", "hot"), ("tier", "x")]), 0, 0)],
        })
        .await
        .unwrap();
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(inbound))
        .await
        .unwrap()
        .into_inner();
    let first = answers.message().await.unwrap().unwrap();
    let ttl_of =
        |answer: &RateLimitQuotaResponse| match answer.bucket_action[0].bucket_action.as_ref() {
            Some(Action::QuotaAssignmentAction(assignment)) => assignment.assignment_time_to_live,
            _ => None,
        };
    assert_eq!(ttl_of(&first).map(|ttl| ttl.seconds), Some(10));
    rlqs.stop();
    let last = tokio::time::timeout(Duration::from_secs(5), answers.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ttl = ttl_of(&last).unwrap();
    assert_eq!((ttl.seconds, ttl.nanos), (0, 0), "TTL 0 at stop");
    let end = tokio::time::timeout(Duration::from_secs(5), answers.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "the stream ends: {end:?}");
}
