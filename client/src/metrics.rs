//! The metrics the limiter records, through the `metrics` facade: the application installs
//! whichever exporter it likes (Prometheus, StatsD, OpenTelemetry...).
//!
//! Labels are the policy name, never the rendered key: one series per tenant would be
//! unbounded.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `ratelimit_decisions_total` | counter | `policy`, `outcome` (`allowed`, `denied`, `fallback_allowed`, `fallback_denied`, `error`), `source` (`store`, `lease`, `cache`, `fallback`), `backend` (the store backend whose answer decided, the store call's or the one that granted the lease or the cached denial: `module`, `functions`, `scripts`, `memory`; `none` for the fallback) |
//! | `ratelimit_regional_decisions_total` | counter | `policy`, `why` (`floor`, `lease`, `lease_exhausted`, `home_unreachable`: a regional limit's store decision, see [`Limit::regional`](crate::Limit::regional)) |
//! | `ratelimit_store_latency_seconds` | histogram | `policy`, `op` (`acquire`, `claim`, `refund`) |
//! | `ratelimit_store_errors_total` | counter | `policy`, `kind` (`timeout`, `unavailable`, `server`, `config`; `lease_wait`: a request waited for a lease claim that found the store out of reach, and went to the fallback) |
//! | `ratelimit_lease_claims_total` | counter | `policy` |
//! | `ratelimit_lease_units_claimed_total` | counter | `policy` |
//! | `ratelimit_lease_units_refunded_total` | counter | `policy` |
//! | `ratelimit_fallback_units_owed_total`, `ratelimit_fallback_units_settled_total` | counters | `policy` (units the local fallback admitted, counted when charged to the store as it answers again; settled: what the store could take) |
//! | `ratelimit_group_refunds_total` | counter | `policy` (an earlier group refunded because a later one denied) |
//! | `ratelimit_store_backend` | gauge | `backend` (`module`, `functions`, `scripts`: 1 for the one a [`RedisStore`](crate::store::RedisStore) resolved) |
//! | `ratelimit_circuit_open` | gauge | none (1 while the breaker holds store calls back) |
//! | `ratelimit_circuit_opened_total` | counter | none (times the breaker opened: a gauge scraped every 15 s misses a 0.5 s opening) |

use std::sync::Arc;
use std::time::Duration;

use crate::decision::Decision;

/// Decisions by policy, outcome, source and backend.
pub const DECISIONS: &str = "ratelimit_decisions_total";
/// Regional limits' store decisions by why.
pub const REGIONAL_DECISIONS: &str = "ratelimit_regional_decisions_total";
/// Store call latency.
pub const STORE_LATENCY: &str = "ratelimit_store_latency_seconds";
/// Store call failures by kind.
pub const STORE_ERRORS: &str = "ratelimit_store_errors_total";
/// Lease claims (store calls).
pub const LEASE_CLAIMS: &str = "ratelimit_lease_claims_total";
/// Units claimed into leases.
pub const LEASE_UNITS_CLAIMED: &str = "ratelimit_lease_units_claimed_total";
/// Unspent lease units given back.
pub const LEASE_UNITS_REFUNDED: &str = "ratelimit_lease_units_refunded_total";
/// Units the local fallback admitted, owed to the store.
pub const FALLBACK_UNITS_OWED: &str = "ratelimit_fallback_units_owed_total";
/// Owed units the store took when it answered again.
pub const FALLBACK_UNITS_SETTLED: &str = "ratelimit_fallback_units_settled_total";
/// Groups refunded because a later group denied.
pub const GROUP_REFUNDS: &str = "ratelimit_group_refunds_total";
/// Whether the circuit breaker is open.
pub const CIRCUIT_OPEN: &str = "ratelimit_circuit_open";
/// Times the circuit breaker opened.
pub const CIRCUIT_OPENED: &str = "ratelimit_circuit_opened_total";

