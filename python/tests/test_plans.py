"""Limits from the plans store, changed with the repository's ``rlctl``: a store-backed
policy applies its defaults until the store says otherwise, follows a plan move and an
override within a second (notified), and applies them to the tenant's existing state: a
raised limit gives the difference, never a fresh quota; the keys are the Rust client's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
import redis.asyncio as aredis

from redis_ratelimit_client import Limit, Policy, RateLimiter
from redis_ratelimit_client.plans import PlanSource
from servers import REPOSITORY, Server

RLCTL = Path(os.environ.get("RL_RLCTL", REPOSITORY / "target" / "debug" / "rlctl"))


def rlctl(server: Server, *args: str) -> None:
    if not RLCTL.is_file():
        pytest.fail(
            f"{RLCTL} is missing: make python-test builds it (cargo build -p redis-ratelimit-plans --bin rlctl)"
        )
    subprocess.run([str(RLCTL), "--redis", server.url, *args], check=True, capture_output=True, timeout=30)


def test_plans_and_overrides_apply_to_the_existing_state(module_server: Server) -> None:
    policy = Policy.from_store(
        "api", tenant="tenant", defaults=[Limit.sliding_window("per-minute", 100, 60, key="-")], timeout=2
    )

    async def scenario() -> dict[str, float]:
        client = aredis.Redis(port=module_server.port)
        plans = await PlanSource(client).start()
        limiter = RateLimiter(client, [policy], plans=plans)

        async def quota_seen(expected: int, since: float) -> float:
            deadline = since + 5
            while time.monotonic() < deadline:
                decision = await limiter.check("api", tenant="probe")
                if f"q={expected};" in decision.headers()["ratelimit-policy"]:
                    return time.monotonic() - since
                await asyncio.sleep(0.005)
            raise AssertionError(f"quota {expected} never seen")

        first = await limiter.check("api", tenant="acme")
        assert first.headers()["ratelimit-policy"] == '"per-minute";q=100;w=60', "the defaults apply"
        started = time.monotonic()
        rlctl(module_server, "plan", "set", "pro", "--limit", "per-minute=sliding:5/60s")
        rlctl(module_server, "tenant", "set", "probe", "--plan", "pro")
        rlctl(module_server, "tenant", "set", "acme", "--plan", "pro")
        moved = await quota_seen(5, started)
        admitted = [(await limiter.check("api", tenant="acme")).allowed for _ in range(6)]
        assert admitted == [True] * 4 + [False] * 2, "1 counted before, 4 more up to the plan's 5"
        started = time.monotonic()
        rlctl(module_server, "override", "set", "acme", "per-minute=sliding:8/60s")
        rlctl(module_server, "override", "set", "probe", "per-minute=sliding:8/60s")
        raised = await quota_seen(8, started)
        more = [(await limiter.check("api", tenant="acme")).allowed for _ in range(5)]
        assert more == [True] * 3 + [False] * 2, "a raised limit gives the difference, not a fresh quota"
        keys = sorted(key.decode() for key in await client.keys("rl:plan:*"))
        assert "rl:plan:{acme}:api:per-minute:sliding" in keys
        # One state per limit set (the defaults, the plan's, the override's), whichever tenant
        # resolved it first: the set is told by its limits' values, not by who asked.
        assert len(limiter._resolved) == 3, list(limiter._resolved)
        await plans.aclose()
        return {"plan_move_s": moved, "override_s": raised}

    figures = asyncio.run(scenario())
    assert figures["plan_move_s"] < 2.0 and figures["override_s"] < 2.0, figures
