"""The fleet's top denied keys on a real server: every denial is counted wherever it was
decided (the store, the deny cache, a lease, the fallback), by the async and the sync
limiter, read back merged with ``top_denied``; a replica writes at most once a second, one
pipelined ``HSET`` (and its ``PEXPIREAT``); on a Zipf(1.1) workload over 10,000 keys from two
replicas (one async, one sync) the true top 10 is found, every count within the stated
bound. The figures print with ``-s``."""

from __future__ import annotations

import asyncio
import bisect
import math
import random
import threading
import time

import redis
import redis.asyncio as aredis
from prometheus_client import CollectorRegistry

from operating import Outage, command_calls, samples
from redis_ratelimit_client import (
    Lease,
    Limit,
    MemoryStore,
    Policy,
    PrometheusMetrics,
    RateLimiter,
    RedisStore,
    SyncRateLimiter,
    TopKeys,
)
from redis_ratelimit_client.top.report import Report, window_keys
from servers import Server

HOURLY = 3_600


def hourly(name: str, key: str, limit: int = 1) -> Limit:
    return Limit.fixed_window(name, limit, HOURLY, key=key)


def test_every_denial_is_counted_wherever_it_was_decided(module_server: Server) -> None:
    registry = CollectorRegistry()
    policies = [
        Policy("api", [hourly("per-user", "u:{user}", 2)], timeout=5),
        # No deny cache: a request that waited for a denied lease claim is denied by the lease.
        Policy("leased", [hourly("per-user", "l:{user}", 2)], lease=Lease(2), deny_cache=False, timeout=5),
        Policy("local", [hourly("per-user", "f:{user}", 1)], timeout=5),
        Policy("closed", [hourly("per-user", "c:{user}", 5)], fallback="closed", timeout=5),
    ]

    async def scenario() -> None:
        store = Outage(RedisStore(aredis.Redis(port=module_server.port)))
        options = TopKeys(concentration_every=0.05, report_every=0.1)
        limiter = RateLimiter(store, policies, metrics=PrometheusMetrics(registry), top_keys=options)
        sources = [(await limiter.check("api", user="ann")).source for _ in range(4)]
        assert sources == ["store", "store", "store", "cache"]
        for _ in range(2):
            assert (await limiter.check("leased", user="bob")).allowed
        both = await asyncio.gather(limiter.check("leased", user="bob"), limiter.check("leased", user="bob"))
        assert sorted((d.allowed, d.source) for d in both) == [(False, "lease"), (False, "store")]
        assert (await limiter.check("local", user="cat")).allowed
        store.down = True
        local = await limiter.check("local", user="cat")
        assert (local.allowed, local.source, local.binding) == (False, "fallback", "per-user")
        closed = await limiter.check("closed", user="dan")
        assert (closed.allowed, closed.source, closed.binding) == (False, "fallback", None)
        store.down = False
        await limiter.report_top()
        tops = {
            policy: [
                (top.limit, [(k.key, k.count, k.lower) for k in top.keys], top.denials, top.bound)
                for top in await limiter.top_denied(policy)
            ]
            for policy in ("api", "leased", "local", "closed")
        }
        assert tops == {
            "api": [("per-user", [("u:ann", 2, 2)], 2, 0)],
            "leased": [("per-user", [("l:bob", 2, 2)], 2, 0)],
            "local": [("per-user", [("f:cat", 1, 1)], 1, 0)],
            "closed": [("_none", [("c:dan", 1, 1)], 1, 0)],
        }
        # The reporter exports each limit's concentration: one key took every denial.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if samples(registry).get("ratelimit_denied_window{policy=api,limit=per-user}") == 2:
                break
            await asyncio.sleep(0.02)
        await limiter.aclose()

    asyncio.run(scenario())
    seen = samples(registry)
    assert seen.get("ratelimit_denied_window{policy=api,limit=per-user}") == 2
    assert seen.get("ratelimit_denied_top10_share{policy=api,limit=per-user}") == 1.0
    assert seen.get("ratelimit_denied_top10_share{policy=closed,limit=_none}") == 1.0
    assert seen.get("ratelimit_top_reports_total{result=ok}", 0) >= 1
    assert seen.get("ratelimit_top_reports_total{result=error}", 0) == 0
    # Stored in format v1, written by this client.
    stored = server_reports(module_server)
    assert stored and {report.client for report in stored} == {"python"}


def server_reports(server: Server, minutes: int = 2) -> list[Report]:
    """The reports stored over the last ``minutes`` minutes."""
    client = server.client()
    return [
        Report.decode(value) for key in window_keys(int(time.time()), minutes) for value in client.hgetall(key).values()
    ]


