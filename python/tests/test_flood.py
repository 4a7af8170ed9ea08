"""1,000 concurrent checks on a limit of 5 admit exactly 5, on each backend (and on Valkey
when ``REDIS_SERVER`` points at one), from the async limiter (its commands pipelined) and
from 50 threads of the sync one. The policy's timeout is 2 s here: the exactness shown is
the store's, and this shared 2-core machine runs at a load of 5-10 (with the default 50 ms,
checks the loaded event loop cannot serve in time go to the bounded fallback instead:
``test_outage.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import redis
import redis.asyncio as aredis

from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from servers import Server

POLICY = Policy("flood", [Limit.token_bucket("per-key", 5, refill=3600, key="flood:{key}")], timeout=2)


def test_a_thousand_concurrent_async_checks_admit_exactly_the_limit(backend_server: tuple[str, Server]) -> None:
    backend, server = backend_server

    async def flood() -> list[tuple[bool, str, str | None]]:
        limiter = RateLimiter(aredis.Redis(port=server.port), [POLICY])
        assert await limiter.connect() == backend
        decisions = await asyncio.gather(*(limiter.check("flood", key="hot") for _ in range(1000)))
        return [(d.allowed, d.source, d.backend) for d in decisions]

    results = asyncio.run(flood())
    assert sum(allowed for allowed, _, _ in results) == 5
    assert {source for _, source, _ in results} <= {"store", "cache"}, "every decision from the store"
    assert {name for _, _, name in results} == {backend}


def test_a_thousand_checks_from_fifty_threads_admit_exactly_the_limit(backend_server: tuple[str, Server]) -> None:
    backend, server = backend_server
    limiter = SyncRateLimiter(redis.Redis(port=server.port, max_connections=64), [POLICY])
    try:
        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            decisions = list(pool.map(lambda _: limiter.check("flood", key="threads"), range(1000)))
        assert sum(d.allowed for d in decisions) == 5
        assert {d.source for d in decisions} <= {"store", "cache"}
        assert limiter.backend == backend
    finally:
        limiter.close()
