"""One primary of a Redis Cluster stopped (SIGSTOP: its connections stay open, nothing comes
back) while one process checks limiters on every shard, through redis-py's asyncio
``RedisCluster``: the other shards' checks must still be decided by the store, before and
after the client has to follow a slot moved between the two healthy primaries (a ``MOVED``).
The scenario of the Rust client's ``client/tests/client/cluster_stall.rs``; the figures are
printed and stated in ``README.md`` (*Chaos soak*)."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio.cluster import RedisCluster

from redis_ratelimit_client import Limit, Policy, RateLimiter
from redis_ratelimit_client.store import key_slot
from servers import Cluster

TIMEOUT_S = 0.25
STALL_S = 5.0
MOVE_AT_S = 1.5
CALLERS = 4


def slot_owners(cluster: Cluster) -> dict[int, int]:
    """The port of each slot's primary."""
    owners: dict[int, int] = {}
    for start, end, primary, *_ in cluster.nodes[0].client().execute_command("CLUSTER", "SLOTS"):
        for slot in range(start, end + 1):
            owners[slot] = int(primary[1])
    return owners


def tag_on(owners: dict[int, int], port: int, prefix: str) -> str:
    """A hash tag whose slot the primary on ``port`` serves."""
    return next(f"{prefix}{n}" for n in range(100_000) if owners[key_slot(f"{{{prefix}{n}}}")] == port)


def policy(name: str, tag: str) -> Policy:
    """A token bucket no test exhausts, falling back open (the source says who decided)."""
    key = "rl:{{" + tag + "}}"
    bucket = Limit.token_bucket("l", 1_000_000, refill=1, key=key)
    return Policy(name, [bucket], timeout=TIMEOUT_S, fallback="open", deny_cache=False)


def test_a_stalled_primary_stalls_only_its_own_slots() -> None:
    cluster = Cluster(3)
    try:
        # No failure detection while the primary is stopped (without a replica the others
        # would answer CLUSTERDOWN for every slot after the node timeout).
        for node in cluster.nodes:
            node.client().execute_command("CONFIG", "SET", "cluster-node-timeout", 120_000)
        owners = slot_owners(cluster)
        ports = [node.port for node in cluster.nodes]
        tags = [tag_on(owners, port, "s") for port in ports]
        moving = tag_on(owners, ports[1], "moving")
        asyncio.run(measure(cluster, tags, moving))
    finally:
        cluster.stop()


async def measure(cluster: Cluster, tags: list[str], moving: str) -> None:
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    policies = [policy(f"shard{shard}", tag) for shard, tag in enumerate(tags)]
    limiter = RateLimiter(client, [*policies, policy("moving", moving)])
    try:
        await limiter.connect()
        for shard in range(len(tags)):
            assert (await limiter.check(f"shard{shard}")).source == "store"
        # (shard, decided by the store, started at, took), in seconds since the stop.
        outcomes: list[tuple[int, bool, float, float]] = []
        cluster.nodes[0].pause()
        stopped = time.monotonic()

        async def caller(shard: int) -> None:
            while (started := time.monotonic()) - stopped < STALL_S:
                decision = await limiter.check(f"shard{shard}")
                outcomes.append((shard, decision.source == "store", started - stopped, time.monotonic() - started))
                await asyncio.sleep(0.005)

        callers = [asyncio.create_task(caller(shard)) for shard in range(len(tags)) for _ in range(CALLERS)]
        # The schedule is what is measured: the share decided by the store before and after a
        # slot moves, MOVE_AT_S into the stall.
        await asyncio.sleep(MOVE_AT_S)
        slot = key_slot(f"{{{moving}}}")
        target = cluster.nodes[2].client().execute_command("CLUSTER", "MYID")
        for node in (cluster.nodes[2], cluster.nodes[1]):
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target)
        cluster.nodes[2].client().execute_command("CLUSTER", "BUMPEPOCH")
        moved = await limiter.check("moving")
        await asyncio.gather(*callers)
        cluster.nodes[0].resume()
    finally:
        await limiter.aclose()
        await client.aclose()

    def decided(stalled: bool, start: float, end: float) -> tuple[int, int]:
        runs = [o for o in outcomes if (o[0] == 0) == stalled and start <= o[2] < end]
        return sum(o[1] for o in runs), len(runs)

    def share(counts: tuple[int, int]) -> float:
        return counts[0] * 100.0 / max(counts[1], 1)

    before = decided(False, 0, MOVE_AT_S)
    after = decided(False, MOVE_AT_S, STALL_S)
    stalled = decided(True, 0, STALL_S)
    print(
        f"python cluster stall: other shards' checks decided by the store {before[0]} of {before[1]} "
        f"({share(before):.1f} %) before the move, {after[0]} of {after[1]} ({share(after):.1f} %) after "
        f"(the moved limiter by {moved.source}); stopped shard {stalled[0]} of {stalled[1]}; "
        f"slowest check {max(o[3] for o in outcomes) * 1000:.0f} ms"
    )
    assert before[1] > 0 and after[1] > 0 and stalled[1] > 0
    assert stalled[0] == 0, "the store decided checks on the stopped primary"
    assert share(before) >= 90.0, f"the other shards stalled before the move: {before}"
    assert share(after) >= 90.0, f"the other shards stalled after the move: {after}"
