//! The service's own metrics (the client library records its decisions, store calls, leases
//! and breaker under `ratelimit_*`; the policy label is the domain). Exported in Prometheus
//! text at `GET /metrics`. `docs/operating.md` lists them all, with their bounds.
//!
//! The descriptor counters keep envoyproxy/ratelimit's names (as its Prometheus mapper
//! names them: `ratelimit_service_rate_limit_total_hits`, `_over_limit`, `_near_limit`,
//! `_within_limit`, `_shadow_mode`) and count hits as it does.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, PoisonError, RwLock};

use metrics::{Counter, counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Hits asked of a descriptor's limit (the reference's name).
pub const TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// Hits of descriptors over their limit.
pub const OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// Hits admitted with more than the near-limit ratio of the limit used.
pub const NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// Hits of descriptors within their limit.
pub const WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// Hits a shadow-mode limit would have denied.
pub const SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";

/// The reference's descriptor counters, in [`DomainHandles::hits`]'s order.
const HIT_COUNTERS: [&str; 5] = [
    TOTAL_HITS,
    OVER_LIMIT,
    NEAR_LIMIT,
    WITHIN_LIMIT,
    SHADOW_MODE,
];

/// The store latency histogram's buckets, in seconds: `histogram_quantile` aggregates them
/// across replicas (a summary's quantiles do not).
pub const STORE_LATENCY_BUCKETS: [f64; 11] = [
    0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
];

/// Distinct `rule` label values per domain: a rule with `detailed_metric` names the
/// request's own values, which are the callers' to choose.
pub const DEFAULT_MAX_RULE_LABELS: usize = 1_000;

/// The `rule` label of every value past the bound.
const OTHER_RULES: &str = "_other";

static MAX_RULE_LABELS: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_RULE_LABELS);

/// The `rule` label values given out so far, by domain.
static RULE_LABELS: LazyLock<RwLock<HashMap<String, HashSet<String>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// The label of `rule` in `domain`: itself while the domain has fewer than the bound's
/// distinct values, [`OTHER_RULES`] past it, so a series is never made per request value
/// without end (each costs memory and scrape bytes for the life of the process).
fn rule_label(domain: &str, rule: &str) -> String {
    let known = RULE_LABELS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(domain)
        .is_some_and(|rules| rules.contains(rule));
    if known {
        return rule.to_string();
    }
    let mut labels = RULE_LABELS.write().unwrap_or_else(PoisonError::into_inner);
    let rules = labels.entry(domain.to_string()).or_default();
    if rules.contains(rule) || rules.len() < MAX_RULE_LABELS.load(Ordering::Relaxed) {
        rules.insert(rule.to_string());
        rule.to_string()
    } else {
        OTHER_RULES.to_string()
    }
}

