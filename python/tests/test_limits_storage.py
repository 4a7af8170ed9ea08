"""The ``limits`` storages (``redis-ratelimit://``, ``async+redis-ratelimit://``): ``limits``'
own fixed and moving window strategies on them, racing threads admitted exactly the limit, a
refused hit not counted, slowapi (Starlette) changed only in its ``storage_uri``, on the
module and the library; a SIGSTOPped server holds no call past the timeout, and each failure
mode answers as documented; ``reset()`` clears every ``limits`` namespace under the key
prefix and nothing else."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from limits import RateLimitItemPerDay, parse
from limits.aio.strategies import FixedWindowRateLimiter as AsyncFixedWindowRateLimiter
from limits.aio.strategies import MovingWindowRateLimiter as AsyncMovingWindowRateLimiter
from limits.errors import ConfigurationError, StorageError
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_ratelimit_client.contrib.limits_storage  # noqa: F401  (registers the scheme)
from polling import wait_for
from servers import Server


@pytest.mark.parametrize("strategy", [FixedWindowRateLimiter, MovingWindowRateLimiter])
def test_limits_strategies(backend_server: tuple[str, Server], strategy: type) -> None:
    backend, server = backend_server
    storage = storage_from_string(f"redis-ratelimit://127.0.0.1:{server.port}/0")
    assert storage.check()
    limiter = strategy(storage)
    item = parse("5/minute")
    assert [limiter.hit(item, "alice") for _ in range(7)] == [True] * 5 + [False] * 2
    assert not limiter.test(item, "alice")
    assert limiter.test(item, "bob")
    stats = limiter.get_window_stats(item, "alice")
    assert stats.remaining == 0
    assert limiter.get_window_stats(item, "bob").remaining == 5
    assert limiter.hit(item, "bob", cost=5) and not limiter.hit(item, "bob")
    assert storage.store.backend == backend
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        hits = list(pool.map(lambda _: limiter.hit(parse("10/hour"), "race"), range(200)))
    assert sum(hits) == 10
    # A refused hit is not counted: the window holds exactly the limit.
    assert limiter.get_window_stats(parse("10/hour"), "race").remaining == 0
    storage.reset()
    assert limiter.get_window_stats(item, "alice").remaining == 5


def slowapi_app(limiter: Limiter) -> FastAPI:
    """A FastAPI app whose one route slowapi limits to 3 a minute through ``limiter``."""
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/")
    @limiter.limit("3/minute")
    async def root(request: Request) -> dict[str, str]:
        return {"ok": "yes"}

    return app


def test_slowapi_with_only_the_storage_uri_changed(module_server: Server) -> None:
    limiter = Limiter(key_func=get_remote_address, storage_uri=f"redis-ratelimit://127.0.0.1:{module_server.port}")
    app = slowapi_app(limiter)
    with TestClient(app) as client:
        codes = [client.get("/").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    keys = module_server.client().keys("LIMITS:LIMITER*")
    assert keys and module_server.client().type(keys[0]) == b"ratelimit", "decided by the module's RL.FIXED"


@pytest.mark.parametrize("strategy", [AsyncFixedWindowRateLimiter, AsyncMovingWindowRateLimiter])
def test_async_storage_with_limits_strategies(backend_server: tuple[str, Server], strategy: type) -> None:
    backend, server = backend_server

    async def run() -> None:
        storage = storage_from_string(f"async+redis-ratelimit://127.0.0.1:{server.port}/0")
        assert await storage.check()
        limiter = strategy(storage)
        item = parse("5/minute")
        assert [await limiter.hit(item, "alice") for _ in range(7)] == [True] * 5 + [False] * 2
        assert not await limiter.test(item, "alice")
        assert (await limiter.get_window_stats(item, "alice")).remaining == 0
        assert (await limiter.get_window_stats(item, "bob")).remaining == 5
        hits = await asyncio.gather(*(limiter.hit(parse("10/hour"), "race") for _ in range(200)))
        assert sum(hits) == 10
        assert (await limiter.get_window_stats(parse("10/hour"), "race")).remaining == 0
        assert storage.store.backend == backend
        # alice's per-minute window may have ended (its key expired) since: race's per-hour one is there.
        assert await storage.reset() in (1, 2), "alice's and race's windows (a peek writes nothing)"
        assert (await limiter.get_window_stats(item, "alice")).remaining == 5

    asyncio.run(run())


#: Slack over the timeout for one call to a stopped server, for a loaded machine: never a
#: retry's second timeout, nor the stop's whole length.
SLACK_S = 0.5
#: Timeouts shorter than the default (1 s) keep the tests fast: the one raising, the one for
#: the failure modes' answers (the default's hold is measured by bench/limits_storage_latency.py).
TIMEOUT_MS, SHORT_TIMEOUT_MS = 300, 100


def _bounded(pool: concurrent.futures.ThreadPoolExecutor, call: Callable[[], Any]) -> tuple[Any, float]:
    """Runs ``call`` on the pool; its outcome (or raised error) and how long it took, failing
    the test if it is held for seconds (the server stays stopped until the test resumes it)."""
    started = time.monotonic()
    future = pool.submit(call)
    try:
        outcome = future.result(timeout=5)
    except concurrent.futures.TimeoutError:
        pytest.fail("a call to a stopped server was held past 5 s")
    except Exception as error:  # the failure mode's raise, returned to be asserted
        outcome = error
    return outcome, time.monotonic() - started


def test_a_stopped_server_holds_no_call_past_the_timeout(module_server: Server) -> None:
    base = f"redis-ratelimit://127.0.0.1:{module_server.port}/0"
    error_mode = storage_from_string(f"{base}?timeout_ms={TIMEOUT_MS}", wrap_exceptions=True)
    opened = storage_from_string(f"{base}?failure=open&timeout_ms={SHORT_TIMEOUT_MS}")
    closed = storage_from_string(f"{base}?failure=closed&timeout_ms={SHORT_TIMEOUT_MS}")
    item = parse("5/minute")
    for storage in (error_mode, opened, closed):
        assert FixedWindowRateLimiter(storage).hit(item, "warm")  # connected before the stop
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        module_server.pause()
        try:
            fixed = FixedWindowRateLimiter(error_mode)
            moving = MovingWindowRateLimiter(error_mode)
            answers = [_bounded(pool, functools.partial(fixed.hit, item, "k")) for _ in range(5)]
            answers += [_bounded(pool, functools.partial(moving.hit, item, "k")) for _ in range(2)]
            answers += [_bounded(pool, functools.partial(fixed.test, item, "k"))]
            for outcome, took in answers:
                assert isinstance(outcome, StorageError), f"failure=error raises, got {outcome!r}"
                assert took < TIMEOUT_MS / 1000 + SLACK_S, f"a call held {took:.3f} s"
            # Three unanswered calls opened the circuit: the next ones do not wait at all.
            assert max(took for _, took in answers[3:]) < SLACK_S
            short = SHORT_TIMEOUT_MS / 1000
            for storage, admitted in ((opened, True), (closed, False)):
                for strategy in (FixedWindowRateLimiter, MovingWindowRateLimiter):
                    limiter = strategy(storage)
                    for call in (limiter.hit, limiter.test):
                        outcome, took = _bounded(pool, functools.partial(call, item, "k"))
                        assert outcome is admitted, f"failure={'open' if admitted else 'closed'}: {outcome!r}"
                        assert took < short + SLACK_S, f"a call held {took:.3f} s"
                    stats, _ = _bounded(pool, functools.partial(limiter.get_window_stats, item, "k"))
                    assert stats.remaining == (5 if admitted else 0)
        finally:
            module_server.resume()
    limiter = FixedWindowRateLimiter(error_mode)

    def hit_answered() -> bool:
        try:
            limiter.hit(item, "after")
        except StorageError:
            return False
        return True

    # The circuit lets a probe through within 0.5 s.
    wait_for(hit_answered, "the storage to answer again after the server resumed")
    assert limiter.get_window_stats(item, "after").remaining == 4


def test_async_storage_on_a_stopped_server(module_server: Server) -> None:
    async def run() -> None:
        uri = f"async+redis-ratelimit://127.0.0.1:{module_server.port}/0?failure=closed&timeout_ms={SHORT_TIMEOUT_MS}"
        storage = storage_from_string(uri)
        limiter = AsyncFixedWindowRateLimiter(storage)
        item = parse("5/minute")
        assert await limiter.hit(item, "warm")
        module_server.pause()
        try:
            for _ in range(5):
                started = time.monotonic()
                admitted = await asyncio.wait_for(limiter.hit(item, "k"), 5)
                took = time.monotonic() - started
                assert admitted is False and took < SHORT_TIMEOUT_MS / 1000 + SLACK_S, (admitted, took)
        finally:
            module_server.resume()

    asyncio.run(run())


def test_reset_clears_every_limits_namespace_under_the_prefix_and_nothing_else(module_server: Server) -> None:
    base = f"redis-ratelimit://127.0.0.1:{module_server.port}/0"
    storage = storage_from_string(base)
    team_b = storage_from_string(f"{base}?key_prefix=team-b")
    # Day windows (aligned to the epoch): none ends during the test but at midnight UTC.
    default_namespace, other_namespace = parse("10/day"), RateLimitItemPerDay(10, namespace="OTHER")
    for index in range(10):
        storage.incr(default_namespace.key_for(str(index)), default_namespace.get_expiry())
        storage.incr(other_namespace.key_for(str(index)), other_namespace.get_expiry())
    assert team_b.incr(default_namespace.key_for("b"), default_namespace.get_expiry()) == 1
    client = module_server.client()
    client.set("LIMITER/not-ours", 1)
    client.set("app:session", 1)
    assert storage.reset() == 20, "both namespaces of limits, under the prefix"
    assert client.exists("LIMITER/not-ours", "app:session") == 2, "keys outside the prefix survive"
    assert team_b.get(default_namespace.key_for("b")) == 1, "another prefix's keys survive"
    assert storage.get(default_namespace.key_for("0")) == 0


@pytest.mark.parametrize(
    ("uri_tail", "options", "named"),
    [
        ("?failure=maybe", {}, "failure"),
        ("?timeout_ms=0", {}, "timeout_ms"),
        ("?timeout_ms=fast", {}, "timeout_ms"),
        ("?key_prefix=", {}, "key_prefix"),
        ("?failure=open&failure=closed", {}, "failure"),
        ("", {"retry": None}, "retries"),
    ],
)
def test_bad_storage_settings_are_refused_by_name(uri_tail: str, options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        storage_from_string(f"redis-ratelimit://127.0.0.1:1/0{uri_tail}", **options)


def test_slowapi_falls_back_to_memory_within_the_timeout_while_the_server_is_stopped(module_server: Server) -> None:
    limiter = Limiter(
        key_func=get_remote_address,
        storage_uri=f"redis-ratelimit://127.0.0.1:{module_server.port}?timeout_ms={TIMEOUT_MS}",
        in_memory_fallback=["2/minute"],
    )
    app = slowapi_app(limiter)
    with TestClient(app) as client, concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert client.get("/").status_code == 200  # connected before the stop
        module_server.pause()
        try:
            answers = [_bounded(pool, functools.partial(client.get, "/")) for _ in range(3)]
        finally:
            module_server.resume()
    # slowapi's first request after the stop waits for its hit, then for storage.check().
    for _, took in answers:
        assert took < 2 * TIMEOUT_MS / 1000 + SLACK_S, f"a request held {took:.3f} s"
    assert [answer.status_code for answer, _ in answers] == [200, 200, 429], "slowapi's in-memory fallback decided"
