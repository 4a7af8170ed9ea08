"""The Python client's figures, measured side by side in one run (``make bench-python``):

- checks/s of one process (the async limiter, 200 checks in flight over 1,000 keys, pipelined;
  the sync limiter, 32 threads), on a server with the module and one with the Functions
  library, against a plain ``INCR`` through the same redis-py pipeline for scale;
- the client's CPU per check (this process's CPU time over sequential sync checks, one
  thread), side by side with ``limits``' own Redis storage (a fixed-window hit) on the same server;
- Redis commands per check (``INFO commandstats``) with and without leases of 10 on hot keys;
- the local fallback's over-admission against its stated bound while Redis is SIGSTOPped
  under load (3 replicas), over ``ROUNDS`` runs.

Prints a Markdown report (``--out FILE`` also writes it). Each figure is the median of
``--rounds`` rounds, with the spread.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import sys
import time
from pathlib import Path

import redis
import redis.asyncio as aredis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import servers  # noqa: E402
from test_outage import test_sigstop_under_load_stays_within_the_bound  # noqa: E402

from redis_ratelimit_client import Lease, Limit, Policy, RateLimiter, SyncRateLimiter  # noqa: E402

KEYS = 1000
PLAIN = Policy("bench", [Limit.token_bucket("per-key", 10**9, 10**6, key="b:{key}")], timeout=1)
LEASED = Policy("bench", [Limit.token_bucket("per-key", 10**9, 10**6, key="b:{key}")], timeout=1, lease=Lease(10))


async def async_rate(port: int, seconds: float, policy: Policy, keys: int, concurrency: int = 200) -> float:
    limiter = RateLimiter(aredis.Redis(port=port), [policy])
    await limiter.connect()
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        nonlocal done
        index = offset
        while time.perf_counter() < stop:
            await limiter.check("bench", key=str(index % keys))
            index += concurrency
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    rate = done / (time.perf_counter() - started)
    await limiter.aclose()
    return rate


async def incr_rate(port: int, seconds: float, concurrency: int = 200) -> float:
    """Plain INCR through redis-py's pipelines, as the limiter batches (for scale)."""
    client = aredis.Redis(port=port)
    done = 0
    stop = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < stop:
        pipe = client.pipeline(transaction=False)
        for index in range(concurrency):
            pipe.incr(f"i:{index}")
        await pipe.execute()
        done += concurrency
    return done / (time.perf_counter() - started)


def sync_rate(port: int, seconds: float, threads: int = 32) -> float:
    limiter = SyncRateLimiter(redis.Redis(port=port, max_connections=threads * 2), [PLAIN])
    limiter.connect()
    stop = time.perf_counter() + seconds

    def worker(offset: int) -> int:
        count, index = 0, offset
        while time.perf_counter() < stop:
            limiter.check("bench", key=str(index % KEYS))
            index += threads
            count += 1
        return count

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(worker, range(threads)))
    rate = total / (time.perf_counter() - started)
    limiter.close()
    return rate


def cpu_per_check_us(port: int, checks: int) -> float:
    """This process's CPU time per sequential sync check (µs)."""
    limiter = SyncRateLimiter(redis.Redis(port=port), [PLAIN])
    limiter.connect()
    for index in range(200):  # warm: connections, code paths
        limiter.check("bench", key=str(index % KEYS))
    started = time.process_time()
    for index in range(checks):
        limiter.check("bench", key=str(index % KEYS))
    spent = time.process_time() - started
    limiter.close()
    return spent / checks * 1e6


def limits_cpu_per_hit_us(port: int, checks: int) -> float:
    """The same for ``limits``' own Redis storage: a fixed-window hit."""
    from limits import RateLimitItemPerMinute
    from limits.storage import RedisStorage
    from limits.strategies import FixedWindowRateLimiter

    limiter = FixedWindowRateLimiter(RedisStorage(f"redis://127.0.0.1:{port}"))
    item = RateLimitItemPerMinute(10**9)
    for index in range(200):
        limiter.hit(item, str(index % KEYS))
    started = time.process_time()
    for index in range(checks):
        limiter.hit(item, str(index % KEYS))
    return (time.process_time() - started) / checks * 1e6


