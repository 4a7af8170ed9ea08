"""An ACL that refuses this user the module's commands is named at ``connect()`` (it said
``module``, and every check then went to the fallback): every command refused is a
configuration error naming them; some refused, a warning naming those."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis
import redis.asyncio as aredis

from redis_ratelimit_client import Limit, Policy, RateLimiter, StoreError, SyncRateLimiter
from servers import Server

COMMANDS = [
    "rl.tokenbucket",
    "rl.sliding",
    "rl.fixed",
    "rl.slidinglog",
    "cl.throttle",
    "rl.multi",
    "rl.acquire",
    "rl.release",
    "rl.peek",
    "rl.refund",
]
POLICIES = [Policy("api", [Limit.fixed_window("per-key", 10, 60, key="acl:{key}")], timeout=5)]


def test_an_acl_refusing_every_command_is_named(module_server: Server) -> None:
    admin = module_server.client()
    admin.execute_command("ACL", "SETUSER", "limited", "on", ">secret", "~*", "+@all", *(f"-{c}" for c in COMMANDS))

    async def scenario() -> None:
        limiter = RateLimiter(aredis.Redis(port=module_server.port, username="limited", password="secret"), POLICIES)
        with pytest.raises(StoreError) as raised:
            await limiter.connect()
        assert raised.value.kind == "config"
        assert "ACL refuses this user" in str(raised.value)
        assert "RL.TOKENBUCKET" in str(raised.value) and "RL.MULTI" in str(raised.value)

    asyncio.run(scenario())
    limiter = SyncRateLimiter(redis.Redis(port=module_server.port, username="limited", password="secret"), POLICIES)
    try:
        with pytest.raises(StoreError, match="ACL refuses this user"):
            limiter.connect()
    finally:
        limiter.close()


def test_an_acl_refusing_some_commands_is_logged(module_server: Server, caplog: pytest.LogCaptureFixture) -> None:
    admin = module_server.client()
    admin.execute_command("ACL", "SETUSER", "some", "on", ">secret", "~*", "+@all", "-rl.multi", "-rl.refund")
    limiter = SyncRateLimiter(redis.Redis(port=module_server.port, username="some", password="secret"), POLICIES)
    try:
        with caplog.at_level(logging.WARNING, logger="redis_ratelimit_client"):
            assert limiter.connect() == "module"
        assert "refuses this user RL.MULTI, RL.REFUND" in caplog.text
        assert limiter.check("api", key="a").source == "store"
    finally:
        limiter.close()
