"""The ``limits`` storage (``redis-ratelimit://``): ``limits``' own fixed and moving window
strategies on it, racing threads admitted exactly the limit, a refused hit not counted, and
slowapi (Starlette) changed only in its ``storage_uri``; on the module and the library."""

from __future__ import annotations

import concurrent.futures

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_ratelimit_client.contrib.limits_storage  # noqa: F401  (registers the scheme)
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


def test_slowapi_with_only_the_storage_uri_changed(module_server: Server) -> None:
    limiter = Limiter(key_func=get_remote_address, storage_uri=f"redis-ratelimit://127.0.0.1:{module_server.port}")
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/")
    @limiter.limit("3/minute")
    async def root(request: Request) -> dict[str, str]:
        return {"ok": "yes"}

    with TestClient(app) as client:
        codes = [client.get("/").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    keys = module_server.client().keys("LIMITER*")
    assert keys and module_server.client().type(keys[0]) == b"ratelimit", "decided by the module's RL.FIXED"
