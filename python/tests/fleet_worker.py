"""One replica of a fleet, as its own process: ``python fleet_worker.py PORT CHECKS``
connects, prints ``ready``, waits for a line on its input (the fleet's start, once every
replica is ready), makes CHECKS checks of one key and prints how many the limiter admitted
and from where (JSON)."""

from __future__ import annotations

import json
import sys

import redis

from redis_ratelimit_client import Limit, Policy, SyncRateLimiter


def main() -> None:
    port, checks = int(sys.argv[1]), int(sys.argv[2])
    policy = Policy("fleet", [Limit.token_bucket("per-key", 30, refill=3600, key="fleet:{key}")], timeout=2)
    limiter = SyncRateLimiter(redis.Redis(port=port), [policy], replicas=3)
    limiter.connect()
    print("ready", flush=True)
    sys.stdin.readline()
    decisions = [limiter.check("fleet", key="shared") for _ in range(checks)]
    sources: dict[str, int] = {}
    for decision in decisions:
        sources[decision.source] = sources.get(decision.source, 0) + 1
    print(json.dumps({"admitted": sum(d.allowed for d in decisions), "sources": sources}))
    limiter.close()


if __name__ == "__main__":
    main()
