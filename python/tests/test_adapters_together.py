"""A default policy and a view's own, all or nothing, in every adapter through its
framework's own test client, on a real server with the module (issue 36, item 3): searches
the view's policy refuses spend nothing of the default policy (they never lock the user out
of ``/items``), and the 429's ``RateLimit``, ``RateLimit-Policy`` and ``Retry-After`` all
describe the limit that refused it."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import redis
import redis.asyncio as aredis

from django_setup import django_settings
from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from servers import Server

DEFAULT_QUOTA, SEARCH_QUOTA, WINDOW_S = 6, 3, 86_400  # a day: no window ends during a test (but at midnight UTC)
POLICIES = [
    Policy("api", [Limit.fixed_window("per-key", DEFAULT_QUOTA, WINDOW_S, key="api:{key}")], timeout=0.5),
    Policy("search", [Limit.fixed_window("searches", SEARCH_QUOTA, WINDOW_S, key="search:{key}")], timeout=0.5),
    Policy("uploads", [Limit.concurrency("in-flight", 1, 30, key="uploads:{key}")], timeout=0.5),
]
SEARCHES = 10


def assert_refused_by_searches(status: int, headers: Any) -> None:
    """A 429 of the search policy: every field about that limit alone, and they agree."""
    assert status == 429
    assert headers["ratelimit-policy"] == f'"searches";q={SEARCH_QUOTA};w={WINDOW_S}'
    service = re.fullmatch(r'"searches";r=0;t=(\d+)', headers["ratelimit"])
    assert service is not None, f"RateLimit names another limit than the refusing one: {headers['ratelimit']}"
    assert int(service[1]) == int(headers["retry-after"]), "RateLimit's t and Retry-After disagree"


def assert_scenario(searches: list[tuple[int, Any]], items: list[int]) -> None:
    served = SEARCH_QUOTA
    assert [status for status, _ in searches] == [200] * served + [429] * (SEARCHES - served)
    # Only the served searches spent the default policy.
    assert items == [200] * (DEFAULT_QUOTA - served) + [429], "refused searches spent the default policy"
    for status, headers in searches[served:]:
        assert_refused_by_searches(status, headers)
    admitted = searches[0][1]["ratelimit"]
    assert re.fullmatch(r'"per-key";r=5;t=\d+, "searches";r=2;t=\d+', admitted) or re.fullmatch(
        r'"searches";r=2;t=\d+, "per-key";r=5;t=\d+', admitted
    ), f"an admitted search carries both policies' fields: {admitted}"


def test_flask_refused_searches_spend_nothing_of_the_default(module_server: Server) -> None:
    import flask

    from redis_ratelimit_client.contrib.flask import RateLimit

    app = flask.Flask(__name__)
    ratelimit = RateLimit(
        app,
        SyncRateLimiter(redis.Redis(port=module_server.port), POLICIES),
        default="api",
        key=lambda request: request.headers.get("x-user", "anonymous"),
    )

    @app.get("/items")
    def items_view() -> str:
        return "items"

    @app.get("/search")
    @ratelimit.limit("search", key=lambda request: request.headers.get("x-user", "anonymous"))
    def search() -> str:
        return "results"

    client = app.test_client()
    user = {"x-user": "ada"}
    searches = [client.get("/search", headers=user) for _ in range(SEARCHES)]
    items = [client.get("/items", headers=user).status_code for _ in range(DEFAULT_QUOTA - SEARCH_QUOTA + 1)]
    assert_scenario([(answer.status_code, answer.headers) for answer in searches], items)


def test_flask_refusal_releases_the_defaults_in_flight_slot(module_server: Server) -> None:
    import flask

    from redis_ratelimit_client.contrib.flask import RateLimit

    app = flask.Flask(__name__)
    ratelimit = RateLimit(
        app, SyncRateLimiter(redis.Redis(port=module_server.port), POLICIES), default="uploads", key=lambda r: "u"
    )

    @app.get("/search")
    @ratelimit.limit("search", key=lambda request: "one")
    def search() -> str:
        return "results"

    client = app.test_client()
    codes = [client.get("/search").status_code for _ in range(SEARCH_QUOTA + 2)]
    assert codes == [200] * SEARCH_QUOTA + [429, 429], "the default's one slot is free again after each"


def _fastapi_app(port: int) -> Any:
    """The scenario's FastAPI app: the ASGI middleware's default policy, a dependency's search
    policy. Made on the event loop that serves it (a ``redis.asyncio`` client is bound to it)."""
    from fastapi import Depends, FastAPI

    from redis_ratelimit_client.contrib.asgi import RateLimitMiddleware, header
    from redis_ratelimit_client.contrib.fastapi import install, limit

    app = FastAPI()
    limiter = RateLimiter(aredis.Redis(port=port), POLICIES)
    install(app, limiter)
    app.add_middleware(
        RateLimitMiddleware, limiter=limiter, policy="api", key=lambda scope: header(scope, "x-user") or "-"
    )

    @app.get("/items")
    async def items_view() -> str:
        return "items"

    @app.get("/search", dependencies=[Depends(limit("search", key=lambda r: r.headers.get("x-user", "-")))])
    async def search() -> str:
        return "results"

    return app


def test_asgi_middleware_and_fastapi_dependency_all_or_nothing(module_server: Server) -> None:
    from fastapi.testclient import TestClient

    user = {"x-user": "ada"}
    with TestClient(_fastapi_app(module_server.port)) as client:
        searches = [client.get("/search", headers=user) for _ in range(SEARCHES)]
        items = [client.get("/items", headers=user).status_code for _ in range(DEFAULT_QUOTA - SEARCH_QUOTA + 1)]
    for answer in searches:
        assert len(answer.headers.get_list("retry-after")) <= 1
    assert_scenario([(answer.status_code, answer.headers) for answer in searches], items)


def test_a_burst_of_refused_searches_gives_the_default_back_exactly_once(module_server: Server) -> None:
    crowd, burst = {"x-user": "crowd"}, 40

    async def run() -> tuple[list[int], list[int]]:
        transport = httpx.ASGITransport(app=_fastapi_app(module_server.port))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            searched = await asyncio.gather(*(client.get("/search", headers=crowd) for _ in range(burst)))
            listed = [(await client.get("/items", headers=crowd)).status_code for _ in range(DEFAULT_QUOTA)]
        return [answer.status_code for answer in searched], listed

    searched, listed = asyncio.run(run())
    # The search limit serves 3 of the 40; every refusal gives the default back exactly once
    # (a refund sent twice would leave /items more than 6 - 3, one lost fewer), and no
    # denial remembered while the burst held the default keeps /items refused.
    assert sorted(searched) == [200] * SEARCH_QUOTA + [429] * (burst - SEARCH_QUOTA)
    assert listed == [200] * (DEFAULT_QUOTA - SEARCH_QUOTA) + [429] * SEARCH_QUOTA


def test_django_middleware_and_decorator_all_or_nothing(module_server: Server) -> None:
    overrides = django_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["redis_ratelimit_client.contrib.django.RateLimitMiddleware"],
        REDIS_RATELIMIT={
            "LIMITER": lambda: SyncRateLimiter(redis.Redis(port=module_server.port), POLICIES),
            "ASYNC_LIMITER": lambda: RateLimiter(aredis.Redis(port=module_server.port), POLICIES),
            "POLICY": "api",
            "KEY": lambda request: request.headers.get("x-user", "anonymous"),
        },
    )
    from django.test import AsyncClient, Client

    from redis_ratelimit_client.contrib import django as adapter

    def sync_run(user: dict[str, str], path: str) -> tuple[list[tuple[int, Any]], list[int]]:
        client = Client()
        searches = [client.get(path, headers=user) for _ in range(SEARCHES)]
        items = [client.get("/items", headers=user).status_code for _ in range(DEFAULT_QUOTA - SEARCH_QUOTA + 1)]
        return [(answer.status_code, answer) for answer in searches], items

    async def async_run(user: dict[str, str], path: str) -> tuple[list[tuple[int, Any]], list[int]]:
        client = AsyncClient()
        searches = [await client.get(path, headers=user) for _ in range(SEARCHES)]
        items = [
            (await client.get("/items", headers=user)).status_code for _ in range(DEFAULT_QUOTA - SEARCH_QUOTA + 1)
        ]
        return [(answer.status_code, answer) for answer in searches], items

    with overrides:
        adapter.reset()
        try:
            assert_scenario(*sync_run({"x-user": "sync"}, "/search"))
            assert_scenario(*asyncio.run(async_run({"x-user": "async"}, "/async-search")))
            # An async middleware before a sync view: the view's refusal gives back, from
            # the view's thread, what the middleware's async limiter charged; and a sync
            # middleware before an async view, what the sync limiter charged.
            assert_scenario(*asyncio.run(async_run({"x-user": "mixed"}, "/search")))
            assert_scenario(*sync_run({"x-user": "mixed-too"}, "/async-search"))
        finally:
            adapter.reset()


def _urls() -> list[Any]:
    from django.http import HttpResponse
    from django.urls import path

    from redis_ratelimit_client.contrib.django import ratelimit

    def items(request: Any) -> Any:
        return HttpResponse("items")

    @ratelimit("search", key=lambda request: request.headers.get("x-user", "anonymous"))
    def search(request: Any) -> Any:
        return HttpResponse("results")

    @ratelimit("search", key=lambda request: request.headers.get("x-user", "anonymous"))
    async def async_search(request: Any) -> Any:
        return HttpResponse("results")

    return [path("items", items), path("search", search), path("async-search", async_search)]


urlpatterns = _urls()
