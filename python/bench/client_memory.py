#!/usr/bin/env python3
"""The client's memory per distinct key: checks of N distinct keys (one each) on a 1-day
fixed window, through a ``RateLimiter`` on a real redis-server with the module, and the
process's resident memory (VmRSS, after a garbage collection) before and after, with the
size of the policy's per-key tables (the store's last answers).

Starts its own redis-server (tests/servers.py: loopback, a free port, a temp dir; the module
from RL_MODULE_PATH) and stops it at the end.

Usage: python bench/client_memory.py [--keys 1000000] [--max-keys N] [--in-flight 64]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from redis_ratelimit_client import Limit, Policy, RateLimiter
from servers import Server


def rss_mib() -> float:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def answers_size(limiter: Any) -> int:
    state = limiter._states["api"]  # noqa: SLF001
    table = state.answers._entries  # noqa: SLF001
    return len(table)


async def run(keys: int, max_keys: int | None, in_flight: int) -> None:
    server = Server()
    try:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, max_connections=in_flight)
        # A generous timeout: every answer from the store, whatever the machine's load.
        policy = Policy("api", [Limit.fixed_window("per-day", 1000, 86_400, key="rl:{{{key}}}")], timeout=5)
        options: dict[str, Any] = {}
        if max_keys is not None:
            if "max_keys" not in inspect.signature(RateLimiter).parameters:
                raise SystemExit("this version of the client has no max_keys")
            options["max_keys"] = max_keys
        limiter = RateLimiter(client, [policy], **options)
        await limiter.connect()
        await limiter.check("api", key="warm-up")
        before = rss_mib()
        started = time.monotonic()
        fallback = 0
        next_key = 0

        async def worker() -> None:
            nonlocal next_key, fallback
            while next_key < keys:
                key = next_key
                next_key += 1
                decision = await limiter.check("api", key=f"user-{key}")
                fallback += decision.source != "store"

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.monotonic() - started
        after = rss_mib()
        print(
            f"{keys:,} distinct keys on a 1-day window in {elapsed:.1f} s ({fallback} not from the store): "
            f"RSS {before:.1f} -> {after:.1f} MiB (+{after - before:.1f} MiB, "
            f"{(after - before) * 1024 * 1024 / keys:.0f} B a key); last answers kept: {answers_size(limiter):,}"
        )
        await limiter.aclose()
        await client.aclose()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--max-keys", type=int, default=None, help="the limiter's max_keys (default: its own)")
    parser.add_argument("--in-flight", type=int, default=64)
    arguments = parser.parse_args()
    asyncio.run(run(arguments.keys, arguments.max_keys, arguments.in_flight))


if __name__ == "__main__":
    main()
