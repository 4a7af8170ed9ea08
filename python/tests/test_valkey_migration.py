"""The Python client's cluster path through Valkey 9.1's atomic slot migration (``CLUSTER
MIGRATESLOTS``, the pinned Valkey of ``make valkey-server``): while the slot holding a policy's
limiter and 10,000 others moves to another primary, every check is decided by Redis (the
redirects followed by the cluster client), and never above the limit across the move."""

from __future__ import annotations

import threading
import time

import redis.cluster

from redis_ratelimit_client import Limit, Policy, SyncRateLimiter
from redis_ratelimit_client.store import key_slot
from servers import Cluster, valkey_server

LIMIT = 40
POLICY = Policy(
    "moved", [Limit.fixed_window("daily", LIMIT, 86_400, key="rl:{{moving}}:daily")], timeout=2, deny_cache=False
)


def _owner(cluster: Cluster, slot: int) -> int:
    """The port of the primary serving ``slot``, as the first node sees it."""
    for start, end, primary, *_ in cluster.nodes[0].client().execute_command("CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            return int(primary[1])
    raise AssertionError(f"nobody serves slot {slot}")


def test_checks_follow_an_atomic_slot_migration() -> None:
    cluster = Cluster(3, program=valkey_server())
    try:
        slot = key_slot("rl:{moving}:daily")
        source_port = _owner(cluster, slot)
        source = next(node for node in cluster.nodes if node.port == source_port)
        target = next(node for node in cluster.nodes if node.port != source_port)
        pipe = source.client().pipeline(transaction=False)
        for index in range(10_000):
            pipe.execute_command("RL.TOKENBUCKET", f"rl:{{moving}}:fill:{index}", 100, "0.001")
        pipe.execute()

        client = redis.cluster.RedisCluster(host="127.0.0.1", port=source.port)
        limiter = SyncRateLimiter(client, [POLICY])
        stop, moving = threading.Event(), threading.Event()
        seen: dict[str, int] = {"answered": 0, "during": 0, "allowed": 0}
        sources: set[str] = set()
        errors: list[BaseException] = []

        def check() -> None:
            try:
                while not stop.is_set():
                    decision = limiter.check("moved")
                    seen["answered"] += 1
                    seen["during"] += moving.is_set()
                    seen["allowed"] += decision.allowed
                    sources.add(decision.source)
            except BaseException as error:  # reported by the test, not lost in the thread
                errors.append(error)

        worker = threading.Thread(target=check)
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while seen["answered"] < 50 and not errors and time.monotonic() < deadline:
                time.sleep(0.01)
            moving.set()
            started = time.monotonic()
            target_id = target.client().execute_command("CLUSTER", "MYID")
            source.client().execute_command("CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", target_id)
            deadline = time.monotonic() + 30
            while _owner(cluster, slot) != target.port and time.monotonic() < deadline:
                time.sleep(0.02)
            elapsed_ms = (time.monotonic() - started) * 1000
            moving.clear()
            after = seen["answered"] + 100
            deadline = time.monotonic() + 10
            while seen["answered"] < after and not errors and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            worker.join()
        print(
            f"Python cluster client through a Valkey 9.1.2 slot migration of 10,001 limiters: moved in "
            f"{elapsed_ms:.0f} ms, {seen['during']} checks answered during the move, {seen['answered']} in all, "
            f"sources {sorted(sources)}"
        )
        assert not errors, errors
        assert _owner(cluster, slot) == target.port, "the slot did not move"
        assert seen["answered"] >= after, "no checks answered after the move"
        assert sources == {"store"}, sources
        assert seen["allowed"] <= LIMIT, seen
        limiter.close()
    finally:
        cluster.stop()
