//! One Envoy instance's stream: its buckets, each assigned a token bucket whose tokens were
//! charged to the bucket's limit in Redis before they were sent (a partial grant), renewed
//! every half life, settled from the usage Envoy reports, abandoned when silent, and
//! expired at once (TTL 0) when the service stops.
//!
//! **Why every renewal starts a full token bucket.** Envoy 1.40 keeps the live token
//! bucket (spent or not) when a renewal's is equal in `max_tokens`, `tokens_per_fill` and
//! `fill_interval`'s nanos, and otherwise builds a new one starting with the fraction of
//! `max_tokens` the live one still holds (none under load), or full when none is live. A
//! renewal is a new lease: it is sent after a `deny_all` for the same bucket in the same
//! response, which drops the live bucket before any request sees it, so the new one starts
//! full; and the nanos alternate between 0 and 1 (Envoy reads only the whole seconds of the
//! interval for the rate). The bucket's shape ([`super::lease`]) keeps what Envoy admits
//! under it, over its whole life, within the tokens charged.
//!
//! **Settlement.** At each report of a bucket, the tokens its leases were charged beyond
//! every request reported allowed and beyond what the leases not certainly over may still
//! admit are refunded ([`super::ledger`]): a refund never gives back a token that could
//! still be spent. Leases of a stream that ended or a bucket abandoned are not refunded
//! (Envoy may still spend them until they expire): they lapse, under-admission and never
//! over.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
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
use super::lease::{self, Shape};
use super::ledger::Ledger;
use super::share::{self, Sizing};
use super::shared::{MESSAGES, Shared, TOKENS};
use crate::verdict::CheckFailure;

/// Buckets one report may carry.
pub const MAX_REPORT_BUCKETS: usize = 256;
/// Buckets one stream may have assigned.
pub const MAX_STREAM_BUCKETS: usize = 1024;
/// How long a bucket may go without a reported request before it is abandoned: at least
/// this, and at least 4 TTLs. Envoy 1.40 reports every 5 s whatever `reporting_interval`
/// says (`filter_persistence.cc`), so this spans three of its reports.
const SILENT_AT_LEAST: Duration = Duration::from_secs(15);

/// What the stream sends Envoy.
pub type Outbound = mpsc::Sender<Result<RateLimitQuotaResponse, GrpcStatus>>;

/// One bucket of the stream.
#[derive(Debug)]
struct Bucket {
    id: BucketId,
    target: Target,
    /// When the bucket was last reported, and last reported with a request.
    last_report: Option<Instant>,
    last_request: Instant,
    /// Requests per second over recent renewals (None before the first report's renewal).
    demand_per_second: Option<f64>,
    /// Assignments sent, to alternate the strategy.
    generation: u64,
    /// When the bucket was last assigned (its first assignment comes with its first report,
    /// at any phase of the stream's renewals).
    assigned_at: Option<Instant>,
    /// The leases charged, the requests reported allowed, the tokens refunded.
    ledger: Ledger,
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
        }
    }

    /// Buckets assigned now.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Handles one report: checked whole first (a bad one changes nothing), then applied.
    pub async fn report(&mut self, report: RateLimitQuotaUsageReports) -> Result<(), End> {
        metrics::counter!(MESSAGES, "direction" => "received").increment(1);
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
            note_demand(bucket, requests);
            settle(&self.shared, bucket, usage.num_requests_allowed).await;
            if bucket.generation == 0 {
                actions.extend(assign(&self.shared, self.id, bucket).await);
            }
        }
        self.send(actions).await
    }

    /// Renews every bucket's assignment, abandoning those without a reported request for
    /// [`SILENT_AT_LEAST`] (and 4 TTLs).
    pub async fn renew(&mut self) -> Result<(), End> {
        let silent_after = self
            .shared
            .settings
            .ttl
            .saturating_mul(4)
            .max(SILENT_AT_LEAST);
        let half_period = renewal_period(self.shared.settings.ttl)
            .checked_div(2)
            .unwrap_or_default();
        let mut actions = Vec::new();
        let mut silent = Vec::new();
        for (map, bucket) in &mut self.buckets {
            if bucket.last_request.elapsed() >= silent_after {
                silent.push(map.clone());
                actions.push(BucketAction {
                    bucket_id: Some(bucket.id.clone()),
                    bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                });
                continue;
            }
            // Assigned less than half a period ago (its first assignment, just before this
            // tick): the next tick renews it, within its life (1.5 periods < 2 = a TTL);
            // renewing now would charge twice in one period.
            if bucket
                .assigned_at
                .is_some_and(|at| at.elapsed() < half_period)
            {
                continue;
            }
            actions.extend(assign(&self.shared, self.id, bucket).await);
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
        self.out.send(Ok(response)).await.map_err(|_| End::Closed)?;
        metrics::counter!(MESSAGES, "direction" => "sent").increment(1);
        Ok(())
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
        last_report: None,
        last_request: Instant::now(),
        demand_per_second: None,
        generation: 0,
        assigned_at: None,
        ledger: Ledger::default(),
        last_strategy: None,
    }
}

/// A report's requests of the bucket: its demand (requests per second since its last
/// report, averaged with the demand before) and its last activity.
fn note_demand(bucket: &mut Bucket, requests: u64) {
    let now = Instant::now();
    if requests > 0 {
        bucket.last_request = now;
    }
    if let Some(last) = bucket.last_report.replace(now) {
        let elapsed = now.duration_since(last).as_secs_f64().max(0.001);
        #[allow(clippy::cast_precision_loss)]
        let rate = requests as f64 / elapsed;
        bucket.demand_per_second = Some(match bucket.demand_per_second {
            Some(before) => (before + rate) / 2.0,
            None => rate,
        });
    }
}

