"""The Python client answers as the Rust client does: the Rust client's demo service
(``client/examples/demo-service.rs``, its tower layer) and the ASGI middleware with the same
policy, each in front of its own server on the same set clock, get the same requests; the
status, ``RateLimit``, ``RateLimit-Policy``, ``Retry-After`` and problem+json bodies must be
identical, on each backend, with and without leases."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aredis

from redis_ratelimit_client import Lease, Limit, Policy, RateLimiter
from redis_ratelimit_client.contrib.asgi import RateLimitMiddleware, header
from servers import REPOSITORY, start

T0_US = 1_767_225_600_000_000
DEMO = Path(os.environ.get("RL_DEMO_SERVICE", REPOSITORY / "target" / "debug" / "examples" / "demo-service"))
FIELDS = ("ratelimit", "ratelimit-policy", "retry-after", "content-type")


async def ok_app(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain; charset=utf-8")]}
    )  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok\n"})  # type: ignore[operator]


def start_demo(port: int, lease: int | None, backend: str) -> tuple[subprocess.Popen[str], str]:
    if not DEMO.is_file():
        pytest.fail(f"{DEMO} is missing: make python-test builds it (cargo build -p redis-ratelimit-client --examples)")
    command = [
        str(DEMO),
        "--redis",
        f"redis://127.0.0.1:{port}/",
        "--listen",
        "127.0.0.1:0",
        "--limit",
        "5",
        "--window",
        "60",
        "--timeout-ms",
        "2000",
        "--backend",
        backend,
    ]
    if lease is not None:
        command += ["--lease", str(lease)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        pytest.fail(f"demo-service did not start: {line!r}")
    return process, "http://" + line.split()[-1]


async def responses(base: str | None, app: object, keys: list[str], set_clock: object) -> list[tuple[object, ...]]:
    if base is not None:
        client = httpx.AsyncClient(base_url=base)
    else:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")  # type: ignore[arg-type]
    seen = []
    now = T0_US
    async with client:
        for index, key in enumerate(keys):
            now += 250_000
            set_clock(now)  # type: ignore[operator]
            response = await client.get("/", headers={"x-api-key": key})
            fields = tuple(response.headers.get(name) for name in FIELDS)
            seen.append((index, key, response.status_code, fields, response.content))
    return seen


@pytest.mark.parametrize("backend", ["module", "functions", "scripts"])
@pytest.mark.parametrize("lease", [None, 3])
def test_the_same_answers_as_the_rust_client(backend: str, lease: int | None) -> None:
    keys = ["alice"] * 8 + ["bob"] * 3 + ["alice"] * 2 + ["anonymous"] * 7
    rust_server = start(backend, clock_us=T0_US)
    python_server = start(backend, clock_us=T0_US)
    demo = None
    try:
        demo, base = start_demo(rust_server.port, lease, backend)
        policy = Policy(
            "demo",
            [Limit.token_bucket("per-key", 5, refill=60, key="demo:{{{api_key}}}")],
            lease=None if lease is None else Lease(lease),
            timeout=2,
        )

        async def python_side() -> list[tuple[object, ...]]:
            limiter = RateLimiter(aredis.Redis(port=python_server.port), [policy])
            await limiter.connect()  # as the demo service connects at start
            app = RateLimitMiddleware(
                ok_app,
                limiter,
                policy="demo",
                input_name="api_key",
                key=lambda scope: header(scope, "x-api-key") or "anonymous",
            )
            return await responses(None, app, keys, python_server.set_clock)

        rust = asyncio.run(responses(base, None, keys, rust_server.set_clock))
        python = asyncio.run(python_side())
        if os.environ.get("RL_SHOW"):
            for ours, theirs in zip(python, rust, strict=True):
                print(ours[:4], theirs[2:4])
        for ours, theirs in zip(python, rust, strict=True):
            assert ours == theirs, f"Python {ours} != Rust {theirs}"
        assert {row[2] for row in rust} == {200, 429}
    finally:
        if demo is not None:
            demo.kill()
            demo.wait()
        rust_server.stop()
        python_server.stop()
