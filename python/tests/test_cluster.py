"""A Redis Cluster with a policy's keys in two slots (a per-user key and a global one): each
slot's limits in one call, the most specific first, and refunded when a later group denies,
so the policy stays all-or-nothing; on the module and on the Functions library (loaded on
every primary by the client)."""

from __future__ import annotations

import asyncio

import pytest
import redis.cluster
from redis.asyncio.cluster import RedisCluster

from polling import wait_for_async
from redis_ratelimit_client import Lease, Limit, Policy, RateLimiter, SyncRateLimiter, TopKeys
from redis_ratelimit_client.store import key_slot
from servers import Cluster

POLICY = Policy(
    "api",
    [
        Limit.fixed_window("global", 3, 3600, key="rl:{{global}}"),
        Limit.token_bucket("per-user", 10, refill=3600, key="rl:{{{user}}}:user"),
    ],
    timeout=2,
    deny_cache=False,
)
LEASED = Policy(
    "leased",
    [
        Limit.fixed_window("global", 25, 3600, key="rl:{{leased-global}}"),
        Limit.fixed_window("per-user", 40, 3600, key="rl:{{{user}}}:leased"),
    ],
    lease=Lease(4),
    timeout=2,
)


@pytest.mark.parametrize("module", [True, False], ids=["module", "functions"])
def test_limits_in_two_slots_stay_all_or_nothing(module: bool) -> None:
    assert key_slot("rl:{global}") != key_slot("rl:{alice}:user")
    cluster = Cluster(3, module=module)

    async def scenario() -> None:
        node = cluster.nodes[0]
        client = RedisCluster(host="127.0.0.1", port=node.port)
        limiter = RateLimiter(client, [POLICY], top_keys=TopKeys())
        assert await limiter.connect() == ("module" if module else "functions")
        decisions = [await limiter.check("api", user="alice") for _ in range(5)]
        assert [d.allowed for d in decisions] == [True, True, True, False, False]
        denied = decisions[-1]
        assert denied.binding == "global"
        assert denied.source == "store"
        # The per-user bucket was charged first (most specific) and refunded by the denial.
        per_user = next(limit for limit in denied.limits if limit.name == "per-user")
        assert per_user.remaining == 7, denied.limits
        # The global limit denies bob too, and his bucket, charged first, is given back.
        bob = await limiter.check("api", user="bob")
        assert not bob.allowed
        assert next(limit for limit in bob.limits if limit.name == "per-user").remaining == 10
        # The top keys in their {rl-top} slot: one pipelined write to its node, read back.
        await limiter.report_top()
        [top] = await limiter.top_denied("api")
        assert (top.limit, [(k.key, k.count) for k in top.keys]) == ("global", [("rl:{global}", 3)])
        # Leases over two slots: claims are partial grants of both groups, never beyond either.
        leased = RateLimiter(client, [LEASED])
        await leased.connect()
        decisions = [await leased.check("leased", user="carol") for _ in range(40)]
        assert sum(d.allowed for d in decisions) == 25, "the global window's 25, no more"
        assert {d.source for d in decisions} >= {"store", "lease"}
        await leased.aclose()
        await client.aclose()
        # The sync limiter on the sync cluster client.
        sync = SyncRateLimiter(
            redis.cluster.RedisCluster(host="127.0.0.1", port=node.port), [POLICY], top_keys=TopKeys()
        )
        assert not sync.check("api", user="dave").allowed, "the global limit is spent"
        assert sync.backend == ("module" if module else "functions")
        sync.report_top()
        [top] = sync.top_denied("api", limit="global")
        assert [(k.key, k.count) for k in top.keys] == [("rl:{global}", 4)], "both replicas' denials"
        sync.close()

    try:
        asyncio.run(scenario())
    finally:
        cluster.stop()


def test_plans_on_a_cluster() -> None:
    """The policy store in its ``{rl-policy}`` slot of a Cluster, read and followed."""
    from redis_ratelimit_client.plans import PlanSource

    cluster = Cluster(3, module=True)

    async def scenario() -> None:
        client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        await client.execute_command("HSET", "{rl-policy}:plans", "pro", "per-minute=fixed:2/60s")
        await client.execute_command("HSET", "{rl-policy}:tenants", "acme", "pro")
        await client.execute_command("SET", "{rl-policy}:version", "1")
        plans = await PlanSource(client, check_every=0.1).start()
        assert plans.loaded and plans.version == 1, plans.status
        policy = Policy.from_store("api", defaults=[Limit.fixed_window("per-minute", 9, 60, key="-")], timeout=2)
        limiter = RateLimiter(client, [policy], plans=plans)
        assert [(await limiter.check("api", tenant="acme")).allowed for _ in range(3)] == [True, True, False]
        await client.execute_command("HSET", "{rl-policy}:plans", "pro", "per-minute=fixed:3/60s")
        await client.execute_command("INCR", "{rl-policy}:version")
        await wait_for_async(
            lambda: plans.version == 2, "the version check to follow the store without notifications too", within_s=3
        )
        assert (await limiter.check("api", tenant="acme")).allowed, "a raised limit: one more"
        await plans.aclose()
        await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        cluster.stop()
