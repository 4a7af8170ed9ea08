"""Metrics with the Rust client's names, labels, meanings and bounds (``client/src/metrics.rs``,
``docs/operating.md``), recorded with ``prometheus_client`` when it is installed (the
``[prometheus]`` extra); labels carry the policy, the limit and the class of its keys,
never a key (who is throttled is the fleet's top-keys summary, :mod:`.top`).

| metric | type | labels |
|---|---|---|
| ``ratelimit_decisions_total`` | counter | ``policy``, ``limit``, ``key_class``, ``outcome``, ``source``, ``backend`` |
| ``ratelimit_decision_units_total`` | counter | ``policy``, ``limit``, ``key_class``, ``outcome``, ``source`` |
| ``ratelimit_near_limit_total`` | counter | ``policy``, ``limit``, ``key_class`` |
| ``ratelimit_limit_quota``, ``ratelimit_limit_window_seconds`` | gauges | ``policy``, ``limit``, ``key_class`` |
| ``ratelimit_fallback_mode`` | gauge | ``policy``, ``mode`` |
| ``ratelimit_store_latency_seconds`` | histogram | ``policy``, ``op`` |
| ``ratelimit_store_errors_total`` | counter | ``policy``, ``kind`` |
| ``ratelimit_lease_claims_total``, ``..._units_claimed_total``, ``..._units_refunded_total`` | counters | ``policy`` |
| ``ratelimit_fallback_units_owed_total``, ``ratelimit_fallback_units_settled_total`` | counters | ``policy`` |
| ``ratelimit_group_refunds_total`` | counter | ``policy`` |
| ``ratelimit_store_backend`` | gauge | ``backend`` |
| ``ratelimit_circuit_open`` | gauge | |
| ``ratelimit_circuit_opened_total`` | counter | |
| ``ratelimit_denied_top10_share``, ``ratelimit_denied_window`` | gauges | ``policy``, ``limit`` |
| ``ratelimit_top_reports_total`` | counter | ``result`` |
| ``ratelimit_plans_loaded``, ``ratelimit_plans_version`` | gauges | |
| ``ratelimit_plans_read_errors_total`` | counter | |

The quota gauges are not exported for the class ``override`` (one tenant's quota).
``limit`` is the binding limit (the one that denied, or when admitted the one closest to
running out; ``_none`` when no limit was consulted), at most 256 per policy; ``key_class``
at most 64 per policy; past them ``_other`` (:mod:`.metric_labels`).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from .metric_labels import DEFAULT_NEAR_LIMIT_SHARE, NO_LIMIT, PolicyLabels, near
from .policy import DEFAULT_KEY_CLASS, OVERRIDE_KEY_CLASS, Fallback

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from .decision import Decision
    from .policy import Policy

#: The metrics' names (``prometheus_client`` names a counter without its ``_total``).
DECISIONS = "ratelimit_decisions_total"
DECISION_UNITS = "ratelimit_decision_units_total"
NEAR_LIMIT = "ratelimit_near_limit_total"
LIMIT_QUOTA = "ratelimit_limit_quota"
LIMIT_WINDOW = "ratelimit_limit_window_seconds"
FALLBACK_MODE = "ratelimit_fallback_mode"
STORE_LATENCY = "ratelimit_store_latency_seconds"
DENIED_TOP10_SHARE = "ratelimit_denied_top10_share"
DENIED_WINDOW = "ratelimit_denied_window"
TOP_REPORTS = "ratelimit_top_reports_total"

#: The store latency histogram's buckets, the service's (``docs/operating.md``): the same in
#: every language, so ``histogram_quantile`` aggregates across replicas.
STORE_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class Metrics:
    """Records nothing: the default without ``prometheus_client``."""

    def decision(self, decision: Decision) -> None:
        """A check decided (a subclass's hook: the limiter calls :meth:`record_decision`,
        which calls this unless overridden)."""

    def record_decision(
        self, decision: Decision, cost: int = 1, near_limit_share: float = DEFAULT_NEAR_LIMIT_SHARE
    ) -> None:
        """A check of ``cost`` units decided: counted under its binding limit, and each limit
        an admitted check left under ``near_limit_share`` of its quota."""
        self.decision(decision)

    def configured(self, policy: Policy) -> None:
        """``policy``'s limits' quotas and windows, and its fallback (set when the limiter
        takes the policy up)."""

    def store_latency(self, policy: str, op: str, seconds: float) -> None:
        pass

    def store_error(self, policy: str, kind: str) -> None:
        pass

    def lease_claimed(self, policy: str, units: int) -> None:
        pass

    def lease_refunded(self, policy: str, units: int) -> None:
        pass

    def fallback_settled(self, policy: str, owed: int, settled: int) -> None:
        pass

    def group_refunded(self, policy: str) -> None:
        pass

    def circuit(self, open_: bool) -> None:
        pass

    def circuit_opened(self) -> None:
        pass

    def backend(self, name: str) -> None:
        pass

    def plans(self, loaded: bool, version: int | None = None) -> None:
        pass

    def plans_read_error(self) -> None:
        pass

    def top_reported(self, ok: bool) -> None:
        """The top-keys reporter wrote (``ok``) or failed to."""

    def top_concentration(self, policy: str, limit: str, top10_share: float, denials: int) -> None:
        """The fleet's concentration of ``policy``'s ``limit``'s denials over the top-keys
        window, and their count."""


#: Each live registry's metrics, by the registry itself: an entry goes with its registry (keyed
#: by ``id()``, a registry made after another was collected could take its id, and its
#: metrics would be counted into the collected registry, out of sight).
_REGISTERED: weakref.WeakKeyDictionary[CollectorRegistry, PrometheusMetrics] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
#: Most label sets whose children are kept (past it, looked up at each call).
_MAX_CHILDREN = 65_536


class PrometheusMetrics(Metrics):
    """The metrics in a ``prometheus_client`` registry (the default registry unless given).
    One set per registry: every limiter of the process shares it (and the label bounds)."""

    def __new__(cls, registry: CollectorRegistry | None = None) -> PrometheusMetrics:
        from prometheus_client import REGISTRY

        registry = REGISTRY if registry is None else registry
        with _LOCK:
            existing = _REGISTERED.get(registry)
            if existing is not None:
                return existing
            self = super().__new__(cls)
            self._build(registry)
            _REGISTERED[registry] = self
            return self

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        pass

    def _build(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        # The hot series' children, looked up once (labels() costs a lock and a hash each call).
        self._decision_children: dict[tuple[str, ...], tuple[Counter, Counter]] = {}
        self._near_children: dict[tuple[str, str, str], Counter] = {}
        self._latency_children: dict[tuple[str, str], Histogram] = {}
        self._labels: dict[str, PolicyLabels] = {}
        self._labels_lock = threading.Lock()

        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name.removesuffix("_total"), text, labels, registry=registry)

        def gauge(name: str, text: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, text, labels, registry=registry)

        limit_labels = ("policy", "limit", "key_class")
        self._decisions = counter(
            DECISIONS,
            "Rate-limit decisions by policy, binding limit, key class, outcome, source and backend",
            (*limit_labels, "outcome", "source", "backend"),
        )
        self._units = counter(
            DECISION_UNITS,
            "Units asked of the binding limit by policy, limit, key class, outcome and source",
            (*limit_labels, "outcome", "source"),
        )
        self._near = counter(
            NEAR_LIMIT,
            "Admitted checks that left a limit with less than the near-limit share of its quota",
            limit_labels,
        )
        self._quota = gauge(
            LIMIT_QUOTA,
            "A limit's configured quota (units per window, a bucket's capacity, in-flight slots)",
            limit_labels,
        )
        self._window = gauge(
            LIMIT_WINDOW, "The window a limit's quota applies to (0 for an in-flight limit)", limit_labels
        )
        self._fallback_mode = gauge(
            FALLBACK_MODE,
            "1 for the fallback (open, closed, local) a policy uses when the store is out of reach",
            ("policy", "mode"),
        )
        self._latency = Histogram(
            STORE_LATENCY,
            "Round trip of rate-limit store calls",
            ("policy", "op"),
            buckets=STORE_LATENCY_BUCKETS,
            registry=registry,
        )
        self._errors = counter(
            "ratelimit_store_errors_total", "Rate-limit store calls that failed, by kind", ("policy", "kind")
        )
        self._claims = counter("ratelimit_lease_claims_total", "Store calls claiming lease units", ("policy",))
        self._claimed = counter("ratelimit_lease_units_claimed_total", "Units claimed into leases", ("policy",))
        self._refunded = counter("ratelimit_lease_units_refunded_total", "Unspent lease units refunded", ("policy",))
        self._owed = counter(
            "ratelimit_fallback_units_owed_total",
            "Units the local fallback admitted while the store was out of reach, owed to it",
            ("policy",),
        )
        self._settled = counter(
            "ratelimit_fallback_units_settled_total",
            "Owed fallback units the store took when it answered again",
            ("policy",),
        )
        self._group_refunds = counter(
            "ratelimit_group_refunds_total", "Limit groups refunded because a later group denied", ("policy",)
        )
        self._circuit = gauge("ratelimit_circuit_open", "1 while the circuit breaker holds store calls back")
        self._opened = counter("ratelimit_circuit_opened_total", "Times the circuit breaker opened")
        self._backend = gauge("ratelimit_store_backend", "The store backend in use", ("backend",))
        self._plans_loaded = gauge("ratelimit_plans_loaded", "1 once the policy store has been read")
        self._plans_version = gauge("ratelimit_plans_version", "The policy store version in use")
        self._plans_errors = counter("ratelimit_plans_read_errors_total", "Failed reads of the policy store")
        self._top_share = gauge(
            DENIED_TOP10_SHARE,
            "Fleet-wide share of a limit's denials over the top-keys window taken by its 10 most denied keys "
            "(a lower bound)",
            ("policy", "limit"),
        )
        self._top_denials = gauge(
            DENIED_WINDOW, "Fleet-wide denials of a limit over the top-keys window", ("policy", "limit")
        )
        self._top_reports = counter(
            TOP_REPORTS, "The top-keys reporter's writes to the store, by result (ok, error)", ("result",)
        )

    def _policy_labels(self, policy: str) -> PolicyLabels:
        labels = self._labels.get(policy)
        if labels is None:
            with self._labels_lock:
                labels = self._labels.setdefault(policy, PolicyLabels())
        return labels

    def decision(self, decision: Decision) -> None:
        self.record_decision(decision)

    def record_decision(
        self, decision: Decision, cost: int = 1, near_limit_share: float = DEFAULT_NEAR_LIMIT_SHARE
    ) -> None:
        policy = decision.policy
        definition = decision.definition
        binding = decision.binding_limit
        index = None if binding is None or definition is None else definition.index_of(binding.name)
        if binding is not None and definition is not None and index is not None:
            limit = definition.limits[index]
            name, key_class, units = binding.name, limit.class_label, cost * limit.weight
        else:
            # No limit consulted: the policy's first limit's class.
            first = definition.limits[0] if definition is not None and definition.limits else None
            name, key_class, units = NO_LIMIT, DEFAULT_KEY_CLASS if first is None else first.class_label, cost
        backend = decision.backend or "none"
        key = (policy, name, key_class, decision.outcome, decision.source, backend)
        children = self._decision_children.get(key)
        if children is None:
            limit_label, class_label = self._policy_labels(policy).of(name, key_class)
            children = (
                self._decisions.labels(policy, limit_label, class_label, decision.outcome, decision.source, backend),
                self._units.labels(policy, limit_label, class_label, decision.outcome, decision.source),
            )
            if len(self._decision_children) < _MAX_CHILDREN:
                self._decision_children[key] = children
        children[0].inc()
        children[1].inc(units)
        if decision.allowed and definition is not None:
            for status in decision.limits:
                if near(status.remaining, status.quota, near_limit_share):
                    self._near_limit(policy, definition, status.name)

    def _near_limit(self, policy: str, definition: Policy, limit: str) -> None:
        index = definition.index_of(limit)
        key_class = DEFAULT_KEY_CLASS if index is None else definition.limits[index].class_label
        key = (policy, limit, key_class)
        child = self._near_children.get(key)
        if child is None:
            child = self._near.labels(policy, *self._policy_labels(policy).of(limit, key_class))
            if len(self._near_children) < _MAX_CHILDREN:
                self._near_children[key] = child
        child.inc()

    def configured(self, policy: Policy) -> None:
        labels = self._policy_labels(policy.name)
        for limit in policy.limits:
            if limit.class_label == OVERRIDE_KEY_CLASS:
                continue
            limit_label, class_label = labels.of(limit.name, limit.class_label)
            self._quota.labels(policy.name, limit_label, class_label).set(limit.algorithm.quota)
            self._window.labels(policy.name, limit_label, class_label).set(limit.algorithm.window_ns() / 1e9)
        for mode in Fallback:
            self._fallback_mode.labels(policy.name, mode.value).set(1 if mode == policy.fallback else 0)

    def store_latency(self, policy: str, op: str, seconds: float) -> None:
        child = self._latency_children.get((policy, op))
        if child is None:
            child = self._latency_children[(policy, op)] = self._latency.labels(policy, op)
        child.observe(seconds)

    def store_error(self, policy: str, kind: str) -> None:
        self._errors.labels(policy, kind).inc()

    def lease_claimed(self, policy: str, units: int) -> None:
        self._claims.labels(policy).inc()
        self._claimed.labels(policy).inc(units)

    def lease_refunded(self, policy: str, units: int) -> None:
        self._refunded.labels(policy).inc(units)

    def fallback_settled(self, policy: str, owed: int, settled: int) -> None:
        self._owed.labels(policy).inc(owed)
        self._settled.labels(policy).inc(settled)

    def group_refunded(self, policy: str) -> None:
        self._group_refunds.labels(policy).inc()

    def circuit(self, open_: bool) -> None:
        self._circuit.set(1 if open_ else 0)

    def circuit_opened(self) -> None:
        self._circuit.set(1)
        self._opened.inc()

    def backend(self, name: str) -> None:
        self._backend.labels(name).set(1)

    def plans(self, loaded: bool, version: int | None = None) -> None:
        self._plans_loaded.set(1 if loaded else 0)
        if version is not None:
            self._plans_version.set(version)

    def plans_read_error(self) -> None:
        self._plans_errors.inc()

    def top_reported(self, ok: bool) -> None:
        self._top_reports.labels("ok" if ok else "error").inc()

    def top_concentration(self, policy: str, limit: str, top10_share: float, denials: int) -> None:
        self._top_share.labels(policy, limit).set(top10_share)
        self._top_denials.labels(policy, limit).set(denials)


def default_metrics() -> Metrics:
    """Prometheus metrics in the default registry when ``prometheus_client`` is installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return Metrics()
    return PrometheusMetrics()
