"""The package as installed: the Functions library it ships is the repository's
``functions/ratelimit.lua`` byte for byte (one source, copied when the package is built),
the script form is the file minus its first line, and the metrics carry the Rust client's
names and labels."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

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
        'ratelimit_decisions_total{backend="memory",key_class="default",limit="b",outcome="allowed",policy="plain",'
        'source="store"} 2.0',
        'ratelimit_decisions_total{backend="memory",key_class="default",limit="b",outcome="denied",policy="plain",'
        'source="store"} 1.0',
        'ratelimit_decisions_total{backend="memory",key_class="default",limit="b",outcome="denied",policy="plain",'
        'source="cache"} 1.0',
        'ratelimit_decisions_total{backend="memory",key_class="default",limit="b",outcome="allowed",policy="leased",'
        'source="store"} 1.0',
        'ratelimit_decisions_total{backend="memory",key_class="default",limit="b",outcome="allowed",policy="leased",'
        'source="lease"} 1.0',
        'ratelimit_decisions_total{backend="none",key_class="default",limit="b",outcome="fallback_allowed",'
        'policy="plain",source="fallback"} 1.0',
        'ratelimit_decision_units_total{key_class="default",limit="b",outcome="allowed",policy="plain",'
        'source="store"} 2.0',
        'ratelimit_limit_quota{key_class="default",limit="b",policy="plain"} 2.0',
        'ratelimit_limit_window_seconds{key_class="default",limit="b",policy="plain"} 60.0',
        'ratelimit_fallback_mode{mode="local",policy="plain"} 1.0',
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


def test_the_package_installs_under_its_own_name_in_a_fresh_venv(tmp_path: Path) -> None:
    """``redis-ratelimit`` on PyPI is an unrelated project (import ``redis_ratelimit``): this
    one's wheel is ``redis-ratelimit-client`` and installs ``redis_ratelimit_client`` alone."""
    built = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(built), "."],
        cwd=REPOSITORY / "python",
        check=True,
        timeout=120,
    )
    (wheel,) = built.glob("*.whl")
    assert wheel.name.startswith("redis_ratelimit_client-"), wheel.name
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    site = subprocess.run(
        [str(fresh / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, str(wheel)],
        check=True,
        timeout=120,
    )
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(m.version('redis-ratelimit-client'), "
        "u.find_spec('redis_ratelimit_client') is not None, u.find_spec('redis_ratelimit') is None)"
    )
    answer = subprocess.run(
        [str(fresh / "bin" / "python"), "-c", probe], check=True, capture_output=True, text=True, timeout=60
    )
    assert answer.stdout.split() == [distribution("redis-ratelimit-client").version, "True", "True"], answer
