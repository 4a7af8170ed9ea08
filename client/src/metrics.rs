//! The metrics the limiter records, through the `metrics` facade: the application installs
//! whichever exporter it likes (Prometheus, StatsD, OpenTelemetry...).
//!
//! Labels are the policy, the limit and the class of its keys, never the rendered key: one
//! series per tenant would be unbounded (who is throttled is the fleet's top-keys summary,
//! [`top`](crate::top)). A limiter keeps the series it records per call as handles
//! (`Handles`), so a check does not build, hash and look up a label set each time.
//! `docs/operating.md` is the contract every client language keeps: each metric, its labels
//! and the bound on its series.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `ratelimit_decisions_total` | counter | `policy`, `limit` (the binding limit: the one that denied, or when admitted the one closest to running out; `_none` when no limit was consulted), `key_class`, `outcome` (`allowed`, `denied`, `fallback_allowed`, `fallback_denied`, `error`), `source` (`store`, `lease`, `cache`, `fallback`), `backend` (the store backend whose answer decided, the store call's or the one that granted the lease or the cached denial: `module`, `functions`, `scripts`, `memory`; `none` for the fallback) |
//! | `ratelimit_decision_units_total` | counter | `policy`, `limit`, `key_class`, `outcome`, `source` (units asked of the binding limit) |
//! | `ratelimit_near_limit_total` | counter | `policy`, `limit`, `key_class` (an admitted check left the limit under the near-limit share of its quota) |
//! | `ratelimit_limit_quota`, `ratelimit_limit_window_seconds` | gauges | `policy`, `limit`, `key_class` (the configured quota and its window; not for the class `override`) |
//! | `ratelimit_fallback_mode` | gauge | `policy`, `mode` (`open`, `closed`, `local`: 1) |
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
//! | `ratelimit_denied_top10_share`, `ratelimit_denied_window` | gauges | `policy`, `limit` (the fleet's concentration of denials and their count, [`top`](crate::top)) |
//! | `ratelimit_top_reports_total` | counter | `result` (`ok`, `error`: the top-keys reporter's writes) |

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};

use crate::decision::{Decision, Outcome, Source};
use crate::fx_hash::FxBuild;
use crate::limit_set::LimitSet;
use crate::policy::Fallback;

/// Decisions by policy, binding limit, key class, outcome, source and backend.
pub const DECISIONS: &str = "ratelimit_decisions_total";
/// Units asked of the binding limit, by policy, limit, key class, outcome and source.
pub const DECISION_UNITS: &str = "ratelimit_decision_units_total";
/// Admitted checks that left a limit under the near-limit share of its quota.
pub const NEAR_LIMIT: &str = "ratelimit_near_limit_total";
/// A limit's configured quota.
pub const LIMIT_QUOTA: &str = "ratelimit_limit_quota";
/// The window a limit's quota applies to.
pub const LIMIT_WINDOW: &str = "ratelimit_limit_window_seconds";
/// The fallback a policy uses when the store is out of reach (1, by mode).
pub const FALLBACK_MODE: &str = "ratelimit_fallback_mode";
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
/// The fleet's share of a limit's denials taken by its 10 most denied keys.
pub const DENIED_TOP10_SHARE: &str = "ratelimit_denied_top10_share";
/// The fleet's denials of a limit over the top-keys window.
pub const DENIED_WINDOW: &str = "ratelimit_denied_window";
/// The top-keys reporter's writes, by result.
pub const TOP_REPORTS: &str = "ratelimit_top_reports_total";

/// The `limit` label of a decision no limit was consulted for (a blanket fallback).
pub const NO_LIMIT: &str = "_none";
/// The `limit` or `key_class` label of every value past a policy's bound.
pub const OTHER: &str = "_other";
/// Distinct `limit` labels per policy (a job's limit names are its caller's).
pub const MAX_LIMIT_LABELS: usize = 256;
/// Distinct `key_class` labels per policy (plans, and the classes callers name).
pub const MAX_CLASS_LABELS: usize = 64;
/// The key class whose limits' quotas are one tenant's: no quota gauge for it.
pub const OVERRIDE_CLASS: &str = "override";
/// The default near-limit share: a limit left with less than 20 % of its quota.
pub const DEFAULT_NEAR_LIMIT_SHARE: f64 = 0.2;

