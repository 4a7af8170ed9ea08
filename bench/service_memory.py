#!/usr/bin/env python3
"""The service's resident memory over distinct keys: `N` checks through its HTTP API
(`POST /v1/check`), each with a descriptor value of its own on a one-hour rule, and the
service's VmRSS before and after (and every tenth of the way). What grows is what the client
library keeps per key set (the store's last answer, which the failure mode continues from),
bounded by `--max-tracked-keys` (default 100,000).

Starts its own redis-server with the module and the service (127.0.0.1, free ports, a temp
dir), stops both at the end. Standard library only; requests are pipelined on a few
keep-alive connections.

Usage: bench/service_memory.py SERVICE_BINARY MODULE.so [keys] [-- service flags...]
e.g.   bench/service_memory.py target/release/redis-ratelimit-server \
           target/release/libredis_ratelimit.so 1000000 -- --max-tracked-keys 100000
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CONFIG = """domain: mem
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1000
"""
CONNECTIONS = 4
PIPELINE = 64


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def wait_for(check, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {seconds} s")


def request(port: int, key: int) -> bytes:
    body = ('{"domain":"mem","descriptors":[{"entries":[{"key":"user","value":"user-%012d"}]}]}'
            % key).encode()
    return (b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (port, len(body), body))


def read_responses(conn: socket.socket, buffer: bytearray, count: int) -> bytearray:
    """Reads `count` responses (each with a content-length); fails on any status but 200."""
    for _ in range(count):
        while b"\r\n\r\n" not in buffer:
            chunk = conn.recv(65536)
            if not chunk:
                raise RuntimeError("the service closed the connection")
            buffer += chunk
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected answer: {head[:200]!r}")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                raise RuntimeError("the service closed the connection")
            rest += chunk
        buffer = bytearray(rest[length:])
    return buffer


def load(port: int, keys: range, errors: list[BaseException]) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            buffer = bytearray()
            for start in range(keys.start, keys.stop, PIPELINE):
                batch = range(start, min(start + PIPELINE, keys.stop))
                conn.sendall(b"".join(request(port, key) for key in batch))
                buffer = read_responses(conn, buffer, len(batch))
    except BaseException as error:  # reported by the main thread
        errors.append(error)


def main() -> None:
    args = sys.argv[1:]
    service_flags = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    binary, module = Path(args[0]).resolve(), Path(args[1]).resolve()
    keys = int(args[2]) if len(args) > 2 else 1_000_000
    workdir = Path(tempfile.mkdtemp(prefix="rl-service-memory-"))
    (workdir / "config").mkdir()
    (workdir / "config" / "mem.yaml").write_text(CONFIG)
    redis_port, http_port = free_port(), free_port()
    processes = []
    try:
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--dir",
             str(workdir), "--save", "", "--appendonly", "no", "--loadmodule", str(module),
             "--logfile", "redis.log"])
        processes.append(redis)
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(redis_port), "PING"],
                                        capture_output=True, text=True).stdout.strip() == "PONG",
                 "redis-server")
        service = subprocess.Popen(
            [str(binary), "--redis", f"redis://127.0.0.1:{redis_port}/", "--config",
             str(workdir / "config"), "--grpc-listen", "off", "--http-listen",
             f"127.0.0.1:{http_port}", "--log-level", "warn", *service_flags],
            stderr=open(workdir / "service.log", "w"))
        processes.append(service)

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=0.2).close()
                return True
            except OSError:
                return False
        wait_for(listening, "the service")
        # One request first, so the connection to Redis and the config are in place.
        errors: list[BaseException] = []
        load(http_port, range(keys, keys + 1), errors)
        before = rss_mib(service.pid)
        started = time.monotonic()
        print(f"{keys:,} distinct keys, flags {service_flags or '(defaults)'}: "
              f"RSS before {before:.1f} MiB", flush=True)
        step = max(keys // 10, 1)
        for start in range(0, keys, step):
            stop = min(start + step, keys)
            share = (stop - start + CONNECTIONS - 1) // CONNECTIONS
            threads = [threading.Thread(target=load, args=(http_port, range(
                start + n * share, min(start + (n + 1) * share, stop)), errors))
                for n in range(CONNECTIONS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if errors:
                raise errors[0]
            print(f"  {stop:>9,} keys: RSS {rss_mib(service.pid):.1f} MiB "
                  f"({time.monotonic() - started:.0f} s)", flush=True)
        after = rss_mib(service.pid)
        print(f"RSS {before:.1f} -> {after:.1f} MiB (+{after - before:.1f} MiB, "
              f"{(after - before) * 1024 * 1024 / keys:.0f} B a key), "
              f"{keys / (time.monotonic() - started):.0f} checks/s", flush=True)
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
