"""One replica of a fleet, as its own process: ``python fleet_worker.py PORT CHECKS START``
waits until the Unix instant START, makes CHECKS checks of one key and prints how many the
limiter admitted and from where (JSON)."""

from __future__ import annotations

import json
import sys
import time

import redis

from redis_ratelimit_client import Limit, Policy, SyncRateLimiter


def main() -> None:
    port, checks, start = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    policy = Policy("fleet", [Limit.token_bucket("per-key", 30, refill=3600, key="fleet:{key}")], timeout=2)
    limiter = SyncRateLimiter(redis.Redis(port=port), [policy], replicas=3)
    limiter.connect()
    time.sleep(max(start - time.time(), 0))
    decisions = [limiter.check("fleet", key="shared") for _ in range(checks)]
    sources: dict[str, int] = {}
    for decision in decisions:
        sources[decision.source] = sources.get(decision.source, 0) + 1
    print(json.dumps({"admitted": sum(d.allowed for d in decisions), "sources": sources}))
    limiter.close()


if __name__ == "__main__":
    main()