/// The Prometheus recorder could not be installed (another one is, or its setup failed).
#[derive(Debug, thiserror::Error)]
#[error("cannot install the metrics recorder: {0}")]
pub struct InstallError(#[source] metrics_exporter_prometheus::BuildError);

/// Installs the Prometheus recorder (once per process) and describes the metrics; at most
/// `max_rule_labels` distinct `rule` values per domain.
pub fn install(max_rule_labels: usize) -> Result<PrometheusHandle, InstallError> {
    MAX_RULE_LABELS.store(max_rule_labels, Ordering::Relaxed);
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(redis_ratelimit_client::metrics::STORE_LATENCY.to_string()),
            &STORE_LATENCY_BUCKETS,
        )
        .map_err(InstallError)?
        .install_recorder()
        .map_err(InstallError)?;
    describe_counter!(
        TOTAL_HITS,
        "Hits asked of a descriptor's limit, by domain and rule (the reference's name)"
    );
    describe_counter!(
        OVER_LIMIT,
        "Hits of descriptors over their limit, by domain and rule"
    );
    describe_counter!(
        NEAR_LIMIT,
        "Hits admitted with more than --near-limit-ratio of the limit used, by domain and rule"
    );
    describe_counter!(
        WITHIN_LIMIT,
        "Hits of descriptors within their limit, by domain and rule"
    );
    describe_counter!(
        SHADOW_MODE,
        "Hits a shadow-mode limit (or any limit in the global shadow mode) would have denied, by domain and rule"
    );
    describe_counter!(
        "ratelimit_service_requests_total",
        "Checks answered, by transport (grpc, http, json: the reference's /json), domain and code (ok, over_limit, bad_request, error)"
    );
    describe_counter!(
        "ratelimit_service_descriptors_total",
        "Descriptor decisions by domain, rule (its config path, or the request's values with detailed_metric; past --max-metric-rules values a domain, _other) and code"
    );
    describe_counter!(
        "ratelimit_service_shadow_denials_total",
        "Requests a shadow_mode limit (or, in the global shadow mode, any limit) would have denied, by domain and rule"
    );
    describe_counter!(
        "ratelimit_service_global_shadow_total",
        "Requests the global shadow mode admitted although a limit denied them (nothing charged), by domain"
    );
    describe_counter!(
        "ratelimit_config_reloads_total",
        "Config reloads by result (ok, refused)"
    );
    describe_gauge!(
        "ratelimit_config_valid",
        "1 when the config directory as it is now was loaded; 0 while a refused change is pending (the previous config is served)"
    );
    gauge!("ratelimit_config_valid").set(1.0);
    describe_gauge!(
        "ratelimit_service_tls_certificate_not_after_seconds",
        "When the certificate a TLS listener serves expires (Unix seconds), by listener (grpc, http): alert on it minus time()"
    );
    describe_gauge!(
        "ratelimit_service_tls_certificate_not_before_seconds",
        "When the certificate a TLS listener serves becomes valid (Unix seconds), by listener (grpc, http)"
    );
    Ok(handle)
}

/// How often the recorder's histograms are drained when nothing scrapes `/metrics`.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Drains the recorder's histogram samples every [`UPKEEP_EVERY`], for the life of the
/// process: a sample is otherwise kept until a scrape, so a service nobody scrapes grew by
/// some 20 bytes a check without end (1,000,000 checks: +87 MiB, +2 MiB per 100,000 checks
/// past its per-key tables' bound).
pub fn spawn_upkeep(handle: &PrometheusHandle) {
    let handle = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    });
}

/// The validity of the certificate `listener` serves: `notBefore` and `notAfter`, in
/// seconds since the epoch.
pub fn certificate(listener: &'static str, not_before_s: i64, not_after_s: i64) {
    #[allow(clippy::cast_precision_loss)]
    let (not_before, not_after) = (not_before_s as f64, not_after_s as f64);
    gauge!("ratelimit_service_tls_certificate_not_before_seconds", "listener" => listener)
        .set(not_before);
    gauge!("ratelimit_service_tls_certificate_not_after_seconds", "listener" => listener)
        .set(not_after);
}

/// Domains whose counters are kept as handles (past it, a domain's are looked up in the
/// recorder each time, as before): the domains are the config's, so this is only a bound.
const MAX_HANDLE_DOMAINS: usize = 1_024;

/// One domain's per-check counters, kept once registered: a check then increments a handle
/// found by its borrowed domain and rule, instead of building the label set (the domain and
/// rule copied into a new key, which the recorder hashes and looks up) at every check.
#[derive(Default)]
struct DomainHandles {
    /// `ratelimit_service_requests_total` by (transport, code).
    requests: HashMap<(&'static str, &'static str), Counter>,
    /// `ratelimit_service_descriptors_total` by rule, `[over_limit, ok]` (each registered
    /// when first counted, so /metrics shows the series it showed before). Only rules that
    /// are their own label (at most the bound of [`rule_label`] a domain); those past the
    /// bound take the recorder's lookup each time.
    descriptors: HashMap<String, [Option<Counter>; 2]>,
    /// The reference's counters by rule ([`HIT_COUNTERS`]: total, over, near, within,
    /// shadow), all registered at once; only rules that are their own label.
    hits: HashMap<String, [Counter; 5]>,
}

