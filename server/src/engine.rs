//! A request's decision: each descriptor matched to its rule, the limits decided all or
//! nothing through the client library (one `RL.MULTI` per slot, groups in different slots
//! most specific first with refunds on a later denial), shadow-mode limits decided after
//! and never denying.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis_ratelimit_client::expiring::Expiring;
use redis_ratelimit_client::store::{LimitCall, Refund, StoreBackend};
use redis_ratelimit_client::{Algorithm, Decision, InFlight, Inputs, LimitStatus, RateLimiter};

use crate::config::{Config, Unit};
use crate::limiters::{Limiters, ShapeLimit, input_name, limit_name};
use crate::metrics;
use crate::plans::Plans;
use crate::request::{BadRequest, Bounds, CheckRequest};

/// The limit a status reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedLimit {
    /// The config's `name` (empty when it has none, as in the reference).
    pub name: String,
    /// The name used in header fields and metadata: `name`, or the rule's path.
    pub label: String,
    /// Requests per unit.
    pub requests_per_unit: u64,
    /// The unit.
    pub unit: Unit,
}

/// One descriptor's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Whether this descriptor let the request through (shadow-mode limits always do).
    pub ok: bool,
    /// Its limit; `None` when no rule applies, the rule is unlimited or was replaced.
    pub limit: Option<ReportedLimit>,
    /// Whether the limit was asked (a later group after an earlier denial is not).
    pub consulted: bool,
    /// Shadow mode: reported, never denying.
    pub shadow: bool,
    /// Whether the limit alone would deny (for a shadow limit: would have denied).
    pub over: bool,
    /// Units left.
    pub remaining: u64,
    /// The limit's quota as enforced (a replica's share during a local fallback).
    pub quota: u64,
    /// The limit's window (a bucket's time to refill completely).
    pub window: Duration,
    /// When the limit is back to unused.
    pub reset_after: Duration,
    /// When more than `remaining` is available.
    pub more_in: Duration,
}

impl Status {
    fn open(limit: Option<ReportedLimit>) -> Self {
        Self {
            ok: true,
            limit,
            consulted: false,
            shadow: false,
            over: false,
            remaining: 0,
            quota: 0,
            window: Duration::ZERO,
            reset_after: Duration::ZERO,
            more_in: Duration::ZERO,
        }
    }
}

/// Who decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decider {
    /// The store (or leased units, or the deny cache), and the backend whose answer decided
    /// (`None` for a limit of 0, which denies without asking the store).
    Store(Option<StoreBackend>),
    /// The failure mode, the store being out of reach.
    Fallback,
    /// No limit applied.
    Nothing,
}

impl Decider {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store(_) => "store",
            Self::Fallback => "fallback",
            Self::Nothing => "none",
        }
    }

    /// The store backend that decided (`module`, `functions`, `scripts`), if one did.
    pub fn backend(self) -> Option<&'static str> {
        match self {
            Self::Store(backend) => backend.map(StoreBackend::as_str),
            Self::Fallback | Self::Nothing => None,
        }
    }
}

/// A request's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed (and was charged).
    pub allowed: bool,
    /// Who decided.
    pub decider: Decider,
    /// Denied without any limit being consulted: the store was out of reach and the
    /// failure mode denies.
    pub unavailable: bool,
    /// One status per descriptor, in request order.
    pub statuses: Vec<Status>,
    /// Denied: when the same request would pass (`None`: never, a cost above a limit).
    pub retry_after: Option<Duration>,
    /// An admitted request holding in-flight slots: the id to release them with.
    pub in_flight: Option<String>,
}

impl Verdict {
    /// The labels of the limits that denied.
    pub fn denied_by(&self) -> Vec<&str> {
        self.labels(|status| !status.shadow && status.over)
    }

    /// The labels of shadow-mode limits that would have denied.
    pub fn shadow_denied_by(&self) -> Vec<&str> {
        self.labels(|status| status.shadow && status.over)
    }

    fn labels(&self, filter: impl Fn(&Status) -> bool) -> Vec<&str> {
        self.statuses
            .iter()
            .filter(|status| filter(status))
            .filter_map(|status| status.limit.as_ref().map(|limit| limit.label.as_str()))
            .collect()
    }
}

/// Why a check failed (not a decision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckFailure {
    /// The request is malformed or over a bound: nothing was charged.
    BadRequest(BadRequest),
    /// A bug or an impossible limit: nothing was charged.
    Internal(String),
}

