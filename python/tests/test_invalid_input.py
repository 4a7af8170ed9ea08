"""A caller's mistake is the caller's error, never an outage: a key that is not text (a lone
surrogate) fails its own check with ``CheckError`` and leaves the 29 checks pipelined with it
to the store; a cost or weight beyond what the store takes, or arguments the store refuses as
invalid, raise ``CheckError`` under every fallback (``open`` used to admit them), and the
adapters answer 500."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
import redis.asyncio.cluster
import redis.cluster

from redis_ratelimit_client import CheckError, Limit, Policy, PolicyError, RateLimiter, StoreError, SyncRateLimiter
from servers import Cluster, Server

BAD = json.loads('"\\udcff"')
LIMIT = Limit.token_bucket("per-key", 100, refill=86_400, key="bad:{{{key}}}")


def policy(fallback: str = "closed") -> Policy:
    # A long timeout: these tests are about who decides, not latency, on a loaded machine.
    return Policy("api", [LIMIT], fallback=fallback, timeout=5, deny_cache=False)


def keys() -> list[str]:
    return [f"user-{index}" for index in range(14)] + [BAD] + [f"user-{index}" for index in range(14, 29)]


async def batch(limiter: RateLimiter) -> list[Any]:
    return list(await asyncio.gather(*(limiter.check("api", key=key) for key in keys()), return_exceptions=True))


def assert_only_the_bad_key_failed(results: list[Any]) -> None:
    bad = results[14]
    assert isinstance(bad, CheckError), bad
    assert "surrogate" in str(bad) and "per-key" in str(bad), str(bad)
    others = results[:14] + results[15:]
    assert len(others) == 29
    assert all(not isinstance(result, BaseException) for result in others), others
    assert [decision.source for decision in others] == ["store"] * 29, [d.source for d in others]
    assert all(decision.allowed for decision in others)


def test_a_bad_key_fails_alone_in_a_pipelined_batch(backend_server: tuple[str, Server]) -> None:
    backend, server = backend_server

    async def scenario() -> None:
        limiter = RateLimiter(aredis.Redis(port=server.port), [policy()])
        assert await limiter.connect() == backend
        assert_only_the_bad_key_failed(await batch(limiter))
        # A module command with a bad key, pipelined with 29 checks, fails alone too.
        algorithm = LIMIT.algorithm
        peek = limiter.store.call("RL.PEEK", f"bad:{{{BAD}}}", algorithm.wire_name, *algorithm.wire_args(), "1")
        results = await asyncio.gather(
            peek, *(limiter.check("api", key=f"peer-{index}") for index in range(29)), return_exceptions=True
        )
        assert isinstance(results[0], StoreError) and results[0].kind == "invalid", results[0]
        assert [decision.source for decision in results[1:]] == ["store"] * 29

    asyncio.run(scenario())
    limiter = SyncRateLimiter(redis.Redis(port=server.port), [policy()])
    try:
        with pytest.raises(CheckError, match="surrogate"):
            limiter.check("api", key=BAD)
        assert limiter.check("api", key="sync").source == "store"
    finally:
        limiter.close()


def test_a_bad_key_on_a_cluster_is_the_callers_error() -> None:
    cluster = Cluster(3)
    try:
        port = cluster.nodes[0].port
        limiter = SyncRateLimiter(redis.cluster.RedisCluster(host="127.0.0.1", port=port), [policy()])
        try:
            with pytest.raises(CheckError, match="surrogate"):
                limiter.check("api", key=BAD)
            assert [limiter.check("api", key=key).source for key in keys() if key != BAD] == ["store"] * 29
        finally:
            limiter.close()

        async def scenario() -> None:
            client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port)
            limiter = RateLimiter(client, [Policy("api", [LIMIT], fallback="closed", timeout=5, deny_cache=False)])
            assert await limiter.connect() == "module"
            assert_only_the_bad_key_failed(await batch(limiter))
            await client.aclose()

        asyncio.run(scenario())
    finally:
        cluster.stop()


@pytest.mark.parametrize("fallback", ["open", "closed"])
@pytest.mark.parametrize("backend", ["module", "functions"])
def test_a_cost_beyond_the_store_is_the_callers_error(backend: str, fallback: str, request: Any) -> None:
    from servers import start

    server = start(backend)
    request.addfinalizer(server.stop)

    async def scenario() -> None:
        limiter = RateLimiter(aredis.Redis(port=server.port), [policy(fallback)])
        # Before the backend is known: the module's bound (2^64 - 1) is checked before sending.
        with pytest.raises(CheckError, match="more than the store takes"):
            await limiter.check("api", 2**64, key="cost")
        # The library refuses more than 2^53 (its reply is an argument error, not an outage).
        if backend == "functions":
            with pytest.raises(CheckError, match="cost must be at most 9007199254740992"):
                await limiter.check("api", 2**60, key="cost")
        assert await limiter.connect() == backend
        with pytest.raises(CheckError, match="more than the store takes"):
            await limiter.check("api", 2**64, key="cost")
        if backend == "functions":  # known now: refused before sending
            with pytest.raises(CheckError, match="on the functions"):
                await limiter.check("api", 2**60, key="cost")
        # A weight multiplies the cost.
        weighted = Policy(
            "weighted",
            [Limit.token_bucket("per-key", 100, refill=60, key="w:{key}", weight=2**40)],
            fallback=fallback,
            timeout=5,
        )
        limiter = RateLimiter(aredis.Redis(port=server.port), [weighted])
        with pytest.raises(CheckError, match="weight"):
            await limiter.check("weighted", 2**30, key="w")
        # Arguments the store refuses (a log longer than the server's max-log-entries).
        long_log = Policy(
            "log", [Limit.sliding_log("per-key", 20_000, 60, key="log:{key}")], fallback=fallback, timeout=5
        )
        limiter = RateLimiter(aredis.Redis(port=server.port), [long_log])
        with pytest.raises(CheckError, match="max-log-entries"):
            await limiter.check("log", key="l")
        assert limiter.breaker.is_open is False

    asyncio.run(scenario())
    limiter = SyncRateLimiter(redis.Redis(port=server.port), [policy(fallback)])
    try:
        with pytest.raises(CheckError):
            limiter.check("api", 2**64, key="cost")
        reservation = limiter.reserve("api", 1, key="cost")
        with pytest.raises(CheckError):
            reservation.settle(2**64)
    finally:
        limiter.close()


def test_a_weight_beyond_the_store_is_refused_at_once() -> None:
    with pytest.raises(PolicyError, match="weight"):
        Limit.token_bucket("per-key", 100, refill=60, key="w:{key}", weight=2**64)


def test_the_adapters_answer_an_invalid_request_500(module_server: Server) -> None:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from redis_ratelimit_client.contrib.fastapi import install, limit

    app = FastAPI()
    limiter = RateLimiter(aredis.Redis(port=module_server.port), [policy("open")])
    install(app, limiter)

    @app.get("/", dependencies=[Depends(limit("api", key=lambda request: "k", cost=2**64))])
    async def root() -> str:
        return "admitted"

    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/").status_code == 500

    import flask

    from redis_ratelimit_client.contrib.flask import RateLimit

    flask_app = flask.Flask("invalid")
    sync_limiter = SyncRateLimiter(redis.Redis(port=module_server.port), [policy("open")])
    ratelimit = RateLimit(flask_app, sync_limiter)

    @flask_app.get("/")
    @ratelimit.limit("api", key=lambda request: BAD)
    def index() -> str:
        return "admitted"

    try:
        assert flask_app.test_client().get("/").status_code == 500
    finally:
        sync_limiter.close()