def test_the_sync_limiter_counts_and_reads_its_denials(module_server: Server) -> None:
    policies = [
        Policy("api", [hourly("per-user", "u:{user}", 1)], timeout=5),
        Policy("closed", [hourly("per-user", "c:{user}", 5)], fallback="closed", timeout=5),
    ]
    limiter = SyncRateLimiter(module_server.client(socket_timeout=5), policies, top_keys=TopKeys())
    try:
        sources = [limiter.check("api", user="ann").source for _ in range(3)]
        assert sources == ["store", "store", "cache"]
    finally:
        limiter.close()  # writes what the reporter had not written yet
    reader = SyncRateLimiter(module_server.client(socket_timeout=5), policies)
    top = reader.top_denied("api", limit="per-user", minutes=2, count=5)
    assert [(t.limit, [(k.key, k.count) for k in t.keys], t.denials) for t in top] == [("per-user", [("u:ann", 2)], 2)]
    assert reader.top_denied("nobody") == []
    reader.close()
    # Its fallback's denials too (on the memory store, which keeps hashes as Redis does).
    memory = MemoryStore()
    offline = SyncRateLimiter(memory, policies, top_keys=TopKeys())
    memory.down = True
    assert [offline.check("closed", user="eve").source for _ in range(2)] == ["fallback"] * 2
    memory.down = False
    offline.report_top()
    [closed] = offline.top_denied("closed")
    assert (closed.limit, [(k.key, k.count) for k in closed.keys]) == ("_none", [("c:eve", 2)])
    offline.close()


def test_a_replica_writes_at_most_once_a_second(module_server: Server) -> None:
    """Denials all the time for about 3.5 s: one pipelined HSET and PEXPIREAT a second."""

    async def scenario() -> tuple[int, int, float]:
        limiter = RateLimiter(
            aredis.Redis(port=module_server.port),
            [Policy("api", [hourly("per-user", "u:{user}")], timeout=5)],
            top_keys=TopKeys(concentration_every=0),
        )
        hsets, expires = command_calls(module_server, "hset"), command_calls(module_server, "pexpireat")
        started = time.monotonic()
        checks = 0
        while time.monotonic() - started < 3.5:
            await limiter.check("api", user=f"u{checks % 50}")
            checks += 1
            # A service's loop between requests (a deny-cache hit never waits for I/O).
            await asyncio.sleep(0)
        await limiter.aclose()
        elapsed = time.monotonic() - started
        hsets = command_calls(module_server, "hset") - hsets
        return hsets, command_calls(module_server, "pexpireat") - expires, elapsed

    hsets, expires, elapsed = asyncio.run(scenario())
    print(f"\ntop keys: {hsets} HSET in {elapsed:.1f} s: {hsets / elapsed:.2f} writes a second (one replica)")
    assert hsets == expires, "each HSET with its PEXPIREAT"
    # One a second (two at a minute's turn), and the last one aclose writes.
    assert 2 <= hsets <= math.ceil(elapsed) + 2, (hsets, elapsed)


class Zipf:
    """Key ranks 0..n with probability proportional to 1 / (rank + 1)^s, by inverse CDF."""

    def __init__(self, n: int, exponent: float) -> None:
        total, self.cumulative = 0.0, []
        for rank in range(1, n + 1):
            total += rank**-exponent
            self.cumulative.append(total)

    def draw(self, uniform: float) -> int:
        return min(bisect.bisect_left(self.cumulative, uniform * self.cumulative[-1]), len(self.cumulative) - 1)


KEYS = 10_000
CHECKS_PER_REPLICA = 40_000