/// Registers the descriptions with the installed recorder (call after installing it; the
/// limiter builder does).
pub fn describe() {
    metrics::describe_counter!(
        DECISIONS,
        "Rate-limit decisions by policy, outcome, source and backend"
    );
    metrics::describe_counter!(
        REGIONAL_DECISIONS,
        "Regional limits' decisions by policy and why (floor, lease, lease_exhausted, home_unreachable)"
    );
    metrics::describe_histogram!(
        STORE_LATENCY,
        metrics::Unit::Seconds,
        "Round trip of rate-limit store calls"
    );
    metrics::describe_counter!(STORE_ERRORS, "Rate-limit store calls that failed, by kind");
    metrics::describe_counter!(LEASE_CLAIMS, "Store calls claiming lease units");
    metrics::describe_counter!(LEASE_UNITS_CLAIMED, "Units claimed into leases");
    metrics::describe_counter!(LEASE_UNITS_REFUNDED, "Unspent lease units refunded");
    metrics::describe_counter!(
        FALLBACK_UNITS_OWED,
        "Units the local fallback admitted while the store was out of reach, owed to it"
    );
    metrics::describe_counter!(
        FALLBACK_UNITS_SETTLED,
        "Owed fallback units the store took when it answered again"
    );
    metrics::describe_counter!(
        GROUP_REFUNDS,
        "Limit groups refunded because a later group denied"
    );
    metrics::describe_gauge!(
        CIRCUIT_OPEN,
        "1 while the circuit breaker holds store calls back"
    );
    metrics::describe_counter!(CIRCUIT_OPENED, "Times the circuit breaker opened");
}

pub(crate) fn decision(decision: &Decision) {
    metrics::counter!(
        DECISIONS,
        "policy" => Arc::clone(&decision.policy),
        "outcome" => decision.outcome.as_str(),
        "source" => decision.source.as_str(),
        "backend" => decision.source.backend_label(),
    )
    .increment(1);
    if let (true, Some(regional)) = (decision.source.is_store(), decision.regional()) {
        metrics::counter!(
            REGIONAL_DECISIONS,
            "policy" => Arc::clone(&decision.policy),
            "why" => regional.why_str(),
        )
        .increment(1);
    }
}

pub(crate) fn store_latency(policy: &Arc<str>, op: &'static str, elapsed: Duration) {
    metrics::histogram!(STORE_LATENCY, "policy" => Arc::clone(policy), "op" => op)
        .record(elapsed.as_secs_f64());
}

pub(crate) fn store_error(policy: &Arc<str>, kind: &'static str) {
    metrics::counter!(STORE_ERRORS, "policy" => Arc::clone(policy), "kind" => kind).increment(1);
}

pub(crate) fn lease_claimed(policy: &Arc<str>, units: u64) {
    metrics::counter!(LEASE_CLAIMS, "policy" => Arc::clone(policy)).increment(1);
    metrics::counter!(LEASE_UNITS_CLAIMED, "policy" => Arc::clone(policy)).increment(units);
}

pub(crate) fn lease_refunded(policy: &Arc<str>, units: u64) {
    metrics::counter!(LEASE_UNITS_REFUNDED, "policy" => Arc::clone(policy)).increment(units);
}

pub(crate) fn fallback_settled(policy: &Arc<str>, owed: u64, settled: u64) {
    metrics::counter!(FALLBACK_UNITS_OWED, "policy" => Arc::clone(policy)).increment(owed);
    metrics::counter!(FALLBACK_UNITS_SETTLED, "policy" => Arc::clone(policy)).increment(settled);
}

pub(crate) fn group_refunded(policy: &Arc<str>) {
    metrics::counter!(GROUP_REFUNDS, "policy" => Arc::clone(policy)).increment(1);
}

pub(crate) fn circuit(open: bool) {
    metrics::gauge!(CIRCUIT_OPEN).set(if open { 1.0 } else { 0.0 });
}

/// The breaker opened: the gauge goes to 1 and the count of openings up.
pub(crate) fn circuit_opened() {
    circuit(true);
    metrics::counter!(CIRCUIT_OPENED).increment(1);
}
