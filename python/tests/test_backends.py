"""Every algorithm on each backend decides alike: one trace of checks (every algorithm alone
and in one RL.MULTI, weights, pacing, leases, in-flight limits, refunds across slots off,
reservations) on a server with the module, one without it (the Functions library, loaded by
the client) and one with FUNCTION renamed away (scripts), each on a clock the test sets, and
on the in-process engine at the same instants: identical decisions and header fields."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aredis

from redis_ratelimit_client import Lease, Limit, MemoryStore, Policy, RateLimiter, SyncRateLimiter
from servers import start

T0_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z

POLICIES = [
    Policy("tb", [Limit.token_bucket("bucket", 5, refill=10, key="tb:{key}")], deny_cache=False, timeout=2),
    Policy("paced", [Limit.token_bucket("queue", 1, 10, key="pq:{key}", max_wait=1)], deny_cache=False, timeout=2),
    Policy("fw", [Limit.fixed_window("fixed", 4, 60, key="fw:{key}")], deny_cache=False, timeout=2),
    Policy("sw", [Limit.sliding_window("sliding", 6, 10, key="sw:{key}")], deny_cache=False, timeout=2),
    Policy("sl", [Limit.sliding_log("log", 3, 5, key="sl:{key}")], deny_cache=False, timeout=2),
    Policy("gcra", [Limit.gcra("cell", 2, 3, 1, key="gc:{key}")], deny_cache=False, timeout=2),
    Policy(
        "multi",
        [
            Limit.token_bucket("per-user", 4, 2, key="m:{{{key}}}:user"),
            Limit.fixed_window("per-day", 50, 86400, key="m:{{{key}}}:day", weight=2),
            Limit.sliding_window("per-minute", 9, 60, key="m:{{{key}}}:minute"),
        ],
        deny_cache=False,
        timeout=2,
    ),
    Policy(
        "leased",
        [Limit.fixed_window("window", 12, 60, key="ls:{key}")],
        lease=Lease(4, lifetime=60),
        deny_cache=False,
        timeout=2,
    ),
    Policy("slots", [Limit.concurrency("in-flight", 2, 30, key="cc:{key}")], deny_cache=False, timeout=2),
]

#: (ms after the previous step, policy, cost, key, what): what is "check", "hold" (keep the
#: in-flight slots), "release" (the last held), "reserve:<actual>".
TRACE: list[tuple[int, str, int, str, str]] = []
for round_ in range(3):
    for policy, cost in [
        ("tb", 1),
        ("tb", 2),
        ("fw", 1),
        ("sw", 2),
        ("sl", 1),
        ("gcra", 1),
        ("multi", 1),
        ("multi", 3),
        ("leased", 1),
        ("paced", 1),
        ("paced", 1),
    ]:
        for repeat in range(3):
            TRACE.append((137 * repeat + 11, policy, cost, f"k{round_ % 2}", "check"))
    TRACE += [
        (5, "slots", 1, "s", "hold"),
        (5, "slots", 1, "s", "hold"),
        (5, "slots", 1, "s", "hold"),
        (5, "slots", 1, "s", "release"),
        (5, "slots", 1, "s", "hold"),
    ]
    TRACE += [(40, "tb", 2, "r", "reserve:1"), (40, "tb", 1, "r", "reserve:4"), (10, "tb", 1, "r", "check")]
    TRACE.append((4_000, "tb", 5, "k9", "check"))


def summary(decision: Any) -> tuple[Any, ...]:
    limits = tuple(
        (s.name, s.allowed, s.remaining, s.retry_after_ms, s.reset_after_ms, s.quota, s.more_in_ns)
        for s in decision.limits
    )
    return (
        decision.allowed,
        decision.source,
        decision.retry_after_ms,
        decision.binding,
        decision.wait_ms,
        limits,
        tuple(sorted(decision.headers().items())),
    )


async def run_trace(limiter: RateLimiter, set_clock: Any) -> list[tuple[Any, ...]]:
    now = T0_US
    held: list[Any] = []
    seen = []
    for advance_ms, policy, cost, key, what in TRACE:
        now += advance_ms * 1000
        set_clock(now)
        if what == "release":
            await limiter.release(held.pop())
            continue
        if what.startswith("reserve:"):
            reservation = await limiter.reserve(policy, cost, key=key)
            seen.append(summary(reservation.decision))
            seen.append(("owed", await reservation.settle(int(what.split(":")[1]))))
            continue
        decision = await limiter.check(policy, cost, key=key)
        if what == "hold" and decision.in_flight is not None:
            held.append(decision)
        elif decision.in_flight is not None:
            await limiter.release(decision)
        seen.append(summary(decision))
    return seen


def test_every_algorithm_decides_alike_on_every_backend_and_the_local_engine() -> None:
    async def on_backend(backend: str) -> tuple[str | None, list[tuple[Any, ...]]]:
        server = start(backend, clock_us=T0_US)
        try:
            limiter = RateLimiter(aredis.Redis(port=server.port), POLICIES)
            assert await limiter.connect() == backend
            return limiter.backend, await run_trace(limiter, server.set_clock)
        finally:
            server.stop()

    async def on_memory() -> list[tuple[Any, ...]]:
        clock = [T0_US]
        limiter = RateLimiter(MemoryStore(clock=lambda: clock[0]), POLICIES)
        return await run_trace(limiter, lambda now: clock.__setitem__(0, now))

    results = {backend: asyncio.run(on_backend(backend)) for backend in ("module", "functions", "scripts")}
    memory = asyncio.run(on_memory())
    for backend, (resolved, trace) in results.items():
        assert resolved == backend
        assert len(trace) == len(memory)
        for index, (got, expected) in enumerate(zip(trace, memory, strict=True)):
            assert got == expected, f"{backend}, step {index}: {got} != engine's {expected}"
    sources = {step[1] for step in memory if isinstance(step[1], str)}
    assert {"store", "lease"} <= sources, sources
    assert any(step[0] is False for step in memory), "the trace reaches denials"
    assert any(step[4] > 0 for step in memory if isinstance(step[4], int)), "pacing waits"


@pytest.mark.parametrize("backend", ["module", "functions", "scripts"])
def test_the_sync_limiter_names_its_backend(backend: str) -> None:
    import redis

    server = start(backend)
    try:
        limiter = SyncRateLimiter(redis.Redis(port=server.port), POLICIES[:1])
        decisions = [limiter.check("tb", key="x") for _ in range(6)]
        assert limiter.backend == backend
        assert [d.allowed for d in decisions] == [True] * 5 + [False]
        assert {d.backend for d in decisions} == {backend}
        limiter.close()
    finally:
        server.stop()


def test_a_lost_script_or_library_is_loaded_again() -> None:
    import redis

    for backend, flush in (("scripts", "SCRIPT"), ("functions", "FUNCTION")):
        server = start("functions")
        try:
            limiter = SyncRateLimiter(redis.Redis(port=server.port), POLICIES[:1], backend=backend)
            assert limiter.check("tb", key="z").allowed
            server.client().execute_command(flush, "FLUSH")
            second = limiter.check("tb", key="z")
            assert (second.allowed, second.source, second.remaining) == (True, "store", 3), backend
            limiter.close()
        finally:
            server.stop()
