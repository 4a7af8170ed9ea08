"""A key function answering ``None`` lets the request through unchecked in every adapter
(FastAPI counted it as the key ``None``, and so did Django's decorator): nothing is charged,
no key is written, no field is set; through each framework's own test client."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio as aredis

from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from servers import Server

POLICIES = [Policy("api", [Limit.token_bucket("per-key", 3, refill=60, key="unkeyed:{{{key}}}")], timeout=2)]
TIMES = 5


def nothing_written(server: Server) -> None:
    assert server.client().keys("*") == [], "a request without a key was charged"


def test_fastapi_and_asgi_skip_a_request_without_a_key(module_server: Server) -> None:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from redis_ratelimit_client.contrib.asgi import RateLimitMiddleware
    from redis_ratelimit_client.contrib.fastapi import install, limit

    app = FastAPI()
    limiter = RateLimiter(aredis.Redis(port=module_server.port), POLICIES)
    install(app, limiter)
    app.add_middleware(RateLimitMiddleware, limiter=limiter, policy="api", key=lambda scope: None)

    @app.get("/", dependencies=[Depends(limit("api", key=lambda request: None))])
    async def root() -> str:
        return "ok"

    with TestClient(app) as client:
        answers = [client.get("/") for _ in range(TIMES)]
    assert [answer.status_code for answer in answers] == [200] * TIMES
    assert all("ratelimit" not in answer.headers for answer in answers)
    nothing_written(module_server)


def test_flask_skips_a_request_without_a_key(module_server: Server) -> None:
    import flask

    from redis_ratelimit_client.contrib.flask import RateLimit

    app = flask.Flask("unkeyed")
    limiter = SyncRateLimiter(redis.Redis(port=module_server.port), POLICIES)
    ratelimit = RateLimit(app, limiter, default="api", key=lambda request: None)

    @app.get("/")
    @ratelimit.limit("api", key=lambda request: None)
    def index() -> str:
        return "ok"

    try:
        client = app.test_client()
        assert [client.get("/").status_code for _ in range(TIMES)] == [200] * TIMES
    finally:
        limiter.close()
    nothing_written(module_server)


def test_django_skips_a_request_without_a_key(module_server: Server) -> None:
    import django
    from django.conf import settings
    from django.test import AsyncClient, Client, override_settings

    from redis_ratelimit_client.contrib import django as adapter

    if not settings.configured:
        settings.configure(DEBUG=False, SECRET_KEY="test", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__)
        django.setup()
    port = module_server.port
    configuration = {
        "LIMITER": lambda: SyncRateLimiter(redis.Redis(port=port), POLICIES),
        "ASYNC_LIMITER": lambda: RateLimiter(aredis.Redis(port=port), POLICIES),
        "POLICY": "api",
        "KEY": lambda request: None,
    }
    with override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["redis_ratelimit_client.contrib.django.RateLimitMiddleware"],
        REDIS_RATELIMIT=configuration,
    ):
        adapter.reset()
        try:
            client = Client()
            assert [client.get("/unkeyed-sync").status_code for _ in range(TIMES)] == [200] * TIMES

            async def asynchronous() -> list[int]:
                client = AsyncClient()
                return [(await client.get("/unkeyed-async")).status_code for _ in range(TIMES)]

            assert asyncio.run(asynchronous()) == [200] * TIMES
        finally:
            adapter.reset()
    nothing_written(module_server)


def _urls() -> list[Any]:
    try:
        from django.http import HttpResponse
        from django.urls import path
    except ImportError:  # pragma: no cover
        return []
    from redis_ratelimit_client.contrib.django import ratelimit

    @ratelimit("api", key=lambda request: None)
    def sync_view(request: Any) -> Any:
        return HttpResponse("sync")

    @ratelimit("api", key=lambda request: None)
    async def async_view(request: Any) -> Any:
        return HttpResponse("async")

    return [path("unkeyed-sync", sync_view), path("unkeyed-async", async_view)]


urlpatterns = _urls()
