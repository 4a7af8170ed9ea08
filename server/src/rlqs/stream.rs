//! One Envoy instance's stream: its buckets, each assigned a token bucket whose tokens were
//! charged to the bucket's limit in Redis before they were sent (a partial grant), renewed
//! every half life, settled from the usage Envoy reports, abandoned when silent, and
//! expired at once (TTL 0) when the service stops.
//!
//! **Why every renewal replaces the token bucket.** Envoy extends an assignment whose
//! strategy is unchanged without refilling it, and replaces one whose strategy changed with
//! a full bucket: a renewal is a new lease, so its strategy always differs from the last
//! one (the fill interval alternates between two values far longer than any assignment
//! lives, so the bucket holds its `max_tokens` and no more over its life).
//!
//! **Settlement.** A replaced assignment's unspent tokens are refunded once the usage it
//! saw has certainly been reported: after two reports of the bucket received since the
//! replacement was sent (Envoy reports at a fixed interval, longer than a round trip).
//! What is refunded is bounded by what settled assignments were charged minus every
//! request Envoy reported allowed (those of the live assignment too), so a refund never
//! exceeds the tokens that can no longer be spent. Assignments of a stream that ended or a
//! bucket abandoned are not refunded (Envoy may still spend them until they expire): they
//! lapse, under-admission and never over.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf;
use redis_ratelimit_client::store::{Acquire, LimitCall, Refund};
use tokio::sync::mpsc;
use tonic::Status as GrpcStatus;

use super::bucket::{self, Leased, Target};
use super::share::{self, Sizing};
use super::shared::{Shared, TOKENS};
use crate::verdict::CheckFailure;

/// Buckets one report may carry.
pub const MAX_REPORT_BUCKETS: usize = 256;
/// Buckets one stream may have assigned.
pub const MAX_STREAM_BUCKETS: usize = 1024;
/// The two fill intervals a leased token bucket alternates between (seconds): with one
/// token per fill, a bucket living at most the longest `--rlqs-ttl-ms` (1 h) gains less than one token.
const FILL_INTERVAL_SECONDS: i64 = 86_400;
/// Reports of a bucket after a replacement before the replaced assignment is settled.
const REPORTS_TO_SETTLE: u32 = 2;
/// Renewals without a request before a bucket is abandoned.
const SILENT_RENEWALS: u32 = 4;

/// What the stream sends Envoy.
pub type Outbound = mpsc::Sender<Result<RateLimitQuotaResponse, GrpcStatus>>;

/// A replaced assignment, not yet settled.
#[derive(Debug)]
struct Replaced {
    tokens: u64,
    reports_since: u32,
}

/// One bucket of the stream.
#[derive(Debug)]
struct Bucket {
    id: BucketId,
    target: Target,
    /// Requests (allowed and denied) reported since the last renewal.
    requests_since_renewal: u64,
    /// Requests per second over recent renewals (None before the first report's renewal).
    demand_per_second: Option<f64>,
    /// Renewals in a row without a request.
    quiet_renewals: u32,
    /// Tokens of the live assignment (charged in Redis).
    live_tokens: u64,
    /// Assignments sent, to alternate the strategy.
    generation: u64,
    replaced: Vec<Replaced>,
    /// Tokens of settled assignments, every request reported allowed, tokens refunded.
    settled_tokens: u64,
    reported_allowed: u64,
    refunded: u64,
    /// The strategy last sent (to expire it with TTL 0 at shutdown).
    last_strategy: Option<RateLimitStrategy>,
}

/// The stream's state.
pub struct Stream {
    shared: Arc<Shared>,
    id: u64,
    domain: Option<String>,
    buckets: HashMap<BTreeMap<String, String>, Bucket>,
    out: Outbound,
    last_renewal: Instant,
}

/// Why the stream ends.
pub enum End {
    /// Envoy closed it, or the answer channel is gone.
    Closed,
    /// Bad input: Envoy is told why.
    Refused(GrpcStatus),
}

impl Stream {
    /// A stream of instance number `id`.
    pub fn new(shared: Arc<Shared>, id: u64, out: Outbound) -> Self {
        Self {
            shared,
            id,
            domain: None,
            buckets: HashMap::new(),
            out,
            last_renewal: Instant::now(),
        }
    }

