"""A write is never sent twice: a charge or a refund Redis ran whose reply was lost (a
connection cut by a proxy after the server answered, a server stopped past the client's
``socket_timeout``) is an unknown outcome answered by the fallback, and the server's state
shows it ran exactly once. redis-py (8.x) would otherwise retry it on a new connection."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
import redis.asyncio.cluster
import redis.cluster

from polling import wait_for, wait_for_async
from proxy import CuttingProxy
from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from redis_ratelimit_client.store import SyncRedisStore
from servers import Cluster, Server

CAPACITY = 100
# A day's refill: no unit comes back while a test runs.
LIMIT = Limit.token_bucket("per-key", CAPACITY, refill=86_400, key="replay:{{{key}}}")
# Timeout long enough for redis-py's retries (10 ms backoff) to have happened before the fix.
POLICY = Policy("api", [LIMIT], fallback="closed", timeout=5, deny_cache=False)

#: What the proxy looks for in a charge and in a refund, by backend.
MARKERS = {
    "module": (b"RL.TOKENBUCKET", b"RL.REFUND"),
    "functions": (b"rl_tokenbucket", b"rl_refund"),
    "scripts": (b"rl_tokenbucket", b"rl_refund"),
}


def remaining(client: Any, backend: str, key: str) -> int:
    """The bucket's units now, read with ``RL.PEEK`` (which writes nothing)."""
    store = SyncRedisStore(client, backend=backend)
    algorithm = LIMIT.algorithm
    reply = store.call("RL.PEEK", f"replay:{{{key}}}", algorithm.wire_name, *algorithm.wire_args(), "1")
    return int(reply[1]) + 1


@pytest.fixture
def proxied(backend_server: tuple[str, Server]) -> Iterator[tuple[str, Server, CuttingProxy]]:
    backend, server = backend_server
    with CuttingProxy(server.port) as proxy:
        yield backend, server, proxy


def test_a_lost_reply_is_charged_and_refunded_once_async(proxied: tuple[str, Server, CuttingProxy]) -> None:
    backend, server, proxy = proxied
    charge, refund = MARKERS[backend]

    async def scenario() -> None:
        limiter = RateLimiter(aredis.Redis(port=proxy.port), [POLICY])
        assert await limiter.connect() == backend
        assert (await limiter.check("api", 60, key="a")).source == "store"
        reservation = await limiter.reserve("api", 30, key="a")
        assert reservation.allowed and reservation.decision.source == "store"
        assert remaining(server.client(), backend, "a") == 10
        proxy.cut_after(refund)
        await reservation.release()
        assert proxy.cuts == 1
        assert remaining(server.client(), backend, "a") == 40, "the refund of 30 was given more than once"
        proxy.cut_after(charge)
        decision = await limiter.check("api", 5, key="a")
        assert proxy.cuts == 2
        assert decision.source == "fallback", decision
        assert remaining(server.client(), backend, "a") == 35, "the check of 5 was charged more than once"
        assert proxy.marked == 1

    asyncio.run(scenario())


def test_a_lost_reply_is_charged_and_refunded_once_sync(proxied: tuple[str, Server, CuttingProxy]) -> None:
    backend, server, proxy = proxied
    charge, refund = MARKERS[backend]
    limiter = SyncRateLimiter(redis.Redis(port=proxy.port), [POLICY])
    try:
        assert limiter.connect() == backend
        assert limiter.check("api", 60, key="s").source == "store"
        reservation = limiter.reserve("api", 30, key="s")
        assert reservation.allowed
        proxy.cut_after(refund)
        reservation.release()
        assert proxy.cuts == 1
        assert remaining(server.client(), backend, "s") == 40, "the refund of 30 was given more than once"
        proxy.cut_after(charge)
        decision = limiter.check("api", 5, key="s")
        assert proxy.cuts == 2
        assert decision.source == "fallback", decision
        assert remaining(server.client(), backend, "s") == 35, "the check of 5 was charged more than once"
        assert proxy.marked == 1
    finally:
        limiter.close()


