"""Redis stopped and SIGSTOPped under load: every check is answered within the timeout (twice
it in a stall, then at once once the breaker opens), and the fleet admits within the stated
bound (README, *Fallback bound*): over an interval, the allowance, plus what the local fallback
admitted beyond what the store took back, ``U <= sum(floor(R_i / n)) - R0``."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aredis

from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from servers import start

CAPACITY, REFILL_S = 30, 60.0
RATE = CAPACITY / REFILL_S
POLICY = Policy("api", [Limit.token_bucket("per-key", CAPACITY, refill=REFILL_S, key="outage:{key}")])
REPLICAS = 3


def record(name: str, figures: dict[str, Any]) -> None:
    """Writes figures where ``RL_FIGURES`` says (the README's table comes from them)."""
    path = os.environ.get("RL_FIGURES")
    if path:
        existing = json.loads(Path(path).read_text()) if Path(path).exists() else {}
        existing[name] = figures
        Path(path).write_text(json.dumps(existing, indent=2))


async def replica_loop(limiter: RateLimiter, until: float, log: list[tuple[float, bool, str, float]]) -> None:
    while time.monotonic() < until:
        sent = time.monotonic()
        decision = await limiter.check("api", key="shared")
        log.append((sent, decision.allowed, decision.source, time.monotonic() - sent))
        await asyncio.sleep(0.01)


def test_sigstop_under_load_stays_within_the_bound() -> None:
    server = start("module")

    async def scenario() -> dict[str, Any]:
        limiters = [RateLimiter(aredis.Redis(port=server.port), [POLICY], replicas=REPLICAS) for _ in range(REPLICAS)]
        for limiter in limiters:
            await limiter.connect()
        began = time.monotonic()
        last_remaining = []
        for limiter in limiters:
            for _ in range(3):
                decision = await limiter.check("api", key="shared")
                assert decision.source == "store"
            last_remaining.append(decision.remaining)
        r0 = CAPACITY - 3 * REPLICAS
        logs: list[list[tuple[float, bool, str, float]]] = [[] for _ in limiters]
        server.pause()
        stopped_at = time.monotonic()
        await asyncio.gather(
            *(replica_loop(lim, stopped_at + 1.5, log) for lim, log in zip(limiters, logs, strict=True))
        )
        server.resume()
        resumed_at = time.monotonic()
        await asyncio.gather(
            *(replica_loop(lim, resumed_at + 2.0, log) for lim, log in zip(limiters, logs, strict=True))
        )
        ended = time.monotonic()
        everything = [entry for log in logs for entry in log]
        admitted = 3 * REPLICAS + sum(allowed for _, allowed, _, _ in everything)
        by_fallback = sum(allowed for _, allowed, source, _ in everything if source == "fallback")
        stale = max(sum(r // REPLICAS for r in last_remaining) - r0, 0)
        allowance = CAPACITY + RATE * (ended - began)
        latencies = sorted(latency for *_, latency in everything)
        recovered = [sent for sent, _, source, _ in everything if sent > resumed_at and source == "store"]
        return {
            "admitted": admitted,
            "allowance": round(allowance, 2),
            "stated_bound": round(allowance + stale, 2),
            "over_admission": round(admitted - allowance, 2),
            "bound_on_over_admission": stale,
            "admitted_by_fallback": by_fallback,
            "last_answers": last_remaining,
            "checks": len(everything),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
            "max_ms": round(latencies[-1] * 1000, 2),
            "store_again_after_s": round(recovered[0] - resumed_at, 3) if recovered else None,
        }

    try:
        figures = asyncio.run(scenario())
    finally:
        server.stop()
    record("sigstop", figures)
    assert figures["admitted"] <= figures["stated_bound"], figures
    assert figures["admitted_by_fallback"] > 0, f"the fallback never decided: {figures}"
    assert figures["max_ms"] < 2 * 50 + 400, f"a check waited too long: {figures}"
    assert figures["store_again_after_s"] is not None and figures["store_again_after_s"] < 1.5, figures


def test_a_stopped_redis_leaves_each_replica_its_share() -> None:
    server = start("module")
    port = server.port
    server.stop()

    async def scenario() -> dict[str, Any]:
        limiters = [RateLimiter(aredis.Redis(port=port), [POLICY], replicas=REPLICAS) for _ in range(REPLICAS)]
        admitted = []
        latencies = []
        for limiter in limiters:
            count = 0
            for _ in range(CAPACITY):
                sent = time.monotonic()
                decision = await limiter.check("api", key="fresh")
                latencies.append(time.monotonic() - sent)
                assert decision.source == "fallback"
                count += decision.allowed
            admitted.append(count)
        latencies.sort()
        return {
            "admitted_per_replica": admitted,
            "share": CAPACITY // REPLICAS,
            "max_ms": round(latencies[-1] * 1000, 2),
        }

    figures = asyncio.run(scenario())
    record("stopped", figures)
    assert figures["admitted_per_replica"] == [CAPACITY // REPLICAS] * REPLICAS, figures
    assert figures["max_ms"] < 500, figures


def test_the_sync_limiter_detects_a_paused_and_a_stopped_redis_within_the_timeout() -> None:
    """The sync limiter's checks run on the caller's thread: with Redis SIGSTOPped each is
    still answered within the timeout's bound (the fallback decides), the store decides again
    once it resumes, and a stopped Redis is refused at once."""
    server = start("module")
    limiter = SyncRateLimiter(redis.Redis(port=server.port), [POLICY], replicas=REPLICAS)
    try:
        assert limiter.check("api", key="sync").source == "store"
        server.pause()
        latencies, sources = [], set()
        paused_until = time.monotonic() + 1.0
        while time.monotonic() < paused_until:
            sent = time.monotonic()
            sources.add(limiter.check("api", key="sync").source)
            latencies.append(time.monotonic() - sent)
        server.resume()
        resumed = time.monotonic()
        while limiter.check("api", key="sync").source != "store":
            assert time.monotonic() - resumed < 1.5, "the store never decided again"
            time.sleep(0.01)
        assert sources == {"fallback"}, sources
        assert max(latencies) < 2 * 0.05 + 0.4, f"a check waited too long: {max(latencies):.3f} s"
        server.stop()
        started = time.monotonic()
        for _ in range(10):
            assert limiter.check("api", key="sync").source == "fallback"
        assert time.monotonic() - started < 0.5
    finally:
        limiter.close()
        server.stop()
