"""The package as installed: the Functions library it ships is the repository's
``functions/ratelimit.lua`` byte for byte (one source, copied when the package is built),
the script form is the file minus its first line, and the metrics carry the Rust client's
names and labels."""

from __future__ import annotations

import asyncio
from importlib.metadata import distribution

from prometheus_client import CollectorRegistry, generate_latest

from redis_ratelimit_client import Lease, Limit, MemoryStore, Policy, PrometheusMetrics, RateLimiter
from redis_ratelimit_client.protocol import library_source, script_source
from servers import REPOSITORY


def test_the_shipped_library_is_the_repositorys_file() -> None:
    repository = (REPOSITORY / "functions" / "ratelimit.lua").read_text(encoding="utf-8")
    assert library_source() == repository, "rebuild the package: make python-test reinstalls it"
    assert library_source().startswith("#!lua name=ratelimit\n")
    assert script_source() == repository.split("\n", 1)[1]


def test_metrics_have_the_rust_clients_names_and_labels() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    store = MemoryStore()
    policies = [
        Policy("plain", [Limit.token_bucket("b", 2, refill=60, key="p:{key}")]),
        Policy("leased", [Limit.token_bucket("b", 10, refill=60, key="l:{key}")], lease=Lease(2)),
    ]
    limiter = RateLimiter(store, policies, metrics=metrics)

    async def run() -> None:
        for _ in range(4):
            await limiter.check("plain", key="k")
        for _ in range(2):
            await limiter.check("leased", key="k")
        store.down = True
        await limiter.check("plain", key="other")

    asyncio.run(run())
    text = generate_latest(registry).decode()
    for line in [
        'ratelimit_decisions_total{backend="memory",outcome="allowed",policy="plain",source="store"} 2.0',
        'ratelimit_decisions_total{backend="memory",outcome="denied",policy="plain",source="store"} 1.0',
        'ratelimit_decisions_total{backend="memory",outcome="denied",policy="plain",source="cache"} 1.0',
        'ratelimit_decisions_total{backend="memory",outcome="allowed",policy="leased",source="store"} 1.0',
        'ratelimit_decisions_total{backend="memory",outcome="allowed",policy="leased",source="lease"} 1.0',
        'ratelimit_decisions_total{backend="none",outcome="fallback_allowed",policy="plain",source="fallback"} 1.0',
        'ratelimit_lease_claims_total{policy="leased"} 1.0',
        'ratelimit_lease_units_claimed_total{policy="leased"} 2.0',
        'ratelimit_store_errors_total{kind="unavailable",policy="plain"} 1.0',
        "ratelimit_circuit_open 0.0",
    ]:
        assert line in text, f"missing {line}:\n{text}"
    assert 'ratelimit_store_latency_seconds_bucket{le="0.05",op="acquire",policy="plain"}' in text
    assert "# TYPE ratelimit_circuit_opened_total counter" in text


def test_the_installed_distribution_carries_the_mit_license() -> None:
    files = distribution("redis-ratelimit-client").files or []
    licenses = [file for file in files if file.name == "LICENSE"]
    assert licenses, "the installed distribution has no LICENSE (pyproject license-files)"
    repository = (REPOSITORY / "LICENSE").read_text(encoding="utf-8")
    assert licenses[0].read_text(encoding="utf-8") == repository
    assert repository.startswith("MIT License\n")
