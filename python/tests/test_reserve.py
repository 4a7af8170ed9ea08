"""Reservations (reserve an estimate, settle the actual amount) and in-flight holds, on a real
server: an underrun is refunded, an overrun taken as far as the limit holds and the rest owed
and charged before the key set's next store decision; ``hold`` gives its slot back however the
block ends."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis

from redis_ratelimit_client import Limit, Policy, RateLimiter
from servers import Server

TOKENS = Policy("llm", [Limit.token_bucket("tokens", 100, refill=3600, key="llm:{key}")], timeout=1)
SLOTS = Policy("jobs", [Limit.concurrency("running", 1, 60, key="jobs:{key}")], timeout=1)


def test_settle_refunds_an_underrun_and_owes_an_overrun(module_server: Server) -> None:
    async def scenario() -> None:
        limiter = RateLimiter(aredis.Redis(port=module_server.port), [TOKENS])
        first = await limiter.reserve("llm", 60, key="u")
        assert first.allowed and first.decision.remaining == 40
        assert await first.settle(20) == 0
        assert (await limiter.check("llm", 1, key="u")).remaining == 79, "40 refunded, 1 taken"
        second = await limiter.reserve("llm", 70, key="u")
        assert second.allowed
        assert await second.settle(100) == 21, "9 left were taken, 21 owed"
        third = await limiter.check("llm", 1, key="u")
        assert not third.allowed and third.remaining == 0, "the debt was charged first"
        with pytest.raises(ValueError, match="already settled"):
            await second.settle(1)
        denied = await limiter.reserve("llm", 500, key="u")
        assert not denied.allowed and await denied.settle(900) == 0, "nothing to settle"
        released = await limiter.reserve("llm", 5, key="other")
        await released.release()
        assert (await limiter.check("llm", 1, key="other")).remaining == 99

    asyncio.run(scenario())


def test_hold_gives_the_slot_back_even_when_the_block_raises(module_server: Server) -> None:
    async def scenario() -> None:
        limiter = RateLimiter(aredis.Redis(port=module_server.port), [SLOTS])
        with pytest.raises(RuntimeError):
            async with limiter.hold("jobs", key="j") as decision:
                assert decision.allowed
                async with limiter.hold("jobs", key="j") as second:
                    assert not second.allowed, "one slot"
                raise RuntimeError("the job failed")
        async with limiter.hold("jobs", key="j") as again:
            assert again.allowed, "the failed job's slot came back"

    asyncio.run(scenario())