def test_two_replicas_find_the_true_top_10_within_the_stated_bound(module_server: Server) -> None:
    zipf = Zipf(KEYS, 1.1)
    policy = Policy("api", [hourly("per-tenant", "t:{tenant}")], timeout=5)
    streams: dict[str, list[str]] = {}

    def denied_keys(seed: int) -> list[tuple[str]]:
        draw = random.Random(seed)
        return [(f"tenant-{zipf.draw(draw.random())}",) for _ in range(CHECKS_PER_REPLICA)]

    def sync_replica() -> None:
        limiter = SyncRateLimiter(module_server.client(socket_timeout=5), [policy], top_keys=TopKeys())
        denied = []
        try:
            for (tenant,) in denied_keys(2):
                if not limiter.check("api", tenant=tenant).allowed:
                    denied.append(f"t:{tenant}")
        finally:
            limiter.close()
        streams["sync"] = denied

    async def async_replica() -> None:
        limiter = RateLimiter(aredis.Redis(port=module_server.port), [policy], top_keys=TopKeys())
        denied = []
        for (tenant,) in denied_keys(1):
            if not (await limiter.check("api", tenant=tenant)).allowed:
                denied.append(f"t:{tenant}")
        await limiter.aclose()
        streams["async"] = denied

    hsets = command_calls(module_server, "hset")
    started = time.monotonic()
    thread = threading.Thread(target=sync_replica, name="sync-replica")
    thread.start()
    try:
        asyncio.run(async_replica())
    finally:
        thread.join(timeout=300)
    elapsed = time.monotonic() - started
    assert not thread.is_alive() and set(streams) == {"async", "sync"}
    hsets = command_calls(module_server, "hset") - hsets

    truth: dict[str, int] = {}
    for key in streams["async"] + streams["sync"]:
        truth[key] = truth.get(key, 0) + 1
    ranked = sorted(truth.items(), key=lambda item: (-item[1], item[0]))
    tenth = ranked[9][1]
    reader = SyncRateLimiter(redis.Redis(port=module_server.port, socket_timeout=5), [policy])
    [top] = reader.top_denied("api", minutes=5, count=10)
    reader.close()
    assert top.limit == "per-tenant"
    assert top.denials == sum(truth.values()), "every denial counted, every replica reported"
    assert top.bound <= top.bound_limit
    assert len(top.keys) == 10
    worst = 0
    for listed in top.keys:
        true_count = truth.get(listed.key, 0)
        assert listed.lower <= true_count <= listed.count, (listed, true_count)
        assert listed.count - listed.lower <= top.bound
        worst = max(worst, listed.count - true_count)
    found = len({key for key, _ in ranked[:10]} & {listed.key for listed in top.keys})
    stored = [len(report.encode()) for report in server_reports(module_server, 5)]
    mean = sum(stored) // max(len(stored), 1)
    print(
        f"\ntop keys: Zipf(1.1) over {KEYS} keys, 2 replicas (async, sync) x {CHECKS_PER_REPLICA} checks in "
        f"{elapsed:.1f} s: {top.denials} denials of {len(truth)} keys; recall of the true top 10: {found}/10; "
        f"worst count error {worst} (bound {top.bound}, a priori denials/capacity {top.bound_limit}); "
        f"top-10 share {top.top10_share:.3f}; stored summaries: {len(stored)} (mean {mean} B, "
        f"max {max(stored, default=0)} B); HSET writes: {hsets}, {hsets / 2 / elapsed:.2f} per replica per second"
    )
    assert found == 10, "the true top 10 found"
    assert tenth > top.bound, "keys denied more often than the bound are always listed"
    assert hsets <= 2 * (math.ceil(elapsed) + 2), (hsets, elapsed)


def test_a_write_the_store_does_not_answer_times_out_and_the_next_one_lands(module_server: Server) -> None:
    """A paused Redis: the pipelined write times out (never sent again by the store); once
    it answers, the connection drops the replies it owed and the next write lands."""
    from redis_ratelimit_client import StoreError, SyncRedisStore
    from redis_ratelimit_client.store_api import HashWrite

    def write(value: str) -> HashWrite:
        return HashWrite("rl:top:{rl-top}:v1:0", (("r:3:api:l", value),), (int(time.time()) + 60) * 1000)

    sync = SyncRedisStore(module_server.client(socket_timeout=5))
    hsets = command_calls(module_server, "hset")
    sync.write_hashes_blocking([write("zero")], 2)  # its connection open
    module_server.pause()
    try:
        started = time.monotonic()
        try:
            sync.write_hashes_blocking([write("first")], 0.2)
        except StoreError as error:
            assert error.kind == "timeout"
        else:
            raise AssertionError("a paused store answered")
        assert time.monotonic() - started < 5
    finally:
        module_server.resume()
    sync.write_hashes_blocking([write("second")], 2)
    assert sync.read_hashes_blocking(["rl:top:{rl-top}:v1:0", "rl:top:{rl-top}:v1:60"], 2) == [
        [("r:3:api:l", "second")],
        [],
    ]
    assert command_calls(module_server, "hset") - hsets == 3, "the paused one ran once, when Redis woke"
    sync.close()

    async def asynchronous() -> None:
        store = RedisStore(aredis.Redis(port=module_server.port))
        await store.write_hashes([write("zero")], 2)  # its connection open
        module_server.pause()
        try:
            try:
                await store.write_hashes([write("third")], 0.2)
            except StoreError as error:
                assert error.kind == "timeout"
            else:
                raise AssertionError("a paused store answered")
        finally:
            module_server.resume()
        await store.write_hashes([write("fourth")], 2)
        assert await store.read_hashes(["rl:top:{rl-top}:v1:0"], 2) == [[("r:3:api:l", "fourth")]]

    asyncio.run(asynchronous())
