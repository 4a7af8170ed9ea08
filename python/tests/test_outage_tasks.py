"""An outage leaves no task whose exception nobody reads: asyncio's "Task exception was
never retrieved" (logged when such a task is collected) never appears, through the loop's
exception handler and the log, even when the callers give up on their checks (a client that
went away, a ``wait_for`` of their own) while the store calls go on and fail."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from typing import Any

import pytest
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from redis_ratelimit_client import Lease, Limit, Policy, RateLimiter
from servers import Server

POLICIES = [
    Policy("api", [Limit.token_bucket("per-key", 100, refill=60, key="t:{key}")], timeout=1.0),
    Policy("leased", [Limit.token_bucket("per-key", 100, refill=60, key="tl:{key}")], lease=Lease(5), timeout=1.0),
]


def store_calls() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() if "acquire" in task.get_coro().__qualname__]  # type: ignore[union-attr]


def test_an_outage_leaves_no_unretrieved_task_exception(
    module_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    reported: list[dict[str, Any]] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))
        # A store that stopped answering: its reads fail after 0.1 s (connecting is not
        # retried, so that the calls end within the test's time).
        client = aredis.Redis(port=module_server.port, socket_timeout=0.1, retry=Retry(NoBackoff(), 0))
        limiter = RateLimiter(client, POLICIES)
        assert await limiter.connect() == "module"
        module_server.pause()
        try:
            for policy in ("api", "leased"):
                for index in range(5):
                    # The caller gives up first (its own deadline, a client gone away).
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(limiter.check(policy, key=f"k{index}"), 0.01)
            deadline = time.monotonic() + 10
            while store_calls():
                assert time.monotonic() < deadline, "the store calls never ended"
                await asyncio.sleep(0.02)
        finally:
            module_server.resume()
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        await limiter.aclose()

    asyncio.run(scenario())
    gc.collect()
    messages = [str(context.get("message")) for context in reported]
    assert not [message for message in messages if "never retrieved" in message], messages
    assert "never retrieved" not in caplog.text
