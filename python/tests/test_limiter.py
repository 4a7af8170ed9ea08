"""The limiter's own rules on the in-process store (no server needed to see them): the
fallback modes, the breaker (outages in a row open it, one probe every period, a stall is not
an outage), the deny cache, leases cutting store calls, misuse refused with its reason, sync
checks on the calling thread."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from redis_ratelimit_client import CheckError, Lease, Limit, MemoryStore, Policy, RateLimiter, SyncRateLimiter

BUCKET = [Limit.token_bucket("per-key", 3, refill=60, key="k:{key}")]


def test_fallback_modes_when_the_store_is_down() -> None:
    store = MemoryStore()
    store.down = True
    limiter = RateLimiter(
        store,
        [Policy("open", BUCKET, fallback="open"), Policy("closed", BUCKET, fallback="closed"), Policy("local", BUCKET)],
        replicas=3,
    )

    async def run() -> dict[str, list[bool]]:
        seen: dict[str, list[bool]] = {}
        for name in ("open", "closed", "local"):
            seen[name] = [(await limiter.check(name, key="x")).allowed for _ in range(3)]
        return seen

    result = asyncio.run(run())
    assert result == {"open": [True] * 3, "closed": [False] * 3, "local": [True, False, False]}, "3 / 3 replicas = 1"


def test_the_breaker_opens_after_outages_and_probes() -> None:
    store = MemoryStore()
    store.down = True
    limiter = RateLimiter(store, [Policy("api", BUCKET)], breaker=(3, 0.2))

    async def run() -> None:
        for _ in range(3):
            await limiter.check("api", key="b")
        assert limiter.store_unreachable
        calls = store.calls
        for _ in range(20):
            assert (await limiter.check("api", key="b")).source == "fallback"
        assert store.calls == calls, "no store call while open"
        store.down = False
        # The time is what is tested: the breaker lets a probe through once open 0.2 s. It
        # must pass for real: the Python limiter reads time.monotonic(), no fake clock.
        await asyncio.sleep(0.25)
        probe = await limiter.check("api", key="b")
        assert probe.source == "store" and not limiter.store_unreachable

    asyncio.run(run())


def test_a_stall_is_not_an_outage() -> None:
    store = MemoryStore()
    limiter = RateLimiter(store, [Policy("api", BUCKET, timeout=0.05)])

    async def run() -> None:
        store.delay = 0.07  # longer than one timeout, shorter than two
        decisions = await asyncio.gather(*(limiter.check("api", key=str(i)) for i in range(10)))
        assert not limiter.store_unreachable, "calls in flight together count once, and the store answered"
        assert {d.source for d in decisions} <= {"store", "fallback"}

    asyncio.run(run())


def test_denials_are_remembered_and_leases_cut_store_calls() -> None:
    store = MemoryStore()
    limiter = SyncRateLimiter(
        store,
        [
            Policy("api", BUCKET),
            Policy("leased", [Limit.token_bucket("b", 10**6, 10**4, key="l:{key}")], lease=Lease(10)),
        ],
    )
    try:
        sources = [limiter.check("api", key="d").source for _ in range(6)]
        assert sources == ["store"] * 4 + ["cache"] * 2
        before = store.calls
        decisions = [limiter.check("leased", key="hot") for _ in range(1000)]
        assert all(d.allowed for d in decisions)
        assert (store.calls - before) / 1000 <= 0.1, store.calls - before
        assert {d.source for d in decisions} == {"store", "lease"}
    finally:
        limiter.close()


def test_misuse_is_refused_with_the_reason() -> None:
    limiter = RateLimiter(MemoryStore(), [Policy("api", BUCKET)])
    with pytest.raises(CheckError, match="no policy is named 'nope'"):
        asyncio.run(limiter.check("nope", key="x"))
    with pytest.raises(CheckError, match="needs the input 'key'"):
        limiter.validate("api", user="x")
    with pytest.raises(CheckError, match="at least 1 unit"):
        asyncio.run(limiter.check("api", 0, key="x"))
    started = time.monotonic()
    limiter.validate("api", key="x")
    assert time.monotonic() - started < 0.1


class _ThreadRecordingStore(MemoryStore):
    """Records the threads its sync calls run on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def acquire_blocking(self, request: Any, *timeout: float | None) -> Any:
        self.threads.add(threading.get_ident())
        return super().acquire_blocking(request, *timeout)


def test_a_sync_check_runs_on_the_calling_thread() -> None:
    """No hand-off to worker threads (their queue was a crowd's timeout, and about half the
    client's CPU per check): the store call is made by the caller."""
    store = _ThreadRecordingStore()
    limiter = SyncRateLimiter(store, [Policy("api", BUCKET)])
    try:
        callers = set()

        def check() -> None:
            callers.add(threading.get_ident())
            assert limiter.check("api", key="t").source == "store"

        threads = [threading.Thread(target=check) for _ in range(3)]
        check()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store.threads == callers
    finally:
        limiter.close()