    /// Buckets assigned now.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Handles one report: checked whole first (a bad one changes nothing), then applied.
    pub async fn report(&mut self, report: RateLimitQuotaUsageReports) -> Result<(), End> {
        let domain = match (&self.domain, report.domain.as_str()) {
            (None, "") => {
                return Err(End::Refused(GrpcStatus::invalid_argument(
                    "the first report of a stream names its 'domain'",
                )));
            }
            (None, given) => given.to_string(),
            (Some(known), "") => known.clone(),
            (Some(known), given) if given == known => known.clone(),
            (Some(known), given) => {
                return Err(End::Refused(GrpcStatus::invalid_argument(format!(
                    "a stream has one domain: '{known}', not '{given}' (open another stream)"
                ))));
            }
        };
        if report.bucket_quota_usages.len() > MAX_REPORT_BUCKETS {
            return Err(End::Refused(GrpcStatus::invalid_argument(format!(
                "a report carries at most {MAX_REPORT_BUCKETS} buckets, not {}",
                report.bucket_quota_usages.len()
            ))));
        }
        let max_value_bytes = self.shared.settings.max_value_bytes;
        let mut checked = Vec::with_capacity(report.bucket_quota_usages.len());
        let mut new_targets: HashMap<BTreeMap<String, String>, Target> = HashMap::new();
        for usage in &report.bucket_quota_usages {
            let Some(id) = usage.bucket_id.as_ref() else {
                return Err(End::Refused(GrpcStatus::invalid_argument(
                    "a bucket_quota_usage has no bucket_id",
                )));
            };
            let map: BTreeMap<String, String> = id
                .bucket
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            let entries = bucket::entries(&map, max_value_bytes)
                .map_err(|error| End::Refused(GrpcStatus::invalid_argument(error.0)))?;
            if !self.buckets.contains_key(&map) && !new_targets.contains_key(&map) {
                let target = bucket::target(&self.shared.engine, &domain, &entries)
                    .map_err(|failure| End::Refused(refused(failure)))?;
                new_targets.insert(map.clone(), target);
            }
            checked.push((map, id.clone(), usage));
        }
        if self.buckets.len().saturating_add(new_targets.len()) > MAX_STREAM_BUCKETS {
            return Err(End::Refused(GrpcStatus::resource_exhausted(format!(
                "a stream has at most {MAX_STREAM_BUCKETS} buckets"
            ))));
        }
        self.domain = Some(domain);
        let mut actions = Vec::new();
        for (map, id, usage) in checked {
            if let Some(target) = new_targets.remove(&map) {
                self.buckets.insert(map.clone(), new_bucket(id, target));
            }
            let Some(bucket) = self.buckets.get_mut(&map) else {
                continue;
            };
            let requests = usage
                .num_requests_allowed
                .saturating_add(usage.num_requests_denied);
            bucket.requests_since_renewal = bucket.requests_since_renewal.saturating_add(requests);
            bucket.reported_allowed = bucket
                .reported_allowed
                .saturating_add(usage.num_requests_allowed);
            settle(&self.shared, bucket).await;
            if bucket.generation == 0
                && let Some(action) = assign(&self.shared, self.id, bucket).await
            {
                actions.push(action);
            }
        }
        self.send(actions).await
    }