/// One limited descriptor of a request.
struct Item {
    index: usize,
    reported: ReportedLimit,
    /// `None`: 0 requests per unit, every request denied and nothing charged.
    algorithm: Option<Algorithm>,
    /// The limit's unit (how long an unreleased in-flight slot is held).
    ttl: Duration,
    key: String,
    hits: u64,
    depth: usize,
    shadow: bool,
    rule: String,
}

struct Held {
    limiter: RateLimiter,
    in_flight: InFlight,
}

/// The service's decisions.
pub struct Engine {
    config: RwLock<Arc<Config>>,
    limiters: Limiters,
    bounds: Bounds,
    key_prefix: String,
    held: Mutex<Expiring<Held>>,
    plans: Plans,
}

impl Engine {
    /// An engine over `config`; `plans` serves the limits that name a `tenant_key`.
    pub fn new(
        config: Config,
        limiters: Limiters,
        bounds: Bounds,
        key_prefix: String,
        plans: Plans,
    ) -> Self {
        Self {
            config: RwLock::new(Arc::new(config)),
            limiters,
            bounds,
            key_prefix,
            held: Mutex::new(Expiring::new()),
            plans,
        }
    }

    /// The policy store, followed once some limit uses plans.
    pub fn plans(&self) -> &Plans {
        &self.plans
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Swaps a new config in: requests already running finish on the old one.
    pub fn swap(&self, config: Config) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
    }

    /// The limiters (for shutdown and readiness).
    pub fn limiters(&self) -> &Limiters {
        &self.limiters
    }