/// Registers the descriptions with the installed recorder (call after installing it; the
/// limiter builder does).
pub fn describe() {
    metrics::describe_counter!(
        DECISIONS,
        "Rate-limit decisions by policy, binding limit, key class, outcome, source and backend"
    );
    metrics::describe_counter!(
        DECISION_UNITS,
        "Units asked of the binding limit by policy, limit, key class, outcome and source"
    );
    metrics::describe_counter!(
        NEAR_LIMIT,
        "Admitted checks that left a limit with less than the near-limit share of its quota"
    );
    metrics::describe_gauge!(
        LIMIT_QUOTA,
        "A limit's configured quota (units per window, a bucket's capacity, in-flight slots)"
    );
    metrics::describe_gauge!(
        LIMIT_WINDOW,
        metrics::Unit::Seconds,
        "The window a limit's quota applies to (0 for an in-flight limit)"
    );
    metrics::describe_gauge!(
        FALLBACK_MODE,
        "1 for the fallback (open, closed, local) a policy uses when the store is out of reach"
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
    metrics::describe_gauge!(
        DENIED_TOP10_SHARE,
        "Fleet-wide share of a limit's denials over the top-keys window taken by its 10 most denied keys (a lower bound)"
    );
    metrics::describe_gauge!(
        DENIED_WINDOW,
        "Fleet-wide denials of a limit over the top-keys window"
    );
    metrics::describe_counter!(
        TOP_REPORTS,
        "The top-keys reporter's writes to the store, by result (ok, error)"
    );
}

/// The static labels of a series after `policy` (and its limit and class), each a
/// (name, value) pair, unused places `("", "")`.
type Pairs = [(&'static str, &'static str); 3];

/// No label in this place of [`Pairs`].
const NO_LABEL: (&str, &str) = ("", "");

/// One series of a policy: what varies between a policy's series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Series {
    name: &'static str,
    /// The `limit` and `key_class` labels (bounded), for the series that have them.
    limit: Option<(Arc<str>, Arc<str>)>,
    pairs: Pairs,
}

/// Policies whose series are kept as handles (past it, a new policy's are built from its
/// labels at each call, as before): a job's label names its policy, and is the caller's to
/// choose, so this is only a bound.
const MAX_POLICIES: usize = 1_024;

/// The `_other` label, shared.
static OTHER_LABEL: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(OTHER));

/// The `_none` label, shared.
static NO_LIMIT_LABEL: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(NO_LIMIT));

/// A registered series.
#[derive(Clone)]
enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

/// What kind of series to register.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One policy's kept series, and the limit and class labels given out so far.
#[derive(Default)]
struct PolicyKept {
    handles: HashMap<Series, Handle, FxBuild>,
    /// The counters every check increments, by limit, class, outcome and source: looked up
    /// by the labels as they are (no label set built, nothing cloned), only for limits and
    /// classes that are their own labels.
    decisions: HashMap<Arc<str>, HashMap<Arc<str>, ByOutcome, FxBuild>, FxBuild>,
    limits: HashSet<Arc<str>>,
    classes: HashSet<Arc<str>>,
    /// The configured quota and window (ms) each limit's gauges were set to, by limit and
    /// class: a job's limits (new each call) set them again only when they change.
    configured: HashMap<Arc<str>, Configured, FxBuild>,
    /// The fallback its gauge was set to.
    fallback: Option<Fallback>,
}

/// A decision's counters: `ratelimit_decisions_total` and `ratelimit_decision_units_total`.
struct DecisionCounters {
    decisions: Counter,
    units: Counter,
}

/// One limit's configured quota and window (ms) by class.
type Configured = HashMap<Arc<str>, (u64, u64), FxBuild>;

/// One limit and class's decision counters by outcome and source.
type ByOutcome = HashMap<(Outcome, Source), DecisionCounters, FxBuild>;