    /// Renews every bucket's assignment, abandoning those without a request for
    /// [`SILENT_RENEWALS`] renewals.
    pub async fn renew(&mut self) -> Result<(), End> {
        let elapsed = self.last_renewal.elapsed().as_secs_f64().max(0.001);
        self.last_renewal = Instant::now();
        let mut actions = Vec::new();
        let mut silent = Vec::new();
        for (map, bucket) in &mut self.buckets {
            #[allow(clippy::cast_precision_loss)]
            let rate = bucket.requests_since_renewal as f64 / elapsed;
            bucket.demand_per_second = Some(match bucket.demand_per_second {
                Some(before) => (before + rate) / 2.0,
                None => rate,
            });
            if bucket.requests_since_renewal == 0 {
                bucket.quiet_renewals = bucket.quiet_renewals.saturating_add(1);
            } else {
                bucket.quiet_renewals = 0;
            }
            bucket.requests_since_renewal = 0;
            if bucket.quiet_renewals >= SILENT_RENEWALS {
                silent.push(map.clone());
                actions.push(BucketAction {
                    bucket_id: Some(bucket.id.clone()),
                    bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                });
                continue;
            }
            if let Some(action) = assign(&self.shared, self.id, bucket).await {
                actions.push(action);
            }
        }
        for map in silent {
            if let Some(bucket) = self.buckets.remove(&map) {
                forget(&self.shared, self.id, &bucket);
            }
        }
        self.send(actions).await
    }

    /// Expires every assignment at once (TTL 0: Envoy falls back to its
    /// `expired_assignment_behavior`), as the service stops.
    pub async fn expire_all(&mut self) {
        let actions = self
            .buckets
            .values()
            .filter_map(|bucket| {
                let strategy = bucket.last_strategy?;
                Some(assignment(&bucket.id, strategy, Duration::ZERO))
            })
            .collect();
        let _ = self.send(actions).await;
    }

    /// The stream ended: its demand is forgotten; its assignments lapse.
    pub fn close(&mut self) {
        for bucket in self.buckets.values() {
            forget(&self.shared, self.id, bucket);
        }
        self.buckets.clear();
    }

    async fn send(&self, actions: Vec<BucketAction>) -> Result<(), End> {
        if actions.is_empty() {
            return Ok(());
        }
        let response = RateLimitQuotaResponse {
            bucket_action: actions,
        };
        self.out.send(Ok(response)).await.map_err(|_| End::Closed)
    }
}

fn refused(failure: CheckFailure) -> GrpcStatus {
    match failure {
        CheckFailure::BadRequest(error) => GrpcStatus::invalid_argument(error.0),
        CheckFailure::Internal(error) => GrpcStatus::internal(error),
    }
}

fn new_bucket(id: BucketId, target: Target) -> Bucket {
    Bucket {
        id,
        target,
        requests_since_renewal: 0,
        demand_per_second: None,
        quiet_renewals: 0,
        live_tokens: 0,
        generation: 0,
        replaced: Vec::new(),
        settled_tokens: 0,
        reported_allowed: 0,
        refunded: 0,
        last_strategy: None,
    }
}

fn forget(shared: &Shared, stream: u64, bucket: &Bucket) {
    if let Target::Leased(leased) = &bucket.target {
        shared.demand.forget(&leased.key, stream);
    }
}

fn assignment(id: &BucketId, strategy: RateLimitStrategy, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(id.clone()),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(duration(ttl)),
            rate_limit_strategy: Some(strategy),
        })),
    }
}

