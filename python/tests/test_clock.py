"""The limiter reads the time only through its clock: with a ``FakeClock`` a lease's lifetime,
a remembered denial's wait, the local fallback's windows and an override's expiry pass when
the test moves the clock, and at no other time (the Rust client's ``FakeClock`` tests; the
breaker's period: ``test_limiter.py``). No test waits for real time to pass; the async
limiter's sweeper, which runs every half lifetime of real time, is polled for."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aredis

from redis_ratelimit_client import Lease, Limit, MemoryStore, Policy, RateLimiter, SyncRateLimiter
from redis_ratelimit_client.clock import SYSTEM_CLOCK, FakeClock, LimiterClock
from redis_ratelimit_client.plans import PlanSource
from servers import Server
from test_plans import rlctl

#: A bucket of 1 refilled over a minute: a second call waits 60 s.
ONE_A_MINUTE = [Limit.token_bucket("per-key", 1, refill=60, key="k:{key}")]
#: No unit comes back while a test runs: what a lease holds shows in the store.
TEN_A_DAY = [Limit.token_bucket("per-key", 10, refill=86_400, key="l:{key}")]


def test_a_fake_clock_moves_only_when_advanced() -> None:
    clock = FakeClock()
    limiter_clock = LimiterClock(clock)
    before = (clock.monotonic_ns(), clock.wall_ms(), limiter_clock.unix_us(), limiter_clock.seconds())
    time.sleep(0)  # the process moves on; the fake clock does not
    assert (clock.monotonic_ns(), clock.wall_ms(), limiter_clock.unix_us(), limiter_clock.seconds()) == before
    assert limiter_clock.unix_us() == FakeClock.START_NS // 1000, "Unix µs start at the fake clock's wall time"
    assert clock.monotonic_ns() == FakeClock.MONOTONIC_START_NS
    clock.advance(1.5)
    assert clock.monotonic_ns() - before[0] == 1_500_000_000
    assert clock.wall_ms() - before[1] == 1_500
    assert limiter_clock.unix_us() - before[2] == 1_500_000
    assert limiter_clock.seconds() - before[3] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)


def test_the_system_clock_reads_this_processs_clocks() -> None:
    limiter_clock = LimiterClock(SYSTEM_CLOCK)
    assert abs(limiter_clock.unix_us() - time.time_ns() // 1000) < 1_000_000
    assert abs(limiter_clock.seconds() - time.monotonic()) < 1.0


def test_a_denial_is_remembered_until_its_wait_on_the_clock() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    limiter = SyncRateLimiter(store, [Policy("api", ONE_A_MINUTE)], clock=clock)
    try:
        assert limiter.check("api", key="ann").allowed
        denied = limiter.check("api", key="ann")
        assert (denied.allowed, denied.source, denied.retry_after_ms) == (False, "store", 60_000)
        calls = store.calls
        clock.advance(59.5)
        cached = limiter.check("api", key="ann")
        assert (cached.allowed, cached.source, cached.retry_after_ms) == (False, "cache", 500)
        assert store.calls == calls, "no store call for a remembered denial"
        clock.advance(0.5)
        again = limiter.check("api", key="ann")
        assert (again.allowed, again.source) == (True, "store"), "the wait is over: the store decides (and refilled)"
    finally:
        limiter.close()


def test_the_local_fallback_refills_as_the_clock_moves() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    store.down = True
    per_second = [Limit.fixed_window("per-second", 3, 1, key="f:{key}")]
    limiter = SyncRateLimiter(store, [Policy("api", per_second)], replicas=1, clock=clock)
    try:
        first = [limiter.check("api", key="f") for _ in range(4)]
        assert [(d.allowed, d.source) for d in first] == [(True, "fallback")] * 3 + [(False, "fallback")]
        clock.advance(0.999)
        assert not limiter.check("api", key="f").allowed, "the same window"
        clock.advance(0.001)
        assert [limiter.check("api", key="f").allowed for _ in range(4)] == [True, True, True, False]
    finally:
        limiter.close()


def test_an_expired_leases_units_go_back_to_the_store() -> None:
    """The first replica leases 8 of 10 units; once its clock passes the lease's lifetime its
    sweeper gives the 7 unspent back (the Rust client's
    ``unspent_lease_units_are_refunded_after_the_lifetime``)."""
    store = MemoryStore()
    clock = FakeClock()
    leased = Policy("api", TEN_A_DAY, lease=Lease(8, lifetime=0.1))
    first = RateLimiter(store, [leased], clock=clock)
    peek = RateLimiter(store, [Policy("peek", TEN_A_DAY, deny_cache=False)])

    async def run() -> None:
        assert (await first.check("api", key="ann")).allowed  # claims 8, 7 left leased
        assert [(await peek.check("peek", key="ann")).allowed for _ in range(3)] == [True, True, False]
        # The sweeper runs every half lifetime of real time, reading the fake clock: until it
        # moves, no lease has expired.
        assert not (await peek.check("peek", key="ann")).allowed, "the lease still holds its units"
        clock.advance(0.1)
        deadline = time.monotonic() + 5
        while not (decision := await peek.check("peek", key="ann")).allowed:
            assert time.monotonic() < deadline, "the expired lease was never refunded"
            await asyncio.sleep(0.01)
        assert decision.remaining == 6, "7 refunded, 1 taken by this check"
        await first.aclose()

    asyncio.run(run())


def test_an_expired_lease_is_refunded_by_the_next_check_on_the_sync_limiter() -> None:
    """A check that finds its key set's lease expired gives the unspent units back (on the
    calling thread) before claiming again."""
    store = MemoryStore()
    clock = FakeClock()
    limiter = SyncRateLimiter(store, [Policy("api", TEN_A_DAY, lease=Lease(4, lifetime=60))], clock=clock)
    peek = SyncRateLimiter(store, [Policy("peek", TEN_A_DAY, deny_cache=False)])
    try:
        first = limiter.check("api", key="ann")
        assert (first.source, first.remaining) == ("store", 9), "claimed 4: 6 in the store, 3 leased"
        assert limiter.check("api", key="ann").source == "lease"
        clock.advance(59.999)
        assert limiter.check("api", key="ann").source == "lease", "not expired yet"
        assert peek.check("peek", key="ann").remaining == 5, "the store still has 6"
        clock.advance(0.001)
        renewed = limiter.check("api", key="ann")
        assert renewed.source == "store", "the expired lease was given back and a new one claimed"
        assert peek.check("peek", key="ann").remaining == 1, "5, 1 unspent refunded, 4 claimed, 1 taken"
    finally:
        limiter.close()
        peek.close()


def test_an_overrides_expiry_is_read_on_the_followers_clock(module_server: Server) -> None:
    policy = Policy.from_store(
        "api", tenant="tenant", defaults=[Limit.sliding_window("per-minute", 100, 60, key="-")], timeout=2
    )
    rlctl(module_server, "override", "set", "acme", "per-minute=sliding:8/60s", "--add", "--ttl", "1h")

    async def run() -> None:
        client = aredis.Redis(port=module_server.port)
        clock = FakeClock()
        plans = PlanSource(client, subscribe=False, clock=clock)
        await plans.refresh()  # read once; no follower task re-reads the server's clock
        limiter = RateLimiter(client, [policy], plans=plans)
        quota = (await limiter.check("api", tenant="acme")).headers()["ratelimit-policy"]
        assert quota == '"per-minute";q=8;w=60', "the override applies"
        clock.advance(3590)
        quota = (await limiter.check("api", tenant="acme")).headers()["ratelimit-policy"]
        assert quota == '"per-minute";q=8;w=60', "10 s before its expiry"
        clock.advance(20)
        quota = (await limiter.check("api", tenant="acme")).headers()["ratelimit-policy"]
        assert quota == '"per-minute";q=100;w=60', "expired: the defaults apply"
        await client.aclose()

    asyncio.run(run())
