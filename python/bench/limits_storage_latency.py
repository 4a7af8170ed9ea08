"""The ``limits`` storage's latency on a healthy store (what its default ``timeout_ms`` must
exceed): hits through ``FixedWindowRateLimiter``, 16 threads (sync) and 400 in flight (async),
on a server with the module and one with the Functions library; then the longest a hit is
held while the server is SIGSTOPped for 3 s (4 threads hitting, default settings). Run it on
the machine as it is loaded (the load average is printed beside the figures):

    RL_MODULE_PATH=target/release/libredis_ratelimit.so \\
      target/python-venv/bin/python python/bench/limits_storage_latency.py
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import time
from pathlib import Path

from limits import parse
from limits.aio.strategies import FixedWindowRateLimiter as AsyncFixedWindowRateLimiter
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter

import redis_ratelimit_client.contrib.limits_storage  # noqa: F401  (registers the schemes)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import servers

ROUNDS, HITS = 5, 400
#: Long enough never to fire: the latency itself is measured.
NEVER_MS = 60_000


def _summary(label: str, latencies_s: list[float]) -> str:
    ordered = sorted(latencies_s)
    p50, p99 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]
    worst = ordered[-1]
    return f"{label}: {len(ordered)} hits, p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, max {worst * 1e3:.1f} ms"


def _sync(port: int) -> list[float]:
    limiter = FixedWindowRateLimiter(storage_from_string(f"redis-ratelimit://127.0.0.1:{port}/0?timeout_ms={NEVER_MS}"))
    latencies: list[float] = []

    def hit(index: int) -> None:
        started = time.monotonic()
        limiter.hit(parse("10/hour"), f"sync-{index % 50}")
        latencies.append(time.monotonic() - started)

    for _ in range(ROUNDS):
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(hit, range(HITS)))
    return latencies


async def _async(port: int) -> list[float]:
    uri = f"async+redis-ratelimit://127.0.0.1:{port}/0?timeout_ms={NEVER_MS}"
    limiter = AsyncFixedWindowRateLimiter(storage_from_string(uri))
    latencies: list[float] = []

    async def hit(index: int) -> None:
        started = time.monotonic()
        await limiter.hit(parse("10/hour"), f"async-{index % 50}")
        latencies.append(time.monotonic() - started)

    for _ in range(ROUNDS):
        await asyncio.gather(*(hit(index) for index in range(HITS)))
    return latencies


STOP_S = 3.0


def _stopped(server: servers.Server) -> str:
    limiter = FixedWindowRateLimiter(storage_from_string(f"redis-ratelimit://127.0.0.1:{server.port}/0"))
    limiter.hit(parse("10/hour"), "warm")
    held: list[float] = []
    errors = 0
    deadline = time.monotonic() + STOP_S

    def hits() -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                limiter.hit(parse("1000000/hour"), "stopped")
            except Exception:
                errors += 1
            held.append(time.monotonic() - started)

    server.pause()
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: hits(), range(4)))
    finally:
        server.resume()
    return f"a {STOP_S:.0f} s SIGSTOP: {len(held)} hits ({errors} raised), the longest held {max(held):.3f} s"


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    for backend in ("module", "functions"):
        server = servers.start(backend)
        try:
            print(_summary(f"{backend}, sync, 16 threads", _sync(server.port)))
            print(_summary(f"{backend}, async, {HITS} in flight", asyncio.run(_async(server.port))))
            if backend == "module":
                print(_stopped(server))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