def test_a_lost_reply_on_a_cluster_is_charged_and_refunded_once() -> None:
    cluster = Cluster(3)
    proxies = [CuttingProxy(node.port) for node in cluster.nodes]
    remap = {node.port: proxy.port for node, proxy in zip(cluster.nodes, proxies, strict=True)}

    def address(host_port: tuple[str, int]) -> tuple[str, int]:
        return host_port[0], remap.get(host_port[1], host_port[1])

    def cut_after(marker: bytes) -> None:
        for proxy in proxies:
            proxy.cut_after(marker)

    def cuts() -> int:
        # One node ran the command: the others' proxies must not cut the next commands.
        for proxy in proxies:
            proxy.disarm()
        return sum(proxy.cuts for proxy in proxies)

    def left(key: str) -> int:
        direct = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        try:
            return remaining(direct, "module", key)
        finally:
            direct.close()

    try:
        entry = proxies[0].port
        limiter = SyncRateLimiter(
            redis.cluster.RedisCluster(host="127.0.0.1", port=entry, address_remap=address), [POLICY]
        )
        try:
            assert limiter.connect() == "module"
            assert limiter.check("api", 60, key="c").source == "store"
            reservation = limiter.reserve("api", 30, key="c")
            cut_after(b"RL.REFUND")
            reservation.release()
            assert cuts() == 1
            assert left("c") == 40, "the refund of 30 was given more than once (sync cluster)"
            cut_after(b"RL.TOKENBUCKET")
            assert limiter.check("api", 5, key="c").source == "fallback"
            assert cuts() == 2
            assert left("c") == 35, "the check of 5 was charged more than once (sync cluster)"
        finally:
            limiter.close()

        async def scenario() -> None:
            client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=entry, address_remap=address)
            limiter = RateLimiter(client, [POLICY])
            assert await limiter.connect() == "module"
            assert (await limiter.check("api", 60, key="ac")).source == "store"
            reservation = await limiter.reserve("api", 30, key="ac")
            cut_after(b"RL.REFUND")
            await reservation.release()
            assert cuts() == 3
            assert left("ac") == 40, "the refund of 30 was given more than once (asyncio cluster)"
            cut_after(b"RL.TOKENBUCKET")
            assert (await limiter.check("api", 5, key="ac")).source == "fallback"
            assert cuts() == 4
            assert left("ac") == 35, "the check of 5 was charged more than once (asyncio cluster)"
            await client.aclose()

        asyncio.run(scenario())
    finally:
        for proxy in proxies:
            proxy.close()
        cluster.stop()


def calls_of(server: Server, command: str) -> int:
    """The calls of ``command`` the server ran without an error reply (not the backend's
    probes at connect)."""
    stats = server.client().info("commandstats")
    entry = stats.get(f"cmdstat_{command}")
    return int(entry["calls"]) - int(entry.get("failed_calls", 0)) if entry else 0


def test_a_server_stopped_past_the_socket_timeout_is_charged_once(backend_server: tuple[str, Server]) -> None:
    """Redis stopped until the client's read timed out, then started again while redis-py
    would be retrying: the check's one command runs once (before: once per attempt)."""
    backend, server = backend_server
    command = {"module": "rl.tokenbucket", "functions": "fcall", "scripts": "evalsha"}[backend]

    def charged_once(key: str, before: int) -> None:
        wait_for(lambda: remaining(server.client(), backend, key) <= CAPACITY - 20, "the stopped call to run")
        if backend == "module":  # (the library's peeks are FCALLs too)
            assert calls_of(server, command) - before == 1
        assert remaining(server.client(), backend, key) == CAPACITY - 20, "the check of 10 was charged twice"

    with CuttingProxy(server.port) as proxy:
        # The check during the stop has the default timeout (50 ms): it gives up while its
        # command waits in the stopped server (redis-py's retry would send it again).
        policies = [
            Policy("api", [LIMIT], fallback="closed", deny_cache=False),
            Policy("first", [LIMIT], fallback="closed", deny_cache=False, timeout=5),
        ]
        limiter = SyncRateLimiter(redis.Redis(port=proxy.port, socket_timeout=0.3), policies)
        try:
            assert limiter.connect() == backend
            assert limiter.check("first", 10, key="stop").source == "store"
            before = calls_of(server, command)
            server.pause()
            try:
                assert limiter.check("api", 10, key="stop").source == "fallback"
            finally:
                server.resume()
            charged_once("stop", before)
            # The given-up call's connection owes its reply; the next call reads and drops it.
            assert limiter.check("first", 1, key="other").source == "store"
        finally:
            limiter.close()

        async def scenario() -> None:
            # The asyncio client, waiting for the store longer than the socket timeout.
            client = aredis.Redis(port=proxy.port, socket_timeout=0.3)
            limiter = RateLimiter(client, [Policy("api", [LIMIT], fallback="closed", timeout=2.0, deny_cache=False)])
            assert (await limiter.check("api", 10, key="astop")).source == "store"
            before = calls_of(server, command)
            closed = proxy.closed_by_client
            server.pause()
            try:
                check = asyncio.ensure_future(limiter.check("api", 10, key="astop"))
                await wait_for_async(lambda: proxy.closed_by_client != closed, "the client to give up its read")
            finally:
                server.resume()
            await check
            charged_once("astop", before)
            await client.aclose()

        asyncio.run(scenario())