/// A limit's configured quota and window, in ms.
fn configured_of(limit: &crate::limit_set::CheckedLimit) -> (u64, u64) {
    let window_ms = u64::try_from(limit.algorithm.window().as_millis()).unwrap_or(u64::MAX);
    (limit.algorithm.quota(), window_ms)
}

/// `name` as a label of a set of at most `max` values: itself once given out, `_other` past
/// the bound; `None` when it would be given out now (the caller takes the write lock).
fn known(given: &HashSet<Arc<str>>, name: &Arc<str>, max: usize) -> Option<Arc<str>> {
    if given.contains(&**name) {
        Some(Arc::clone(name))
    } else if given.len() >= max {
        Some(Arc::clone(&OTHER_LABEL))
    } else {
        None
    }
}

/// `name` as a label of a set of at most `max` values, given out now if there is room.
fn give_out(given: &mut HashSet<Arc<str>>, name: &Arc<str>, max: usize) -> Arc<str> {
    known(given, name, max).unwrap_or_else(|| {
        given.insert(Arc::clone(name));
        Arc::clone(name)
    })
}

impl PolicyKept {
    /// The bounded labels of `limit` and `class`, if both were given out or are past their
    /// bound.
    fn known(&self, limit: &Arc<str>, class: &Arc<str>) -> Option<(Arc<str>, Arc<str>)> {
        Some((
            known(&self.limits, limit, MAX_LIMIT_LABELS)?,
            known(&self.classes, class, MAX_CLASS_LABELS)?,
        ))
    }

    /// The bounded labels of `limit` and `class`, given out now if there is room.
    fn give_out(&mut self, limit: &Arc<str>, class: &Arc<str>) -> (Arc<str>, Arc<str>) {
        (
            give_out(&mut self.limits, limit, MAX_LIMIT_LABELS),
            give_out(&mut self.classes, class, MAX_CLASS_LABELS),
        )
    }
}

/// The series kept, and the recorder they were registered with.
#[derive(Default)]
struct Kept {
    /// The address of the recorder the handles belong to (`metrics::with_recorder`'s: a
    /// local recorder of this thread, else the global one, else the facade's no-op one).
    recorder: usize,
    by_policy: HashMap<Arc<str>, PolicyKept, FxBuild>,
}

/// The limiter's per-call metrics, kept as handles by policy and what varies (limit, class,
/// outcome, source, backend, op, kind...) once registered, instead of a label set built,
/// hashed and looked up in the recorder at every call. The handles belong to the recorder
/// in scope when they were registered; when a call finds another one in scope (a recorder
/// installed after the first checks, or a test's local recorder), they are registered again
/// with it, so every call is recorded where it was before. Kept per limiter, so they go with
/// it: a recorder dropped while a limiter lives, and another made at the same address, is
/// the one case that would not be told apart.
pub(crate) struct Handles {
    kept: RwLock<Kept>,
    /// A limit left with less than this share of its quota is near it.
    near_limit_share: f64,
}

impl Default for Handles {
    fn default() -> Self {
        Self::new(DEFAULT_NEAR_LIMIT_SHARE)
    }
}

/// The address of the recorder in scope (see [`Kept::recorder`]).
fn recorder_address() -> usize {
    metrics::with_recorder(|recorder| std::ptr::from_ref(recorder).cast::<()>().addr())
}

/// Whether a limit with `remaining` of `quota` units left is under `share` of it.
#[allow(clippy::cast_precision_loss)]
fn near(remaining: u64, quota: u64, share: f64) -> bool {
    quota > 0 && (remaining as f64) < share * (quota as f64)
}

/// Which limit a series is about: its name and key class.
type LimitLabels<'a> = Option<(&'a Arc<str>, &'a Arc<str>)>;

impl Handles {
    /// Handles counting a limit left with less than `near_limit_share` of its quota (clamped
    /// to 0..=1; not a number: the default) as near it.
    pub(crate) fn new(near_limit_share: f64) -> Self {
        let share = if near_limit_share.is_nan() {
            DEFAULT_NEAR_LIMIT_SHARE
        } else {
            near_limit_share.clamp(0.0, 1.0)
        };
        Self {
            kept: RwLock::default(),
            near_limit_share: share,
        }
    }

