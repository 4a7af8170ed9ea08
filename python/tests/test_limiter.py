"""The limiter's own rules on the in-process store (no server needed to see them): the
fallback modes, the breaker (outages in a row open it, one probe every period of a fake clock,
a stall is not an outage), the deny cache, leases cutting store calls, misuse refused with its reason, sync
checks on the calling thread."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from redis_ratelimit_client import (
    CheckError,
    Decision,
    FakeClock,
    Lease,
    Limit,
    MemoryStore,
    Policy,
    RateLimiter,
    Store,
    SyncRateLimiter,
    SyncStore,
)
from redis_ratelimit_client.protocol import Acquire, Grant, Refund
from redis_ratelimit_client.replies import BackendName
from redis_ratelimit_client.store_api import Capabilities

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
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    store.down = True
    # The open fallback owes the store nothing: the probe is the only store call to expect.
    limiter = RateLimiter(store, [Policy("api", BUCKET, fallback="open")], breaker=(3, 0.25), clock=clock)

    async def run() -> None:
        for _ in range(3):
            # One after another: calls sent at one instant would count as one outage.
            clock.advance(0.001)
            assert (await limiter.check("api", key="b")).source == "fallback"
        assert limiter.store_unreachable
        calls = store.calls
        store.down = False
        clock.advance(0.125)
        for _ in range(20):
            assert (await limiter.check("api", key="b")).source == "fallback"
        assert store.calls == calls, "no store call while the circuit is open"
        clock.advance(0.125)
        probe = await limiter.check("api", key="b")
        assert probe.source == "store" and not limiter.store_unreachable
        assert store.calls == calls + 1, "one probe"

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


class _CountingStore:
    """A store of the test's own (no subclass of the package's): the ``Store`` and
    ``SyncStore`` protocols' methods, counting calls into a memory store."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.acquired = 0

    @property
    def backend(self) -> BackendName | None:
        return self.inner.backend

    def capabilities(self) -> Capabilities:
        return Capabilities(multi=True, partial=False)

    def slot(self, key: str) -> int | None:
        return None

    async def connect(self, timeout: float = 1.0) -> str:
        return "counting"

    async def acquire(self, request: Acquire, timeout: float) -> Grant:
        self.acquired += 1
        return await self.inner.acquire(request, timeout)

    async def refund(self, request: Refund, timeout: float) -> None:
        await self.inner.refund(request, timeout)

    def connect_blocking(self, timeout: float = 1.0) -> str:
        return "counting"

    def acquire_blocking(self, request: Acquire, timeout: float) -> Grant:
        self.acquired += 1
        return self.inner.acquire_blocking(request, timeout)

    def refund_blocking(self, request: Refund, timeout: float) -> None:
        self.inner.refund_blocking(request, timeout)


def test_a_store_is_any_object_with_the_protocols_methods() -> None:
    """The limiters call a store given to them as it is (it is not taken for a Redis client),
    and read its capabilities by name: without partial grants a leased policy is checked
    without leases, one store call a check."""
    store = _CountingStore()
    assert isinstance(store, Store) and isinstance(store, SyncStore)
    policies = [Policy("leased", BUCKET, lease=Lease(2))]
    limiter = RateLimiter(store, policies)
    sync = SyncRateLimiter(store, policies)

    async def checked() -> Decision:
        assert await limiter.connect() == "counting"
        decision = await limiter.check("leased", key="a")
        await limiter.aclose()
        return decision

    try:
        assert sync.connect() == "counting"
        decisions = [asyncio.run(checked()), sync.check("leased", key="b")]
        assert [(d.allowed, d.source, d.backend) for d in decisions] == [(True, "store", "memory")] * 2
        assert store.acquired == 2
    finally:
        sync.close()
