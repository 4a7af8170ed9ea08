"""A denial decided from the deny cache names the backend whose denial it remembers, on the
module, the Functions library and scripts alike, sync and asyncio, in the decision and in
the ``backend`` label of ``ratelimit_decisions_total``."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio as aredis
from prometheus_client import CollectorRegistry

from redis_ratelimit_client import Lease, Limit, Policy, PrometheusMetrics, RateLimiter, SyncRateLimiter
from servers import Server

# A long timeout: these tests are about who decides, not latency, on a loaded machine.
POLICIES = [
    Policy("one", [Limit.token_bucket("per-key", 2, refill=60, key="one:{key}")], timeout=5),
    Policy(
        "two",
        [Limit.fixed_window("per-key", 2, 60, key="two:{key}"), Limit.sliding_log("g", 50, 60, key="g:{key}")],
        timeout=5,
    ),
    Policy("leased", [Limit.gcra("per-key", 2, 2, 60, key="gl:{key}")], lease=Lease(1), timeout=5),
]


def cached_labels(registry: CollectorRegistry) -> set[str]:
    return {
        sample.labels["backend"]
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "ratelimit_decisions_total" and sample.labels["source"] == "cache"
    }


def test_a_cached_denial_names_its_backend(backend_server: tuple[str, Server]) -> None:
    backend, server = backend_server

    async def scenario() -> None:
        registry = CollectorRegistry()
        limiter = RateLimiter(aredis.Redis(port=server.port), POLICIES, metrics=PrometheusMetrics(registry))
        for policy in ("one", "two", "leased"):
            decisions = [await limiter.check(policy, key="a") for _ in range(5)]
            cached = [decision for decision in decisions if decision.source == "cache"]
            assert cached, (policy, [(d.source, d.allowed) for d in decisions])
            assert {decision.backend for decision in cached} == {backend}
        assert cached_labels(registry) == {backend}

    asyncio.run(scenario())
    registry = CollectorRegistry()
    limiter = SyncRateLimiter(redis.Redis(port=server.port), POLICIES, metrics=PrometheusMetrics(registry))
    try:
        for policy in ("one", "two", "leased"):
            decisions = [limiter.check(policy, key="s") for _ in range(5)]
            assert {d.backend for d in decisions if d.source == "cache"} == {backend}
        assert cached_labels(registry) == {backend}
    finally:
        limiter.close()