    /// Applies `record` to `policy`'s series `name` with `limit` and `pairs`: the kept
    /// handle, or one registered now (of `kind`) and kept.
    fn record(
        &self,
        policy: &Arc<str>,
        name: &'static str,
        limit: LimitLabels<'_>,
        pairs: Pairs,
        kind: Kind,
        record: impl Fn(&Handle),
    ) {
        let recorder = recorder_address();
        {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            let handle = (kept.recorder == recorder)
                .then(|| {
                    let policy_kept = kept.by_policy.get(&**policy)?;
                    let labels = match limit {
                        Some((limit, class)) => Some(policy_kept.known(limit, class)?),
                        None => None,
                    };
                    let series = Series {
                        name,
                        limit: labels,
                        pairs,
                    };
                    policy_kept.handles.get(&series)
                })
                .flatten();
            if let Some(handle) = handle {
                record(handle);
                return;
            }
        }
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        if kept.recorder != recorder {
            kept.by_policy.clear();
            kept.recorder = recorder;
        }
        let room = kept.by_policy.len() < MAX_POLICIES || kept.by_policy.contains_key(&**policy);
        let mut policy_kept = room.then(|| kept.by_policy.entry(Arc::clone(policy)).or_default());
        let labels = limit.map(|(limit, class)| match policy_kept.as_deref_mut() {
            Some(policy_kept) => policy_kept.give_out(limit, class),
            None => (Arc::clone(limit), Arc::clone(class)),
        });
        let series = Series {
            name,
            limit: labels,
            pairs,
        };
        if let Some(handle) = policy_kept
            .as_deref()
            .and_then(|policy_kept| policy_kept.handles.get(&series))
        {
            record(handle);
            return;
        }
        let mut built: Vec<Label> = Vec::with_capacity(6);
        built.push(Label::new("policy", Arc::clone(policy)));
        if let Some((limit, class)) = &series.limit {
            built.push(Label::new("limit", Arc::clone(limit)));
            built.push(Label::new("key_class", Arc::clone(class)));
        }
        built.extend(
            pairs
                .into_iter()
                .filter(|pair| *pair != NO_LABEL)
                .map(|(key, value)| Label::from_static_parts(key, value)),
        );
        let handle = match kind {
            Kind::Counter => Handle::Counter(metrics::counter!(name, built)),
            Kind::Gauge => Handle::Gauge(metrics::gauge!(name, built)),
            Kind::Histogram => Handle::Histogram(metrics::histogram!(name, built)),
        };
        record(&handle);
        if let Some(policy_kept) = policy_kept {
            policy_kept.handles.insert(series, handle);
        }
    }

    /// Adds `value` to a counter of `policy`.
    fn count(
        &self,
        policy: &Arc<str>,
        name: &'static str,
        limit: LimitLabels<'_>,
        pairs: Pairs,
        value: u64,
    ) {
        self.record(policy, name, limit, pairs, Kind::Counter, |handle| {
            if let Handle::Counter(counter) = handle {
                counter.increment(value);
            }
        });
    }

    /// Sets a gauge of `policy`.
    fn set(&self, policy: &Arc<str>, name: &'static str, limit: LimitLabels<'_>, value: f64) {
        self.record(policy, name, limit, [NO_LABEL; 3], Kind::Gauge, |handle| {
            if let Handle::Gauge(gauge) = handle {
                gauge.set(value);
            }
        });
    }