    /// Decides a request.
    pub async fn check(&self, request: &CheckRequest) -> Result<Verdict, CheckFailure> {
        self.bounds
            .check(request)
            .map_err(CheckFailure::BadRequest)?;
        let config = self.config();
        let domain = config.domain(&request.domain).ok_or_else(|| {
            CheckFailure::BadRequest(BadRequest(format!("unknown domain '{}'", request.domain)))
        })?;
        let mut statuses: Vec<Status> = Vec::with_capacity(request.descriptors.len());
        let mut items: Vec<Item> = Vec::new();
        let mut replaced: HashSet<&str> = HashSet::new();
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let (spec, name, path, shadow, detailed, tenant_key) =
                if let Some(spec) = descriptor.override_spec() {
                    (
                        Some(spec),
                        None,
                        "limit_override".to_string(),
                        false,
                        false,
                        None,
                    )
                } else if let Some(found) = domain.find(&descriptor.entries) {
                    replaced.extend(found.limit.replaces.iter().map(String::as_str));
                    (
                        found.limit.spec.clone(),
                        found.limit.name.clone(),
                        found.rule.path.clone(),
                        found.rule.shadow_mode,
                        found.rule.detailed_metric,
                        found.limit.tenant_key.as_deref(),
                    )
                } else {
                    statuses.push(Status::open(None));
                    continue;
                };
            let Some(spec) = spec else {
                // Unlimited.
                statuses.push(Status::open(None));
                continue;
            };
            let internal = |error: String| CheckFailure::Internal(error);
            let tenant = tenant_key.and_then(|tenant_key| {
                descriptor
                    .entries
                    .iter()
                    .find(|(key, _)| key == tenant_key)
                    .map(|(_, value)| value.as_str())
            });
            let (algorithm, requests_per_unit, unit, key_suffix) = match (tenant, name.as_deref()) {
                (Some(tenant), Some(limit_name)) => {
                    let limit = self
                        .plans
                        .limit(tenant, limit_name, &spec)
                        .map_err(internal)?;
                    (
                        limit.algorithm,
                        limit.requests_per_unit,
                        limit.unit,
                        limit.key_suffix,
                    )
                }
                _ => (
                    spec.algorithm()
                        .map_err(|error| internal(error.to_string()))?,
                    spec.requests_per_unit,
                    spec.unit,
                    spec.key_suffix(),
                ),
            };
            let reported = ReportedLimit {
                label: name.clone().unwrap_or_else(|| path.clone()),
                name: name.unwrap_or_default(),
                requests_per_unit,
                unit,
            };
            let rule = if detailed {
                descriptor
                    .entries
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect::<Vec<_>>()
                    .join(".")
            } else {
                path
            };
            statuses.push(Status::open(Some(reported.clone())));
            items.push(Item {
                index,
                key: self.key(&request.domain, &descriptor.entries, &key_suffix),
                reported,
                algorithm,
                ttl: Duration::from_secs(spec.unit.seconds()),
                hits: request.hits(descriptor),
                depth: descriptor.entries.len(),
                shadow,
                rule,
            });
        }
        // A limit replaced by another that applies to the request is not applied.
        items.retain(|item| {
            let gone =
                !item.reported.name.is_empty() && replaced.contains(item.reported.name.as_str());
            if let Some(status) = statuses.get_mut(item.index).filter(|_| gone) {
                status.limit = None;
            }
            !gone
        });
        let (shadow, enforced): (Vec<Item>, Vec<Item>) =
            items.into_iter().partition(|item| item.shadow);
        let mut verdict = Verdict {
            allowed: true,
            decider: Decider::Nothing,
            unavailable: false,
            statuses,
            retry_after: None,
            in_flight: None,
        };
        if !enforced.is_empty() {
            self.decide(&request.domain, &enforced, &mut verdict)
                .await?;
        }
        if verdict.allowed && !shadow.is_empty() {
            let mut shadow_verdict = verdict.clone();
            self.decide(&request.domain, &shadow, &mut shadow_verdict)
                .await?;
            for item in &shadow {
                if let (Some(status), Some(decided)) = (
                    verdict.statuses.get_mut(item.index),
                    shadow_verdict.statuses.get(item.index),
                ) {
                    *status = decided.clone();
                    status.ok = true;
                    status.shadow = true;
                    if status.over {
                        metrics::shadow_denied(&request.domain, &item.rule);
                    }
                }
            }
            if verdict.decider == Decider::Nothing {
                verdict.decider = shadow_verdict.decider;
            }
        }
        for item in enforced.iter().chain(&shadow) {
            if let Some(status) = verdict.statuses.get(item.index) {
                metrics::descriptor(&request.domain, &item.rule, status.ok);
            }
        }
        Ok(verdict)
    }

    /// Decides a set of limits all or nothing, writing their statuses.
    async fn decide(
        &self,
        domain: &str,
        items: &[Item],
        verdict: &mut Verdict,
    ) -> Result<(), CheckFailure> {
        // A limit of 0 requests per unit denies every request, and nothing is charged.
        let blocked: Vec<&Item> = items
            .iter()
            .filter(|item| item.algorithm.is_none())
            .collect();
        if !blocked.is_empty() {
            for item in blocked {
                if let Some(status) = verdict.statuses.get_mut(item.index) {
                    status.ok = false;
                    status.over = true;
                    status.consulted = true;
                }
            }
            verdict.allowed = false;
            verdict.decider = Decider::Store(None);
            verdict.retry_after = None;
            return Ok(());
        }
        // Most specific first (the library calls groups in declaration order among keys of
        // equal specificity): a hot shared key is rarely charged and then refunded.
        let mut order: Vec<&Item> = items.iter().collect();
        order.sort_by_key(|item| std::cmp::Reverse(item.depth));
        let uniform = order
            .first()
            .map(|first| first.hits)
            .filter(|hits| *hits > 0 && order.iter().all(|item| item.hits == *hits));
        let (cost, probes) = match uniform {
            Some(hits) => (hits, false),
            None => (1, order.iter().any(|item| item.hits == 0)),
        };
        let mut shape = Vec::with_capacity(order.len());
        for item in &order {
            let algorithm = item.algorithm.clone().ok_or_else(|| {
                CheckFailure::Internal("a blocked limit reached the store".into())
            })?;
            let weight = if uniform.is_some() {
                1
            } else {
                item.hits.max(1)
            };
            shape.push(ShapeLimit { algorithm, weight });
        }
        let policy = policy_name(domain);
        let limiter = self
            .limiters
            .get(&policy, &shape, !probes)
            .map_err(CheckFailure::Internal)?;
        let mut inputs = Inputs::new();
        for (position, item) in order.iter().enumerate() {
            inputs = inputs.with(input_name(position), item.key.as_str());
        }
        let decision = limiter
            .check_cost(&policy, &inputs, cost)
            .await
            .map_err(|error| CheckFailure::Internal(error.to_string()))?;
        let refunded = decision.allowed && probes && decision.source.is_store();
        if refunded {
            self.refund_probes(&order, &shape).await;
        }
        self.record(&order, &decision, verdict);
        if refunded {
            // Show the probed limits as they are: their unit was given back.
            for item in order.iter().filter(|item| item.hits == 0) {
                if let Some(status) = verdict.statuses.get_mut(item.index) {
                    status.remaining = status.remaining.saturating_add(1).min(status.quota);
                }
            }
        }
        if let Some(in_flight) = decision.in_flight.clone() {
            let ttl = order
                .iter()
                .map(|item| item.ttl)
                .max()
                .unwrap_or(Duration::from_secs(1));
            let id = in_flight.holder().to_string();
            let now = Instant::now();
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            // Slots never released (a gRPC caller cannot) free themselves in Redis after the
            // limit's unit; their entries are dropped here as they expire, oldest first.
            held.expire(now);
            let expires = now.checked_add(ttl).unwrap_or(now);
            held.insert(&id, Held { limiter, in_flight }, expires);
            verdict.in_flight = Some(id);
        }
        Ok(())
    }

    /// Gives back the unit each limit checked with hits 0 was charged to be asked.
    async fn refund_probes(&self, order: &[&Item], shape: &[ShapeLimit]) {
        let limits: Vec<LimitCall<'_>> = order
            .iter()
            .zip(shape)
            .filter(|(item, _)| item.hits == 0)
            .map(|(item, limit)| LimitCall {
                key: &item.key,
                algorithm: &limit.algorithm,
                weight: 1,
                max_wait: None,
            })
            .collect();
        let refund = Refund {
            limits,
            units: 1,
            holder: None,
        };
        // A lost refund under-admits by one unit until the limit refills; never over.
        let _ = self.limiters.store().refund(&refund).await;
    }

    /// Writes a decision into the verdict's statuses.
    fn record(&self, order: &[&Item], decision: &Decision, verdict: &mut Verdict) {
        verdict.allowed = verdict.allowed && decision.allowed;
        verdict.decider = match decision.source.backend() {
            None => Decider::Fallback,
            backend => Decider::Store(backend),
        };
        if !decision.allowed {
            verdict.retry_after = decision.retry_after;
        }
        let by_name: HashMap<&str, &LimitStatus> = decision
            .limits
            .iter()
            .map(|status| (&*status.name, status))
            .collect();
        let blanket = decision.limits.is_empty();
        if blanket && !decision.allowed {
            verdict.unavailable = true;
        }
        for (position, item) in order.iter().enumerate() {
            let Some(status) = verdict.statuses.get_mut(item.index) else {
                continue;
            };
            match by_name.get(limit_name(position).as_str()) {
                Some(limit) => {
                    status.consulted = true;
                    status.over = !limit.allowed;
                    status.ok = decision.allowed || limit.allowed;
                    status.remaining = limit.remaining;
                    status.quota = limit.quota;
                    status.window = limit.window;
                    status.reset_after = limit.reset_after;
                    status.more_in = limit.more_in;
                }
                None if blanket => {
                    // The failure mode decided for every limit.
                    status.ok = decision.allowed;
                    status.over = !decision.allowed;
                }
                None => {}
            }
        }
    }

    /// Gives back the in-flight slots held under `id`; false if none are held.
    pub async fn release(&self, id: &str) -> bool {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        match held {
            Some(held) => {
                held.limiter.release(&held.in_flight).await;
                true
            }
            None => false,
        }
    }

    /// The Redis key of a descriptor under a limit: prefix, domain, the entries, and the
    /// limit's algorithm and unit (`suffix`). Each part is escaped so that two descriptors never share
    /// a key, and a value cannot carry a Cluster hash tag (`{`, `}`).
    fn key(&self, domain: &str, entries: &[(String, String)], suffix: &str) -> String {
        let mut key = String::with_capacity(64);
        key.push_str(&self.key_prefix);
        escape_into(&mut key, domain);
        for (name, value) in entries {
            key.push(':');
            escape_into(&mut key, name);
            key.push('=');
            escape_into(&mut key, value);
        }
        key.push('|');
        key.push_str(suffix);
        key
    }
}

/// The library policy name of a domain: its letters, digits, `_`, `-` and `.`, the rest `_`.
fn policy_name(domain: &str) -> String {
    domain
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' | ':' | '=' | '|' | '{' | '}' => out.push_str(&format!("%{:02X}", u32::from(c))),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_collide_or_carry_hash_tags() {
        let mut a = String::new();
        escape_into(&mut a, "b:c=d");
        assert_eq!(a, "b%3Ac%3Dd");
        let mut b = String::new();
        escape_into(&mut b, "{tag}%");
        assert_eq!(b, "%7Btag%7D%25");
        assert_eq!(policy_name("api v1/x"), "api_v1_x");
    }
}