def calls_per_check(server: servers.Server, policy: Policy, checks: int, keys: int) -> float:
    async def run() -> None:
        limiter = RateLimiter(aredis.Redis(port=server.port), [policy])
        await limiter.connect()
        for start in range(0, checks, 100):
            await asyncio.gather(*(limiter.check("bench", key=str(i % keys)) for i in range(start, start + 100)))
        await limiter.aclose()

    server.client().config_resetstat()
    asyncio.run(run())
    stats = server.client().info("commandstats")
    calls = sum(int(v["calls"]) for name, v in stats.items() if name.startswith(("cmdstat_rl.", "cmdstat_fcall")))
    return calls / checks


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cpu-only", action="store_true", help="only the client CPU per check")
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    lines = [
        "# The Python client's figures",
        "",
        f"`make bench-python`: {args.rounds} rounds of {args.seconds:.0f} s, interleaved; median (min-max). "
        f"Load average at the start: {load} (the 2-core machine is shared: read the ratios).",
        "",
        "| what | module | Functions library |",
        "|---|--:|--:|",
    ]
    module, library = servers.start("module"), servers.start("functions")
    try:
        cpu: dict[str, dict[str, list[float]]] = {"client": {}, "limits": {}}
        for _ in range(args.rounds):
            for name, server in (("module", module), ("functions", library)):
                cpu["client"].setdefault(name, []).append(cpu_per_check_us(server.port, 5_000))
                cpu["limits"].setdefault(name, []).append(limits_cpu_per_hit_us(server.port, 5_000))
        cpu_lines = [
            "| client CPU per sequential sync check, µs (`SyncRateLimiter`, one thread) | "
            f"{spread(cpu['client']['module'])} | {spread(cpu['client']['functions'])} |",
            "| the same, `limits`' Redis storage (fixed-window hit, same server) | "
            f"{spread(cpu['limits']['module'])} | {spread(cpu['limits']['functions'])} |",
        ]
        if args.cpu_only:
            print("\n".join(lines + cpu_lines))
            return
        rates: dict[str, dict[str, list[float]]] = {"async": {}, "sync": {}, "incr": {}}
        for _ in range(args.rounds):
            for name, server in (("module", module), ("functions", library)):
                rates["async"].setdefault(name, []).append(
                    asyncio.run(async_rate(server.port, args.seconds, PLAIN, KEYS))
                )
                rates["sync"].setdefault(name, []).append(sync_rate(server.port, args.seconds))
                rates["incr"].setdefault(name, []).append(asyncio.run(incr_rate(server.port, args.seconds)))
        lines.append(
            "| checks/s, async limiter (200 in flight, 1,000 keys) | "
            f"{spread(rates['async']['module'])} | {spread(rates['async']['functions'])} |"
        )
        lines.append(
            f"| checks/s, sync limiter (32 threads) | {spread(rates['sync']['module'])} | "
            f"{spread(rates['sync']['functions'])} |"
        )
        lines.append(
            f"| plain `INCR`/s, same redis-py pipelines (for scale) | {spread(rates['incr']['module'])} | "
            f"{spread(rates['incr']['functions'])} |"
        )
        lines += cpu_lines
        for label, policy, keys in (("no lease", PLAIN, KEYS), ("leases of 10, 10 hot keys", LEASED, 10)):
            per = [calls_per_check(server, policy, 20_000, keys) for server in (module, library)]
            lines.append(f"| Redis commands per check, {label} | {per[0]:.3f} | {per[1]:.3f} |")
    finally:
        module.stop()
        library.stop()
    lines += ["", "Local fallback, Redis SIGSTOPped 1.5 s under load (3 replicas, a bucket of 30 per 60 s):", ""]
    lines += ["| run | admitted | allowance | over-admission | its bound | by the fallback | max latency |",
              "|--:|--:|--:|--:|--:|--:|--:|"]
    import json
    import os
    import tempfile

    for run in range(args.rounds):
        path = Path(tempfile.mkstemp(suffix=".json")[1])
        path.unlink()
        os.environ["RL_FIGURES"] = str(path)
        test_sigstop_under_load_stays_within_the_bound()
        figures = json.loads(path.read_text())["sigstop"]
        path.unlink()
        lines.append(
            f"| {run + 1} | {figures['admitted']} | {figures['allowance']} | {figures['over_admission']} | "
            f"{figures['bound_on_over_admission']} | {figures['admitted_by_fallback']} | {figures['max_ms']} ms |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
