"""Each adapter through its framework's own test client: 429 with ``Retry-After``, the IETF
fields and a problem+json body, the fields on admitted responses, a key function,
exemptions, per-route policies, in-flight slots released, 503 when failing closed, 500 for a
misconfigured check; on a real server with the module."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis
import redis.asyncio as aredis

from django_setup import django_settings
from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from servers import Server

# A 0.5 s timeout: this shared machine runs at a load of 5-10, and these tests are about the
# answers, not the latency (test_outage.py is).
POLICIES = [
    Policy("api", [Limit.token_bucket("per-key", 3, refill=60, key="api:{{{key}}}")], timeout=0.5),
    Policy("search", [Limit.fixed_window("per-tenant", 2, 3600, key="search:{key}")], timeout=0.5),
    Policy("uploads", [Limit.concurrency("in-flight", 1, 30, key="uploads:{key}")], timeout=0.5),
    Policy("closed", [Limit.token_bucket("per-key", 3, refill=60, key="closed:{key}")], fallback="closed", timeout=0.5),
]


def assert_refusal(status: int, headers: Any, body: bytes, limit: str) -> None:
    assert status == 429
    assert headers["content-type"] == "application/problem+json"
    assert int(headers["retry-after"]) >= 1
    assert headers["ratelimit-policy"].startswith(f'"{limit}";q=')
    assert headers["ratelimit"].startswith(f'"{limit}";r=0')
    problem = json.loads(body)
    assert problem["type"].endswith("#quota-exceeded")
    assert problem["status"] == 429
    assert problem["violated-policies"] == [limit]


def test_starlette_middleware_and_fastapi_dependency(module_server: Server) -> None:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from redis_ratelimit_client.contrib.asgi import RateLimitMiddleware, header
    from redis_ratelimit_client.contrib.fastapi import install, limit

    app = FastAPI()
    limiter = RateLimiter(aredis.Redis(port=module_server.port), POLICIES)
    install(app, limiter)
    app.add_middleware(
        RateLimitMiddleware,
        limiter=limiter,
        policy="api",
        key=lambda scope: header(scope, "x-api-key") or "anonymous",
        routes={"/search": "search", "/typo": "no-such-policy"},
        exempt=["/healthz", "/uploads", "/closed"],
    )

    @app.get("/")
    async def root() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/search")
    async def search() -> list[str]:
        return []

    @app.get("/typo")
    async def typo() -> str:
        return "never"

    @app.get("/healthz")
    async def healthz() -> str:
        return "ok"

    seen_in_flight: list[int] = []

    @app.post("/uploads")
    async def upload(
        decision: Any = Depends(limit("uploads", key=lambda r: r.headers.get("x-api-key", "-"))),
    ) -> dict[str, Any]:
        seen_in_flight.append(decision.limits[0].remaining)
        return {"remaining": decision.remaining}

    @app.get("/closed")
    async def closed(decision: Any = Depends(limit("closed", key=lambda r: r.headers.get("x-api-key", "-")))) -> str:
        return "admitted"

    with TestClient(app) as client:
        answers = [client.get("/", headers={"x-api-key": "alice"}) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert answers[0].headers["ratelimit"] == '"per-key";r=2;t=20'
        assert answers[0].headers["ratelimit-policy"] == '"per-key";q=3;w=60'
        assert_refusal(answers[3].status_code, answers[3].headers, answers[3].content, "per-key")
        assert client.get("/", headers={"x-api-key": "bob"}).status_code == 200, "a key of its own"
        assert [client.get("/healthz").status_code for _ in range(5)] == [200] * 5, "exempt"
        routed = [client.get("/search", headers={"x-api-key": "t1"}).status_code for _ in range(3)]
        assert routed == [200, 200, 429], "the route's own policy"
        assert client.get("/typo").status_code == 500, "a misconfigured policy is a 500, not a pass"
        uploads = [client.post("/uploads", headers={"x-api-key": "u"}) for _ in range(3)]
        assert [u.status_code for u in uploads] == [200, 200, 200], "the slot is released after each"
        assert seen_in_flight == [0, 0, 0]
        assert uploads[0].headers["ratelimit-policy"] == '"in-flight";q=1;qu="concurrent-requests"'
        dependency = [client.get("/closed") for _ in range(4)]
        assert [d.status_code for d in dependency] == [200, 200, 200, 429]
        assert_refusal(dependency[3].status_code, dependency[3].headers, dependency[3].content, "per-key")
        module_server.pause()
        try:
            refused = client.get("/closed", headers={"x-api-key": "new"})
        finally:
            module_server.resume()
        assert refused.status_code == 503
        assert refused.json()["type"].endswith("#temporary-reduced-capacity")
        assert "ratelimit" not in refused.headers and int(refused.headers["retry-after"]) >= 1


def test_flask_extension_and_decorator(module_server: Server) -> None:
    import flask

    from redis_ratelimit_client.contrib.flask import RateLimit

    app = flask.Flask(__name__)
    ratelimit = RateLimit(
        app,
        SyncRateLimiter(redis.Redis(port=module_server.port), POLICIES),
        default="api",
        key=lambda request: request.headers.get("x-api-key", "anonymous"),
        exempt=["/healthz"],
    )

    @app.get("/")
    def root() -> str:
        return "hello"

    @app.get("/search")
    @ratelimit.exempt
    @ratelimit.limit("search", key=lambda request: request.args.get("tenant", "-"))
    def search() -> str:
        return "results"

    @app.get("/healthz")
    def healthz() -> str:
        return "ok"

    @app.post("/upload")
    @ratelimit.exempt
    @ratelimit.limit("uploads", key=lambda request: "shared")
    def upload() -> str:
        return "stored"

    client = app.test_client()
    answers = [client.get("/", headers={"x-api-key": "fa"}) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[1].headers["ratelimit"] == '"per-key";r=1;t=20'
    assert_refusal(answers[3].status_code, answers[3].headers, answers[3].data, "per-key")
    assert [client.get("/healthz").status_code for _ in range(5)] == [200] * 5
    searches = [client.get("/search?tenant=t").status_code for _ in range(3)]
    assert searches == [200, 200, 429], "the view's own policy, the default exempted"
    assert [client.post("/upload").status_code for _ in range(3)] == [200] * 3, "the slot is released"


def test_django_middleware_and_decorator_on_sync_and_async_views(module_server: Server) -> None:
    overrides = django_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["redis_ratelimit_client.contrib.django.RateLimitMiddleware"],
        REDIS_RATELIMIT={
            "LIMITER": lambda: SyncRateLimiter(redis.Redis(port=module_server.port), POLICIES),
            "ASYNC_LIMITER": lambda: RateLimiter(aredis.Redis(port=module_server.port), POLICIES),
            "POLICY": "api",
            "KEY": lambda request: request.headers.get("x-api-key", "anonymous"),
            "ROUTES": {"/search": "search"},
            "EXEMPT": ["/healthz", "/async-only", "/sync-only"],
        },
    )
    from django.test import AsyncClient, Client

    from redis_ratelimit_client.contrib import django as adapter

    with overrides:
        adapter.reset()
        c = Client()
        answers = [c.get("/sync", headers={"x-api-key": "dj"}) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert answers[0]["ratelimit"] == '"per-key";r=2;t=20'
        assert_refusal(answers[3].status_code, answers[3], answers[3].content, "per-key")
        assert [c.get("/healthz").status_code for _ in range(5)] == [200] * 5
        assert [c.get("/search/x", headers={"x-api-key": "t"}).status_code for _ in range(3)] == [200, 200, 429]
        only = [c.get("/sync-only") for _ in range(3)]
        assert [o.status_code for o in only] == [200, 200, 429], (only[0].content, dict(only[0].items()))

        async def asynchronous() -> list[Any]:
            client = AsyncClient()
            out = [await client.get("/async-only") for _ in range(3)]
            out += [await client.get("/async", headers={"x-api-key": "dja"}) for _ in range(4)]
            return out

        results = asyncio.run(asynchronous())
        assert [r.status_code for r in results[:3]] == [200, 200, 429], "the decorator, async"
        assert [r.status_code for r in results[3:]] == [200, 200, 200, 429], "the middleware, async"
        assert_refusal(results[6].status_code, results[6], results[6].content, "per-key")
        adapter.reset()


# Django's URLs for the test above.
def _urls() -> list[Any]:
    try:
        from django.http import HttpResponse
        from django.urls import path
    except ImportError:  # pragma: no cover
        return []
    from redis_ratelimit_client.contrib.django import ratelimit

    def sync_view(request: Any) -> Any:
        return HttpResponse("sync")

    async def async_view(request: Any) -> Any:
        return HttpResponse("async")

    @ratelimit("search", key=lambda request: "sync-only")
    def sync_only(request: Any) -> Any:
        return HttpResponse("sync-only")

    @ratelimit("search", key=lambda request: "async-only")
    async def async_only(request: Any) -> Any:
        return HttpResponse("async-only")

    return [
        path("sync", sync_view),
        path("async", async_view),
        path("healthz", sync_view),
        path("search/x", sync_view),
        path("sync-only", sync_only),
        path("async-only", async_only),
    ]


urlpatterns = _urls()
