#!/usr/bin/env python3
"""The service's cost per check as what it keeps per key grows: held in-flight slots, or
remembered denials (the deny cache, at most 100,000 a policy).

Starts a private redis-server with the module and the service (HTTP on a free port), then
sends checks over one keep-alive HTTP connection, each on its own descriptor value, and
prints the median and p99 time per check in each block against the entries kept at its
start, with plain checks (a fixed window) before and after for comparison. Everything it
starts is stopped.

  in-flight  every check is admitted and its slot held (an hour's ttl, never released)
  denials    each value is checked twice on a limit of 1 an hour: the second check, timed,
             is denied and remembered for the hour

Usage: held_slots.py SERVICE_BINARY MODULE_SO [in-flight|denials] [COUNT] [BLOCK]
  COUNT  values in all (default 120000); BLOCK  values per block (default 10000)
"""

import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CONFIG = """
domain: api
descriptors:
  - key: backend
    rate_limit: {unit: hour, requests_per_unit: 2, name: in-flight, algorithm: concurrency}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 2, name: per-hour, algorithm: fixed_window}
  - key: once
    rate_limit: {unit: hour, requests_per_unit: 1, name: once, algorithm: fixed_window}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(key: str, value: str) -> bytes:
    request = {"domain": "api", "descriptors": [{"entries": [{"key": key, "value": value}]}]}
    return json.dumps(request).encode()


def check(con: http.client.HTTPConnection, key: str, value: str) -> bool:
    con.request("POST", "/v1/check", body(key, value), {"Content-Type": "application/json"})
    return json.loads(con.getresponse().read()).get("allowed")


def block(con: http.client.HTTPConnection, key: str, start: int, count: int) -> list[float]:
    """Admitted checks of values start.. of key; the time of each."""
    times = []
    for index in range(start, start + count):
        began = time.perf_counter()
        allowed = check(con, key, f"v{index}")
        times.append(time.perf_counter() - began)
        if not allowed:
            raise SystemExit(f"check {index} of {key} was not admitted")
    return times


def denied_block(con: http.client.HTTPConnection, start: int, count: int) -> list[float]:
    """Values start.. of `once`, each admitted then denied; the time of each denial."""
    times = []
    for index in range(start, start + count):
        if not check(con, "once", f"v{index}"):
            raise SystemExit(f"the first check of value {index} was denied")
        began = time.perf_counter()
        allowed = check(con, "once", f"v{index}")
        times.append(time.perf_counter() - began)
        if allowed:
            raise SystemExit(f"the second check of value {index} was admitted")
    return times


def row(label: str, held: int, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"| {label:<9} | {held:>7} | {statistics.median(ms):8.3f} | {p99:8.3f} |"


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    service, module = sys.argv[1], os.path.realpath(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "in-flight"
    if mode not in ("in-flight", "denials"):
        raise SystemExit(f"mode {mode!r}: in-flight or denials\n{__doc__}")
    slots = int(sys.argv[4]) if len(sys.argv) > 4 else 120_000
    size = int(sys.argv[5]) if len(sys.argv) > 5 else 10_000
    with tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        redis = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", scratch,
             "--save", "", "--loadmodule", module],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        running = None
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), 0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            config = os.path.join(scratch, "config")
            os.mkdir(config)
            with open(os.path.join(config, "api.yaml"), "w") as f:
                f.write(CONFIG)
            log = open(os.path.join(scratch, "service.log"), "w+")
            running = subprocess.Popen(
                [service, "--redis", f"redis://127.0.0.1:{port}/", "--config", config,
                 "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
                stdout=subprocess.DEVNULL, stderr=log)
            address = None
            for _ in range(300):
                log.seek(0)
                found = re.search(r"HTTP API on (\S+)", log.read())
                if found:
                    address = found.group(1)
                    break
                time.sleep(0.1)
            if address is None:
                log.seek(0)
                raise SystemExit(f"the service did not start:\n{log.read()}")
            host, http_port = address.rsplit(":", 1)
            con = http.client.HTTPConnection(host, int(http_port))
            print(f"{service}: ms per check over one HTTP connection (median, p99)")
            print("| checks    |    kept | median   | p99      |")
            print("|---|--:|--:|--:|")
            block(con, "plain", 0, 1_000)  # warm up
            print(row("plain", 0, block(con, "plain", 1_000, size)))
            held = 0
            while held < slots:
                count = min(size, slots - held)
                if mode == "in-flight":
                    times = block(con, "backend", held, count)
                else:
                    times = denied_block(con, held, count)
                print(row(mode, held, times), flush=True)
                held += count
            print(row("plain", held, block(con, "plain", 20_000, size)))
        finally:
            if running is not None:
                running.terminate()
                running.wait(10)
            redis.terminate()
            redis.wait(10)


if __name__ == "__main__":
    main()
