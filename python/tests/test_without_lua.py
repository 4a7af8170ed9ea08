"""A Valkey 9.1 without its Lua engine (its ``lua`` module unloaded) and without the module:
the backend probe answers with one line (the limiter's warning, as it falls back) naming
both and what to do, for the automatic
choice and for the Functions and scripts backends asked for by name, instead of the
server's ``Engine 'lua' not found``."""

from __future__ import annotations

import logging

import pytest
import redis

from redis_ratelimit_client import Limit, Policy, SyncRateLimiter
from servers import valkey_without_lua

POLICY = Policy("tb", [Limit.token_bucket("bucket", 5, refill=10, key="tb:{key}")], timeout=2)


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (
            "auto",
            "no rate-limit backend on this server: the ratelimit module is not loaded and the server has no Lua engine",
        ),
        ("functions", "the functions backend runs Lua and this server has no Lua engine"),
        ("scripts", "the scripts backend runs Lua and this server has no Lua engine"),
    ],
)
def test_a_valkey_without_the_module_or_lua_gets_one_line_naming_both(
    backend: str, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = valkey_without_lua()
    try:
        limiter = SyncRateLimiter(redis.Redis(port=server.port), [POLICY], backend=backend)
        with caplog.at_level(logging.WARNING, logger="redis_ratelimit_client"):
            decision = limiter.check("tb", key="x")
        assert decision.source == "fallback", decision
        lines = [record.getMessage() for record in caplog.records if expected in record.getMessage()]
        assert lines, caplog.text
        for line in lines:
            assert "load the ratelimit module" in line or "load the module" in line, line
            assert "\n" not in line and not line.endswith("..."), line
        limiter.close()
    finally:
        server.stop()