/// How often a stream's assignments are renewed: every half of their life.
pub fn renewal_period(ttl: Duration) -> Duration {
    ttl.checked_div(2)
        .unwrap_or_default()
        .max(Duration::from_millis(1))
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

/// The bucket's next assignment (its actions, in order): for a leased bucket, tokens
/// charged in Redis first (the live lease, replaced, is settled from later reports);
/// nothing when nothing is sent (an unsupported limit; the store out of reach: the live
/// assignment runs out and Envoy's `expired_assignment_behavior` decides).
async fn assign(shared: &Shared, stream: u64, bucket: &mut Bucket) -> Vec<BucketAction> {
    let ttl = shared.settings.ttl;
    let strategy = match &bucket.target {
        Target::AllowAll => blanket(BlanketRule::AllowAll),
        Target::DenyAll => blanket(BlanketRule::DenyAll),
        Target::Unsupported => return Vec::new(),
        Target::Leased(leased) => {
            let leased = leased.clone();
            let Some(granted) = charge(shared, stream, bucket, &leased).await else {
                return Vec::new();
            };
            let shape = lease::shape(granted, life_seconds(ttl));
            bucket.ledger.leased(granted, shape, Instant::now());
            match shape {
                Some(shape) => token_bucket(shape, bucket.generation),
                None => blanket(BlanketRule::DenyAll),
            }
        }
    };
    bucket.generation = bucket.generation.saturating_add(1);
    bucket.assigned_at = Some(Instant::now());
    bucket.last_strategy = Some(strategy);
    let mut actions = Vec::with_capacity(2);
    if matches!(strategy.strategy, Some(Strategy::TokenBucket(_))) {
        // First `deny_all`, in the same response: Envoy applies a response's actions in
        // order and publishes the result once, so no request sees it, but it drops the live
        // token bucket, and a token bucket assigned with none live starts full
        // (`createTokenBucketFromAction`); replacing a live one would start it with only the
        // fraction the live one still holds (none under load).
        actions.push(assignment(&bucket.id, blanket(BlanketRule::DenyAll), ttl));
    }
    actions.push(assignment(&bucket.id, strategy, ttl));
    actions
}

/// Tokens charged to the limit for one assignment (0: the quota is spent), `None` if the
/// store failed (nothing charged, never sent again).
async fn charge(shared: &Shared, stream: u64, bucket: &Bucket, leased: &Leased) -> Option<u64> {
    let mut others = shared
        .demand
        .note(&leased.key, stream, bucket.demand_per_second);
    others.extend(shared.fleet.others(&leased.key));
    let period = renewal_period(shared.settings.ttl);
    let asked = share::tokens(Sizing {
        rate_per_second: leased.rate_per_second,
        period_seconds: period.as_secs_f64(),
        mine_per_second: bucket.demand_per_second,
        others_per_second: &others,
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
            // In contention: what is left of the limit would not grant this lease again.
            let remaining = grant.views.first().map_or(0, |view| view.remaining);
            if grant.granted < asked || remaining < asked {
                shared.fleet.contended(&leased.key, period);
            }
            // The journal of charges, written before the assignment is sent (the real-Envoy
            // tests rebuild the bound from it, across a killed service).
            tracing::debug!(
                stream,
                key = leased.key,
                tokens = grant.granted,
                "rlqs: charged"
            );
            metrics::counter!(TOKENS, "what" => "charged").increment(grant.granted);
            shared.charged.fetch_add(grant.granted, Ordering::Relaxed);
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

/// The longest an assignment lives in Envoy, in whole seconds: Envoy 1.40 reads only the
/// whole seconds of `assignment_time_to_live`, so at most the TTL rounded up (at least 1).
fn life_seconds(ttl: Duration) -> u64 {
    ttl.as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0))
        .max(1)
}

/// A leased token bucket. The fill interval's nanos alternate (0, 1): Envoy 1.40 deems a
/// token bucket unchanged, and keeps the old, partly spent one, when its `max_tokens`,
/// `tokens_per_fill` and `fill_interval.nanos` are equal; its rate uses the whole seconds
/// only, so the nanos change nothing else.
fn token_bucket(shape: Shape, generation: u64) -> RateLimitStrategy {
    RateLimitStrategy {
        strategy: Some(Strategy::TokenBucket(TokenBucket {
            max_tokens: shape.max_tokens,
            tokens_per_fill: Some(protobuf::UInt32Value {
                value: shape.tokens_per_fill,
            }),
            fill_interval: Some(protobuf::Duration {
                seconds: shape.fill_interval_seconds,
                nanos: i32::from(generation % 2 == 1),
            }),
        })),
    }
}

/// Counts a report's allowed requests and refunds what can no longer be admitted.
async fn settle(shared: &Shared, bucket: &mut Bucket, allowed: u64) {
    let unspent =
        bucket
            .ledger
            .reported(allowed, Instant::now(), life_seconds(shared.settings.ttl));
    let Target::Leased(leased) = &bucket.target else {
        return;
    };
    if unspent == 0 {
        return;
    }
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
        Ok(()) => {
            tracing::debug!(key = leased.key, tokens = unspent, "rlqs: refunded");
            metrics::counter!(TOKENS, "what" => "refunded").increment(unspent);
            shared.refunded.fetch_add(unspent, Ordering::Relaxed);
        }
        Err(error) => {
            tracing::warn!(key = leased.key, "RLQS: a refund was lost: {error}");
        }
    }
}
