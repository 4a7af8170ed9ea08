"""A healthy Redis decides: 1,000 concurrent checks from the async limiter on a limit of 5
admit exactly 5, every decision from the store (never the fallback), and so do five rounds of
400 threads of the sync one checking at once (on Valkey too when ``REDIS_SERVER`` points at
one); the FastAPI quick start flooded with 200 requests on a limit of 10 answers exactly 10
``200``s. On the module, on the default settings (a 50 ms timeout), with busy loops on both
cores for the test's duration: the timeout is the store's silence, never this process's own
lateness (``test_outage.py`` shows an outage still detected within it).

The Lua backends are checked for the same exactness with a 1 s timeout: Redis itself is slower
there (``INFO commandstats``: 0.4 us a call on the module, 4.5 us on the library with calls of
6-20 ms now and then in ``LATENCY LATEST``, 156 us as a script, which runs the whole library
each time, and Redis answers a pipeline in reads of about 110 calls), so on this loaded machine
they are at times silent for longer than 50 ms: stores slower than the default timeout covers
(python/README.md, *Timeout*)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from load import cpu_burners, favour_store
from redis_ratelimit_client import Decision, Limit, Metrics, Policy, RateLimiter, SyncRateLimiter
from servers import BACKENDS, Server, start

POLICY = Policy("flood", [Limit.token_bucket("per-key", 5, refill=3600, key="flood:{key}")])
SLOW_POLICY = Policy("flood", POLICY.limits, timeout=1)


@pytest.fixture(params=list(BACKENDS))
def flood_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Server, Policy]]:
    """A server per backend, and the policy to flood it with (the default one on the module)."""
    server = start(request.param)
    try:
        assert server.process is not None
        favour_store(server.process.pid)
        yield request.param, server, POLICY if request.param == "module" else SLOW_POLICY
    finally:
        server.stop()


def test_a_thousand_concurrent_async_checks_admit_exactly_the_limit(flood_server: tuple[str, Server, Policy]) -> None:
    backend, server, policy = flood_server

    async def flood() -> list[tuple[bool, str, str | None]]:
        limiter = RateLimiter(aredis.Redis(port=server.port), [policy])
        assert await limiter.connect() == backend
        decisions = await asyncio.gather(*(limiter.check("flood", key="hot") for _ in range(1000)))
        return [(d.allowed, d.source, d.backend) for d in decisions]

    with cpu_burners():
        results = asyncio.run(flood())
    sources = Counter(source for _, source, _ in results)
    assert sum(allowed for allowed, _, _ in results) == 5, sources
    assert set(sources) <= {"store", "cache"}, f"every decision from the store: {sources}"
    assert {name for _, _, name in results} == {backend}


def test_two_thousand_checks_from_four_hundred_threads_admit_exactly_the_limit(
    flood_server: tuple[str, Server, Policy],
) -> None:
    """Five rounds of 400 threads checking at once, each round on a fresh key."""
    backend, server, policy = flood_server
    limiter = SyncRateLimiter(redis.Redis(port=server.port), [policy])
    rounds, threads = 5, 400
    start_together = threading.Barrier(threads)

    def caller(_: int) -> list[tuple[int, Decision]]:
        decisions = []
        for round_ in range(rounds):
            start_together.wait()
            decisions.append((round_, limiter.check("flood", key=f"round-{round_}")))
        return decisions

    try:
        assert limiter.connect() == backend
        with cpu_burners(), concurrent.futures.ThreadPoolExecutor(threads) as pool:
            decisions = [decision for each in pool.map(caller, range(threads)) for decision in each]
        sources = Counter(d.source for _, d in decisions)
        admitted = Counter(round_ for round_, d in decisions if d.allowed)
        assert admitted == dict.fromkeys(range(rounds), 5), (admitted, sources)
        assert set(sources) <= {"store", "cache"}, f"every decision from the store: {sources}"
        assert limiter.backend == backend
    finally:
        limiter.close()


class _Sources(Metrics):
    """Counts the decisions by source."""

    def __init__(self) -> None:
        self.sources: Counter[str] = Counter()

    def decision(self, decision: Any) -> None:
        self.sources[decision.source] += 1


def test_the_fastapi_quick_start_flooded_admits_exactly_the_limit() -> None:
    import httpx
    from fastapi import Depends, FastAPI, Request

    from redis_ratelimit_client.contrib.fastapi import install, limit

    server = start("module")
    try:
        assert server.process is not None
        favour_store(server.process.pid)
        # The quick start (python/README.md), on a limit of 10.
        api = Policy("api", [Limit.token_bucket("per-key", 10, refill=60, key="rl:{{{key}}}")])
        metrics = _Sources()
        limiter = RateLimiter(aredis.Redis(port=server.port), [api], replicas=3, metrics=metrics)
        app = FastAPI()
        install(app, limiter)

        def api_key(request: Request) -> str:
            return request.headers.get("x-api-key", "anonymous")

        @app.get("/items", dependencies=[Depends(limit("api", key=api_key))])
        async def items() -> list[str]:
            return []

        async def flood() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await asyncio.gather(*(client.get("/items", headers={"x-api-key": "k"}) for _ in range(200)))

        with cpu_burners():
            responses = asyncio.run(flood())
    finally:
        server.stop()
    statuses = Counter(response.status_code for response in responses)
    assert statuses == {200: 10, 429: 190}, (statuses, metrics.sources)
    assert set(metrics.sources) <= {"store", "cache"}, f"none from the fallback: {metrics.sources}"
    policies = {response.headers["ratelimit-policy"] for response in responses}
    assert policies == {'"per-key";q=10;w=60'}, policies
    waits = {int(response.headers["retry-after"]) for response in responses if response.status_code == 429}
    assert waits <= {5, 6}, f"one token each 6 s: {waits}"
