#!/usr/bin/env python3
"""Memory per limiter: used_memory growth over 100,000 limiters, and MEMORY USAGE of one.

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

    try:
        for _ in range(100):
            if cli("PING") == "PONG":
                break
            time.sleep(0.1)
        print(f"Memory per limiter over {keys:,} limiters, keys `k:<n>`, "
              f"{cli('INFO', 'server').split('redis_version:')[1].split()[0]}:\n")
        print("| limiter | used_memory per key (B) | MEMORY USAGE (B) |")
        print("|---|--:|--:|")
        for label, make in CASES:
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
            print(f"| {label} | {per_key:.1f} | {cli('MEMORY', 'USAGE', 'k:7')} |")
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