fn duration(span: Duration) -> protobuf::Duration {
    protobuf::Duration {
        seconds: i64::try_from(span.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(span.subsec_nanos()).unwrap_or(0),
    }
}

fn blanket(rule: BlanketRule) -> RateLimitStrategy {
    RateLimitStrategy {
        strategy: Some(Strategy::BlanketRule(rule as i32)),
    }
}

/// The bucket's next assignment: for a leased bucket, tokens charged in Redis first (the
/// live assignment, replaced, waits for its settlement); `None` when nothing is sent (an
/// unsupported limit; the store out of reach: the live assignment runs out and Envoy's
/// `expired_assignment_behavior` decides).
async fn assign(shared: &Shared, stream: u64, bucket: &mut Bucket) -> Option<BucketAction> {
    let ttl = shared.settings.ttl;
    let strategy = match &bucket.target {
        Target::AllowAll => blanket(BlanketRule::AllowAll),
        Target::DenyAll => blanket(BlanketRule::DenyAll),
        Target::Unsupported => return None,
        Target::Leased(leased) => {
            let leased = leased.clone();
            let granted = charge(shared, stream, bucket, &leased).await?;
            if bucket.live_tokens > 0 {
                bucket.replaced.push(Replaced {
                    tokens: bucket.live_tokens,
                    reports_since: 0,
                });
            }
            bucket.live_tokens = granted;
            match u32::try_from(granted) {
                Ok(max_tokens) if max_tokens > 0 => token_bucket(max_tokens, bucket.generation),
                _ => blanket(BlanketRule::DenyAll),
            }
        }
    };
    bucket.generation = bucket.generation.saturating_add(1);
    bucket.last_strategy = Some(strategy);
    Some(assignment(&bucket.id, strategy, ttl))
}

/// Tokens charged to the limit for one assignment (0: the quota is spent), `None` if the
/// store failed (nothing charged, never sent again).
async fn charge(shared: &Shared, stream: u64, bucket: &Bucket, leased: &Leased) -> Option<u64> {
    let (total, streams) =
        shared
            .demand
            .note(&leased.key, stream, bucket.demand_per_second.unwrap_or(0.0));
    let asked = share::tokens(Sizing {
        rate_per_second: leased.rate_per_second,
        ttl_seconds: shared.settings.ttl.as_secs_f64(),
        mine_per_second: bucket.demand_per_second,
        total_per_second: total,
        streams,
    });
    let call = LimitCall {
        key: &leased.key,
        algorithm: &leased.algorithm,
        weight: 1,
        max_wait: None,
        lease_suffix: None,
    };
    let request = Acquire {
        limits: vec![call],
        units: asked,
        partial_min: Some(1),
        holder: None,
    };
    match shared.store.acquire(&request).await {
        Ok(grant) => {
            metrics::counter!(TOKENS, "what" => "charged").increment(grant.granted);
            Some(grant.granted)
        }
        Err(error) => {
            tracing::warn!(
                key = leased.key,
                "RLQS: no tokens leased, the store failed: {error}"
            );
            None
        }
    }
}

/// A leased token bucket. Both the fill interval's seconds and its nanos alternate: Envoy
/// 1.40 deems a token bucket unchanged (and keeps the old, spent one) when its `max_tokens`,
/// `tokens_per_fill` and `fill_interval.nanos` are equal, the seconds not compared; so a
/// renewal of the same size as the last must differ in the nanos.
fn token_bucket(max_tokens: u32, generation: u64) -> RateLimitStrategy {
    let odd = generation % 2 == 1;
    RateLimitStrategy {
        strategy: Some(Strategy::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill: Some(protobuf::UInt32Value { value: 1 }),
            fill_interval: Some(protobuf::Duration {
                seconds: FILL_INTERVAL_SECONDS.saturating_add(i64::from(odd)),
                nanos: i32::from(odd),
            }),
        })),
    }
}

/// Counts a report against the replaced assignments and refunds what has settled.
async fn settle(shared: &Shared, bucket: &mut Bucket) {
    let mut settled = 0u64;
    bucket.replaced.retain_mut(|replaced| {
        replaced.reports_since = replaced.reports_since.saturating_add(1);
        if replaced.reports_since >= REPORTS_TO_SETTLE {
            settled = settled.saturating_add(replaced.tokens);
            false
        } else {
            true
        }
    });
    bucket.settled_tokens = bucket.settled_tokens.saturating_add(settled);
    let Target::Leased(leased) = &bucket.target else {
        return;
    };
    let unspent = bucket
        .settled_tokens
        .saturating_sub(bucket.reported_allowed)
        .saturating_sub(bucket.refunded);
    if unspent == 0 {
        return;
    }
    // Counted as refunded before it is sent: a refund is never sent twice (a lost one
    // leaves its tokens spent: under-admission).
    bucket.refunded = bucket.refunded.saturating_add(unspent);
    let call = LimitCall {
        key: &leased.key,
        algorithm: &leased.algorithm,
        weight: 1,
        max_wait: None,
        lease_suffix: None,
    };
    let refund = Refund {
        limits: vec![call],
        units: unspent,
        holder: None,
    };
    match shared.store.refund(&refund).await {
        Ok(()) => metrics::counter!(TOKENS, "what" => "refunded").increment(unspent),
        Err(error) => {
            tracing::warn!(key = leased.key, "RLQS: a refund was lost: {error}");
        }
    }
}
