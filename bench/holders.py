#!/usr/bin/env python3
"""Calls for in-flight limits, in the Redis protocol, for `redis-cli --pipe`.

redis-benchmark repeats one command with random numbers, so it cannot release holders it
acquired; bench/instructions.sh sends these instead. Every phase is deterministic (fixed
seeds), so a command and its Lua twin get the same calls and callgrind the same counts.

Layout: KEYS semaphores of RESIDENTS holders each, ids shaped like UUIDs (36 bytes), limit
1000 (ratelimit.max-holders' default), holders living a day (none expires during a run).
Phases:
  residents  every semaphore's holders (the layout; not measured)
  renew      `calls` acquires by residents of random semaphores: renewals
  new        `calls` acquires by new holders, spread evenly: each semaphore grows by
             calls / KEYS holders (100 -> 120 with the default 20,000 calls)
  release    releases of the holders `new` acquired, in random order (120 -> 100)

Usage: holders.py phase module|lua|functions calls [semaphore_sha release_sha] > calls.resp
(functions: the Functions library's rl_acquire / rl_release, through FCALL)
"""

import random
import sys

KEYS = 1000
RESIDENTS = 100
LIMIT = "1000"
TTL_MS = "86400000"


def holder(prefix: str, n: int) -> str:
    return f"{prefix}-{n:012d}"


def resp(args: list[str]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def main() -> None:
    phase, implementation, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lua = implementation == "lua"
    functions = implementation == "functions"

    def acquire(key: str, who: str) -> list[str]:
        if lua:
            return ["EVALSHA", sys.argv[4], "1", key, LIMIT, who, TTL_MS]
        if functions:
            return ["FCALL", "rl_acquire", "1", key, LIMIT, who, TTL_MS]
        return ["RL.ACQUIRE", key, LIMIT, who, TTL_MS]

    def release(key: str, who: str) -> list[str]:
        if lua:
            return ["EVALSHA", sys.argv[5], "1", key, who]
        if functions:
            return ["FCALL", "rl_release", "1", key, who]
        return ["RL.RELEASE", key, who]

    rng = random.Random(1)
    resident = "0d4c1b9e-7f2a-4c3d-b5e6"
    # The new holders: holder i joins semaphore i mod KEYS.
    new = [(f"sem:{i % KEYS}", holder("f1e2d3c4-b5a6-4978-8695", i)) for i in range(calls)]
    if phase == "residents":
        commands = [acquire(f"sem:{k}", holder(resident, n))
                    for k in range(KEYS) for n in range(RESIDENTS)]
    elif phase == "renew":
        commands = [acquire(f"sem:{rng.randrange(KEYS)}",
                            holder(resident, rng.randrange(RESIDENTS)))
                    for _ in range(calls)]
    elif phase == "new":
        commands = [acquire(key, who) for key, who in new]
    elif phase == "release":
        rng.shuffle(new)
        commands = [release(key, who) for key, who in new]
    else:
        sys.exit(f"unknown phase {phase!r}")
    sys.stdout.buffer.write(b"".join(map(resp, commands)))


if __name__ == "__main__":
    main()