    /// A decision of `policy`'s check of `cost` against `limits` (a policy falling back to
    /// `fallback`): counted under its binding limit, each limit it left near its quota, and
    /// (once per limit set and recorder) the limits' quotas and the fallback.
    pub(crate) fn decision(
        &self,
        decision: &Decision,
        limits: &LimitSet,
        cost: u64,
        fallback: Fallback,
    ) {
        let policy = &decision.policy;
        let default_class;
        let (limit, class, units) = match (decision.binding_limit(), limits.get(decision.binding)) {
            (Some(status), Some(checked)) => {
                let units = if checked.probe {
                    0
                } else {
                    cost.saturating_mul(checked.weight)
                };
                (&status.name, &checked.key_class, units)
            }
            // No limit consulted: the key set's first limit's class.
            _ => {
                let class = match limits.get(0) {
                    Some(first) => &first.key_class,
                    None => {
                        default_class = crate::policy::default_class();
                        &default_class
                    }
                };
                (&*NO_LIMIT_LABEL, class, cost)
            }
        };
        self.count_decision(decision, limit, class, units);
        if let (true, Some(regional)) = (decision.source.is_store(), decision.regional()) {
            let pairs = [("why", regional.why_str()), NO_LABEL, NO_LABEL];
            self.count(policy, REGIONAL_DECISIONS, None, pairs, 1);
        }
        if decision.allowed {
            for (status, checked) in decision.limits.iter().zip(&limits.limits) {
                if !checked.probe && near(status.remaining, status.quota, self.near_limit_share) {
                    let labelled = Some((&status.name, &checked.key_class));
                    self.count(policy, NEAR_LIMIT, labelled, [NO_LABEL; 3], 1);
                }
            }
        }
        let recorder = recorder_address();
        if limits.gauged_for.swap(recorder) != recorder {
            self.configured(policy, limits, fallback);
        }
    }

    /// Counts `decision` under `limit` and `class`, and its `units`: one lookup of the two
    /// counters kept, else registered through [`record`](Self::record) and kept.
    fn count_decision(&self, decision: &Decision, limit: &Arc<str>, class: &Arc<str>, units: u64) {
        let policy = &decision.policy;
        let key = (decision.outcome, decision.source);
        let recorder = recorder_address();
        {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            let counters = (kept.recorder == recorder)
                .then(|| {
                    kept.by_policy
                        .get(&**policy)?
                        .decisions
                        .get(&**limit)?
                        .get(&**class)?
                        .get(&key)
                })
                .flatten();
            if let Some(counters) = counters {
                counters.decisions.increment(1);
                counters.units.increment(units);
                return;
            }
        }
        let labelled = Some((limit, class));
        let outcome = ("outcome", decision.outcome.as_str());
        let source = ("source", decision.source.as_str());
        let backend = ("backend", decision.source.backend_label());
        let decisions = [outcome, source, backend];
        let units_pairs = [outcome, source, NO_LABEL];
        self.count(policy, DECISIONS, labelled, decisions, 1);
        self.count(policy, DECISION_UNITS, labelled, units_pairs, units);
        // Kept by the labels as they are when they are their own labels (within bounds).
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        let Some(policy_kept) = kept.by_policy.get_mut(&**policy) else {
            return;
        };
        if !policy_kept.limits.contains(&**limit) || !policy_kept.classes.contains(&**class) {
            return;
        }
        let series = |name, pairs| Series {
            name,
            limit: Some((Arc::clone(limit), Arc::clone(class))),
            pairs,
        };
        let counter = |series: &Series| match policy_kept.handles.get(series) {
            Some(Handle::Counter(counter)) => Some(counter.clone()),
            _ => None,
        };
        let (Some(decisions), Some(units)) = (
            counter(&series(DECISIONS, decisions)),
            counter(&series(DECISION_UNITS, units_pairs)),
        ) else {
            return;
        };
        policy_kept
            .decisions
            .entry(Arc::clone(limit))
            .or_default()
            .entry(Arc::clone(class))
            .or_default()
            .insert(key, DecisionCounters { decisions, units });
    }

