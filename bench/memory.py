#!/usr/bin/env python3
"""Memory per limiter: used_memory growth over 100,000 limiters, and MEMORY USAGE of one;
then memory per holder of in-flight limits (RL.ACQUIRE) against the sorted-set semaphore
(bench/lua/semaphore.lua).

Keys are short (`k:<n>`), as in the reference figures this project is held to (an
`INCR` + `PEXPIRE` counter costs about 101 bytes per key), so the numbers compare directly
with them; `make bench-server` measures the same thing with its own longer keys.

Starts its own redis-server with the release module (127.0.0.1, a free port, a temp dir)
and stops it at the end. Usage: bench/memory.py [module.so] [keys]
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (label, the commands creating limiter number n)
CASES = [
    ("INCR + PEXPIRE (counter)", lambda k: [("INCR", k), ("PEXPIRE", k, "86400000")]),
    ("RL.TOKENBUCKET", lambda k: [("RL.TOKENBUCKET", k, "1000000", "0.001")]),
    ("RL.SLIDING", lambda k: [("RL.SLIDING", k, "1000", "86400")]),
    ("RL.FIXED", lambda k: [("RL.FIXED", k, "1000", "86400")]),
    ("CL.THROTTLE", lambda k: [("CL.THROTTLE", k, "999", "1", "86400")]),
    ("RL.SLIDINGLOG, 1 unit", lambda k: [("RL.SLIDINGLOG", k, "1000", "86400")]),
    ("RL.SLIDINGLOG, 10 units", lambda k: [("RL.SLIDINGLOG", k, "1000", "86400", "10")]),
    ("RL.SLIDINGLOG, 100 units", lambda k: [("RL.SLIDINGLOG", k, "1000", "86400", "100")]),
]

# In-flight limits: semaphores of this many holders each, with ids shaped like UUIDs (36
# bytes), limit 1000 (ratelimit.max-holders' default) and a day's ttl. Each size is
# measured over HOLDERS_TOTAL holders (100,000 keys of 1, ..., 100 keys of 1000), so every
# figure is an average over many keys and allocations.
HOLDER_COUNTS = (1, 10, 100, 1000)
HOLDERS_TOTAL = 100_000
HOLDER_TTL_MS = "86400000"


def holder_id(n: int) -> str:
    return f"8c7f3e2a-5b1d-4e9f-a6c0-{n:012d}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def resp(*args: str) -> bytes:
    """One command in the Redis protocol."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def main() -> None:
    module = Path(sys.argv[1] if len(sys.argv) > 1 else "target/release/libredis_ratelimit.so")
    keys = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    port, workdir = free_port(), tempfile.mkdtemp(prefix="rl-memory-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
         "--save", "", "--appendonly", "no", "--loadmodule", str(module.resolve()),
         "--logfile", "redis.log"])

    def cli(*args: str) -> str:
        return subprocess.run(["redis-cli", "-p", str(port), *args],
                              capture_output=True, text=True).stdout.strip()

    def used_memory() -> int:
        info = dict(line.split(":", 1) for line in cli("INFO", "memory").splitlines()
                    if ":" in line)
        return int(info["used_memory"])

    def grow(label: str, make, keys: int) -> tuple[float, str]:
        """Creates `keys` limiters with `make` in an empty server: used_memory growth per
        key, and MEMORY USAGE of one of them."""
        cli("FLUSHALL")
        time.sleep(0.2)
        before = used_memory()
        payload = b"".join(resp(*command) for n in range(keys) for command in make(f"k:{n}"))
        subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=payload,
                       capture_output=True, check=True)
        time.sleep(0.5)  # let the dict's incremental rehash finish
        per_key = (used_memory() - before) / keys
        if int(cli("DBSIZE")) != keys:
            raise RuntimeError(f"{label}: expected {keys} keys, found {cli('DBSIZE')}")
        return per_key, cli("MEMORY", "USAGE", "k:7", "SAMPLES", "0")

    try:
        for _ in range(100):
            if cli("PING") == "PONG":
                break
            time.sleep(0.1)
        version = cli("INFO", "server").split("redis_version:")[1].split()[0]
        print(f"Memory per limiter over {keys:,} limiters, keys `k:<n>`, {version}:\n")
        print("| limiter | used_memory per key (B) | MEMORY USAGE (B) |")
        print("|---|--:|--:|")
        for label, make in CASES:
            per_key, usage = grow(label, make, keys)
            print(f"| {label} | {per_key:.1f} | {usage} |")

        semaphore = cli("SCRIPT", "LOAD", (Path(__file__).parent / "lua/semaphore.lua").read_text())
        # (name, the call adding holder n to key k, the number of holders key k:7 holds)
        implementations = [
            ("RL.ACQUIRE", lambda k, n: ("RL.ACQUIRE", k, "1000", holder_id(n), HOLDER_TTL_MS),
             lambda: 1000 - int(cli("RL.PEEK", "k:7", "CONCURRENCY", "1000").split()[1])),
            ("ZSET semaphore (Lua)", lambda k, n: ("EVALSHA", semaphore, "1", k, "1000",
                                                   holder_id(n), HOLDER_TTL_MS),
             lambda: int(cli("ZCARD", "k:7"))),
        ]
        print(f"\nMemory per holder: semaphores of n holders with 36-byte ids, "
              f"{HOLDERS_TOTAL:,} holders per row (keys = {HOLDERS_TOTAL:,} / n). Per key = "
              "used_memory growth / keys (key, value, expiry); per holder = what each holder "
              "beyond the first adds, (per key(n) - per key(1)) / (n - 1). The module's "
              "stated size is 13 + 36 = 49 B a holder plus a 72 B header.\n")
        print("| holders a key | implementation | per key (B) | per holder (B) "
              "| MEMORY USAGE (B) |")
        print("|--:|---|--:|--:|--:|")
        for name, acquire, held in implementations:
            first = None
            for count in HOLDER_COUNTS:
                def make(k, count=count, acquire=acquire):
                    return [acquire(k, n) for n in range(count)]
                per_key, usage = grow(f"{name}, {count} holders", make, HOLDERS_TOTAL // count)
                if held() != count:
                    raise RuntimeError(f"{name}: k:7 holds {held()} holders, not {count}")
                first = per_key if first is None else first
                per_holder = f"{(per_key - first) / (count - 1):.1f}" if count > 1 else "–"
                print(f"| {count} | {name} | {per_key:.1f} | {per_holder} | {usage} |")
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
