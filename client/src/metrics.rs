//! The metrics the limiter records, through the `metrics` facade: the application installs
//! whichever exporter it likes (Prometheus, StatsD, OpenTelemetry...).
//!
//! Labels are the policy name, never the rendered key: one series per tenant would be
//! unbounded. A limiter keeps the series it records per call as handles (`Handles`),
//! so a check does not build, hash and look up a label set each time.
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

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, Label};

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

/// A series of one policy: the metric's name and its labels after `policy`, each a static
/// (name, value) pair, unused places `("", "")`: what varies between a policy's series.
type Series = (&'static str, [(&'static str, &'static str); 3]);

/// No label in this place of a [`Series`].
const NO_LABEL: (&str, &str) = ("", "");

/// Policies whose series are kept as handles (past it, a new policy's are built from its
/// labels at each call, as before): a job's label names its policy, and is the caller's to
/// choose, so this is only a bound.
const MAX_POLICIES: usize = 1_024;

/// A registered series.
#[derive(Clone)]
enum Handle {
    Counter(Counter),
    Histogram(Histogram),
}

/// The series kept, and the recorder they were registered with.
#[derive(Default)]
struct Kept {
    /// The address of the recorder the handles belong to (`metrics::with_recorder`'s: a
    /// local recorder of this thread, else the global one, else the facade's no-op one).
    recorder: usize,
    by_policy: HashMap<Arc<str>, HashMap<Series, Handle>>,
}

/// The limiter's per-call metrics, kept as handles by policy and what varies (outcome,
/// source, backend, op, kind...) once registered, instead of a label set built, hashed and
/// looked up in the recorder at every call. The handles belong to the recorder in scope
/// when they were registered; when a call finds another one in scope (a recorder installed
/// after the first checks, or a test's local recorder), they are registered again with it,
/// so every call is recorded where it was before. Kept per limiter, so they go with it: a
/// recorder dropped while a limiter lives, and another made at the same address, is the
/// one case that would not be told apart.
#[derive(Default)]
pub(crate) struct Handles {
    kept: RwLock<Kept>,
}

/// The address of the recorder in scope (see [`Kept::recorder`]).
fn recorder_address() -> usize {
    metrics::with_recorder(|recorder| std::ptr::from_ref(recorder).cast::<()>().addr())
}

impl Handles {
    /// Applies `record` to `policy`'s `series`: the kept handle, or one registered now (a
    /// counter, or a histogram with `histogram`) and kept.
    fn record(&self, policy: &Arc<str>, series: Series, histogram: bool, record: impl Fn(&Handle)) {
        let recorder = recorder_address();
        {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            let handle = (kept.recorder == recorder)
                .then(|| kept.by_policy.get(&**policy)?.get(&series))
                .flatten();
            if let Some(handle) = handle {
                record(handle);
                return;
            }
        }
        let (name, pairs) = series;
        let labels: Vec<Label> = std::iter::once(Label::new("policy", Arc::clone(policy)))
            .chain(
                pairs
                    .into_iter()
                    .filter(|pair| *pair != NO_LABEL)
                    .map(|(key, value)| Label::from_static_parts(key, value)),
            )
            .collect();
        let handle = if histogram {
            Handle::Histogram(metrics::histogram!(name, labels))
        } else {
            Handle::Counter(metrics::counter!(name, labels))
        };
        record(&handle);
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        if kept.recorder != recorder {
            kept.by_policy.clear();
            kept.recorder = recorder;
        }
        if kept.by_policy.len() < MAX_POLICIES || kept.by_policy.contains_key(&**policy) {
            kept.by_policy
                .entry(Arc::clone(policy))
                .or_default()
                .insert(series, handle);
        }
    }

    /// Adds `value` to a counter of `policy`.
    fn count(&self, policy: &Arc<str>, series: Series, value: u64) {
        self.record(policy, series, false, |handle| {
            if let Handle::Counter(counter) = handle {
                counter.increment(value);
            }
        });
    }

    pub(crate) fn decision(&self, decision: &Decision) {
        let labels = [
            ("outcome", decision.outcome.as_str()),
            ("source", decision.source.as_str()),
            ("backend", decision.source.backend_label()),
        ];
        self.count(&decision.policy, (DECISIONS, labels), 1);
        if let (true, Some(regional)) = (decision.source.is_store(), decision.regional()) {
            let labels = [("why", regional.why_str()), NO_LABEL, NO_LABEL];
            self.count(&decision.policy, (REGIONAL_DECISIONS, labels), 1);
        }
    }

    pub(crate) fn store_latency(&self, policy: &Arc<str>, op: &'static str, elapsed: Duration) {
        let series = (STORE_LATENCY, [("op", op), NO_LABEL, NO_LABEL]);
        self.record(policy, series, true, |handle| {
            if let Handle::Histogram(histogram) = handle {
                histogram.record(elapsed.as_secs_f64());
            }
        });
    }

    pub(crate) fn store_error(&self, policy: &Arc<str>, kind: &'static str) {
        let series = (STORE_ERRORS, [("kind", kind), NO_LABEL, NO_LABEL]);
        self.count(policy, series, 1);
    }

    pub(crate) fn lease_claimed(&self, policy: &Arc<str>, units: u64) {
        self.count(policy, (LEASE_CLAIMS, [NO_LABEL; 3]), 1);
        self.count(policy, (LEASE_UNITS_CLAIMED, [NO_LABEL; 3]), units);
    }

    pub(crate) fn lease_refunded(&self, policy: &Arc<str>, units: u64) {
        self.count(policy, (LEASE_UNITS_REFUNDED, [NO_LABEL; 3]), units);
    }

    pub(crate) fn fallback_settled(&self, policy: &Arc<str>, owed: u64, settled: u64) {
        self.count(policy, (FALLBACK_UNITS_OWED, [NO_LABEL; 3]), owed);
        self.count(policy, (FALLBACK_UNITS_SETTLED, [NO_LABEL; 3]), settled);
    }

    pub(crate) fn group_refunded(&self, policy: &Arc<str>) {
        self.count(policy, (GROUP_REFUNDS, [NO_LABEL; 3]), 1);
    }
}

pub(crate) fn circuit(open: bool) {
    metrics::gauge!(CIRCUIT_OPEN).set(if open { 1.0 } else { 0.0 });
}

/// The breaker opened: the gauge goes to 1 and the count of openings up.
pub(crate) fn circuit_opened() {
    circuit(true);
    metrics::counter!(CIRCUIT_OPENED).increment(1);
}