    /// Sets `policy`'s gauges of its limits' configured quotas and windows (but an
    /// override's, which is one tenant's) and of its fallback.
    fn configured(&self, policy: &Arc<str>, limits: &LimitSet, fallback: Fallback) {
        let gauged = |limit: &&crate::limit_set::CheckedLimit| &*limit.key_class != OVERRIDE_CLASS;
        {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            let set_already = kept.recorder == recorder_address()
                && kept.by_policy.get(&**policy).is_some_and(|policy_kept| {
                    policy_kept.fallback == Some(fallback)
                        && limits.limits.iter().filter(gauged).all(|limit| {
                            let set = policy_kept
                                .configured
                                .get(&*limit.name)
                                .and_then(|by_class| by_class.get(&*limit.key_class));
                            set == Some(&configured_of(limit))
                        })
                });
            if set_already {
                return;
            }
        }
        for limit in limits.limits.iter().filter(gauged) {
            let labelled = Some((&limit.name, &limit.key_class));
            #[allow(clippy::cast_precision_loss)]
            let quota = limit.algorithm.quota() as f64;
            self.set(policy, LIMIT_QUOTA, labelled, quota);
            let window = limit.algorithm.window().as_secs_f64();
            self.set(policy, LIMIT_WINDOW, labelled, window);
        }
        for mode in [Fallback::Open, Fallback::Closed, Fallback::Local] {
            let pairs = [("mode", mode.as_str()), NO_LABEL, NO_LABEL];
            let value = if mode == fallback { 1.0 } else { 0.0 };
            self.record(policy, FALLBACK_MODE, None, pairs, Kind::Gauge, |handle| {
                if let Handle::Gauge(gauge) = handle {
                    gauge.set(value);
                }
            });
        }
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(policy_kept) = kept.by_policy.get_mut(&**policy) {
            policy_kept.fallback = Some(fallback);
            for limit in limits.limits.iter().filter(gauged) {
                // Bounded as the labels are: only limits and classes given out.
                if policy_kept.limits.contains(&*limit.name)
                    && policy_kept.classes.contains(&*limit.key_class)
                {
                    policy_kept
                        .configured
                        .entry(Arc::clone(&limit.name))
                        .or_default()
                        .insert(Arc::clone(&limit.key_class), configured_of(limit));
                }
            }
        }
    }

    pub(crate) fn store_latency(&self, policy: &Arc<str>, op: &'static str, elapsed: Duration) {
        let pairs = [("op", op), NO_LABEL, NO_LABEL];
        self.record(
            policy,
            STORE_LATENCY,
            None,
            pairs,
            Kind::Histogram,
            |handle| {
                if let Handle::Histogram(histogram) = handle {
                    histogram.record(elapsed.as_secs_f64());
                }
            },
        );
    }

    pub(crate) fn store_error(&self, policy: &Arc<str>, kind: &'static str) {
        let pairs = [("kind", kind), NO_LABEL, NO_LABEL];
        self.count(policy, STORE_ERRORS, None, pairs, 1);
    }

    pub(crate) fn lease_claimed(&self, policy: &Arc<str>, units: u64) {
        self.count(policy, LEASE_CLAIMS, None, [NO_LABEL; 3], 1);
        self.count(policy, LEASE_UNITS_CLAIMED, None, [NO_LABEL; 3], units);
    }

    pub(crate) fn lease_refunded(&self, policy: &Arc<str>, units: u64) {
        self.count(policy, LEASE_UNITS_REFUNDED, None, [NO_LABEL; 3], units);
    }

    pub(crate) fn fallback_settled(&self, policy: &Arc<str>, owed: u64, settled: u64) {
        self.count(policy, FALLBACK_UNITS_OWED, None, [NO_LABEL; 3], owed);
        self.count(policy, FALLBACK_UNITS_SETTLED, None, [NO_LABEL; 3], settled);
    }

    pub(crate) fn group_refunded(&self, policy: &Arc<str>) {
        self.count(policy, GROUP_REFUNDS, None, [NO_LABEL; 3], 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_near_under_its_share() {
        assert!(near(1, 10, 0.2));
        assert!(!near(2, 10, 0.2));
        assert!(!near(0, 0, 0.2));
        assert!(near(0, 10, 0.01));
        assert!(!near(0, 10, 0.0));
    }

    #[test]
    fn labels_past_their_bound_are_other() {
        let mut given = HashSet::new();
        for index in 0..3 {
            let name: Arc<str> = Arc::from(format!("l{index}"));
            assert_eq!(
                give_out(&mut given, &name, 2).as_ref(),
                if index < 2 { &*name } else { OTHER }
            );
        }
        assert_eq!(given.len(), 2);
        let first: Arc<str> = Arc::from("l0");
        assert_eq!(known(&given, &first, 2).as_deref(), Some("l0"));
    }
}