static HANDLES: LazyLock<RwLock<HashMap<String, DomainHandles>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// Keeps a domain's handle, unless [`MAX_HANDLE_DOMAINS`] other domains have theirs.
fn keep(domain: &str, store: impl FnOnce(&mut DomainHandles)) {
    let mut handles = HANDLES.write().unwrap_or_else(PoisonError::into_inner);
    if handles.len() < MAX_HANDLE_DOMAINS || handles.contains_key(domain) {
        store(handles.entry(domain.to_string()).or_default());
    }
}

/// A check answered.
pub fn request(transport: &'static str, domain: &str, code: &'static str) {
    {
        let handles = HANDLES.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(counter) = handles
            .get(domain)
            .and_then(|handles| handles.requests.get(&(transport, code)))
        {
            counter.increment(1);
            return;
        }
    }
    let counter = counter!(
        "ratelimit_service_requests_total",
        "transport" => transport,
        "domain" => domain.to_string(),
        "code" => code
    );
    counter.increment(1);
    keep(domain, |handles| {
        handles.requests.insert((transport, code), counter);
    });
}

/// A descriptor decided.
pub fn descriptor(domain: &str, rule: &str, ok: bool) {
    let slot = usize::from(ok);
    {
        let handles = HANDLES.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(counter) = handles
            .get(domain)
            .and_then(|handles| handles.descriptors.get(rule))
            .and_then(|pair| pair.get(slot))
            .and_then(Option::as_ref)
        {
            counter.increment(1);
            return;
        }
    }
    let label = rule_label(domain, rule);
    let own = label == rule;
    let counter = counter!(
        "ratelimit_service_descriptors_total",
        "domain" => domain.to_string(),
        "rule" => label,
        "code" => if ok { "ok" } else { "over_limit" }
    );
    counter.increment(1);
    // Past the bound the label is `_other`, whose handle is not kept under the rule's name.
    if own {
        keep(domain, |handles| {
            let pair = handles.descriptors.entry(rule.to_string()).or_default();
            if let Some(kept) = pair.get_mut(slot) {
                *kept = Some(counter);
            }
        });
    }
}

/// How one descriptor's hits count in the reference's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hits {
    /// Its hits (`hits_addend`, else the request's, else 1).
    pub hits: u64,
    /// Over its limit (a shadow limit's too).
    pub over: bool,
    /// Admitted with more than the near-limit ratio of the limit used.
    pub near: bool,
    /// Over a limit that only reports (shadow mode).
    pub shadowed: bool,
}

fn count_hits(counters: &[Counter; 5], hits: Hits) {
    let [total, over, near, within, shadow] = counters;
    total.increment(hits.hits);
    if hits.over {
        over.increment(hits.hits);
    } else {
        within.increment(hits.hits);
    }
    if hits.near {
        near.increment(hits.hits);
    }
    if hits.shadowed {
        shadow.increment(hits.hits);
    }
}

/// A descriptor's hits, in the reference's counters.
pub fn hits(domain: &str, rule: &str, hits: Hits) {
    {
        let handles = HANDLES.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(counters) = handles
            .get(domain)
            .and_then(|handles| handles.hits.get(rule))
        {
            count_hits(counters, hits);
            return;
        }
    }
    let label = rule_label(domain, rule);
    let counters = HIT_COUNTERS
        .map(|name| counter!(name, "domain" => domain.to_string(), "rule" => label.clone()));
    count_hits(&counters, hits);
    if label == rule {
        keep(domain, |handles| {
            handles.hits.insert(rule.to_string(), counters);
        });
    }
}

/// A shadow-mode limit would have denied.
pub fn shadow_denied(domain: &str, rule: &str) {
    counter!(
        "ratelimit_service_shadow_denials_total",
        "domain" => domain.to_string(),
        "rule" => rule_label(domain, rule)
    )
    .increment(1);
}

/// The global shadow mode admitted a request some limit denied.
pub fn global_shadow(domain: &str) {
    counter!(
        "ratelimit_service_global_shadow_total",
        "domain" => domain.to_string()
    )
    .increment(1);
}

/// A config reload, applied or refused.
pub fn reload(ok: bool) {
    counter!("ratelimit_config_reloads_total", "result" => if ok { "ok" } else { "refused" })
        .increment(1);
    gauge!("ratelimit_config_valid").set(if ok { 1.0 } else { 0.0 });
}
