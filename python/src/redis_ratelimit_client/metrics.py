"""Metrics with the Rust client's names and labels (``client/src/metrics.rs``), recorded with
``prometheus_client`` when it is installed (the ``[prometheus]`` extra); labels carry the
policy name, never a key.

| metric | type | labels |
|---|---|---|
| ``ratelimit_decisions_total`` | counter | ``policy``, ``outcome``, ``source``, ``backend`` |
| ``ratelimit_store_latency_seconds`` | histogram | ``policy``, ``op`` |
| ``ratelimit_store_errors_total`` | counter | ``policy``, ``kind`` |
| ``ratelimit_lease_claims_total``, ``..._units_claimed_total``, ``..._units_refunded_total`` | counters | ``policy`` |
| ``ratelimit_fallback_units_owed_total``, ``ratelimit_fallback_units_settled_total`` | counters | ``policy`` |
| ``ratelimit_group_refunds_total`` | counter | ``policy`` |
| ``ratelimit_store_backend`` | gauge | ``backend`` |
| ``ratelimit_circuit_open`` | gauge | |
| ``ratelimit_circuit_opened_total`` | counter | |
| ``ratelimit_plans_loaded``, ``ratelimit_plans_version`` | gauges | |
| ``ratelimit_plans_read_errors_total`` | counter | |
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from .decision import Decision


class Metrics:
    """Records nothing: the default without ``prometheus_client``."""

    def decision(self, decision: Decision) -> None:
        pass

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


_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_REGISTERED: dict[int, PrometheusMetrics] = {}
_LOCK = threading.Lock()


class PrometheusMetrics(Metrics):
    """The metrics in a ``prometheus_client`` registry (the default registry unless given).
    One set per registry: every limiter of the process shares it."""

    def __new__(cls, registry: CollectorRegistry | None = None) -> PrometheusMetrics:
        from prometheus_client import REGISTRY

        registry = REGISTRY if registry is None else registry
        with _LOCK:
            existing = _REGISTERED.get(id(registry))
            if existing is not None:
                return existing
            self = super().__new__(cls)
            self._build(registry)
            _REGISTERED[id(registry)] = self
            return self

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        pass

    def _build(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        # The hot series' children, looked up once (labels() costs a lock and a hash each call).
        self._children: dict[tuple[str, ...], Counter] = {}
        self._latency_children: dict[tuple[str, str], Histogram] = {}

        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, text, labels, registry=registry)

        self._decisions = counter(
            "ratelimit_decisions",
            "Rate-limit decisions by policy, outcome, source and backend",
            ("policy", "outcome", "source", "backend"),
        )
        self._latency = Histogram(
            "ratelimit_store_latency_seconds",
            "Round trip of rate-limit store calls",
            ("policy", "op"),
            buckets=_BUCKETS,
            registry=registry,
        )
        self._errors = counter(
            "ratelimit_store_errors", "Rate-limit store calls that failed, by kind", ("policy", "kind")
        )
        self._claims = counter("ratelimit_lease_claims", "Store calls claiming lease units", ("policy",))
        self._claimed = counter("ratelimit_lease_units_claimed", "Units claimed into leases", ("policy",))
        self._refunded = counter("ratelimit_lease_units_refunded", "Unspent lease units refunded", ("policy",))
        self._owed = counter(
            "ratelimit_fallback_units_owed",
            "Units the local fallback admitted while the store was out of reach, owed to it",
            ("policy",),
        )
        self._settled = counter(
            "ratelimit_fallback_units_settled",
            "Owed fallback units the store took when it answered again",
            ("policy",),
        )
        self._group_refunds = counter(
            "ratelimit_group_refunds", "Limit groups refunded because a later group denied", ("policy",)
        )
        self._circuit = Gauge(
            "ratelimit_circuit_open", "1 while the circuit breaker holds store calls back", registry=registry
        )
        self._opened = counter("ratelimit_circuit_opened", "Times the circuit breaker opened")
        self._backend = Gauge("ratelimit_store_backend", "The store backend in use", ("backend",), registry=registry)
        self._plans_loaded = Gauge("ratelimit_plans_loaded", "1 once the policy store has been read", registry=registry)
        self._plans_version = Gauge("ratelimit_plans_version", "The policy store version in use", registry=registry)
        self._plans_errors = counter("ratelimit_plans_read_errors", "Failed reads of the policy store")

    def decision(self, decision: Decision) -> None:
        labels = (decision.policy, decision.outcome, decision.source, decision.backend or "none")
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = self._decisions.labels(*labels)
        child.inc()

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


def default_metrics() -> Metrics:
    """Prometheus metrics in the default registry when ``prometheus_client`` is installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return Metrics()
    return PrometheusMetrics()
