#!/usr/bin/env python3
"""Server-side benchmark: the module's commands against Lua scripts and native INCR.

Starts its own redis-server with the release module (127.0.0.1, a free port, a temp dir),
measures every approach in one run, interleaved over several rounds, and writes
`<out>/report.md` (also printed), `<out>/results.json` and, if matplotlib can be had,
`<out>/chart.png`. Standard library only; the chart runs in a venv (see bench/chart.py).

The figure that matters is *server main-thread CPU per call*: the on-CPU time of the
server's main thread (where commands, parsing and socket I/O run; read from schedstat in
nanoseconds, cross-checked against utime+stime) over the calls of the measured command,
from `INFO commandstats` deltas. Unlike ops/s it does not depend on how fast the
client is, and it is what a shared Redis pays for every rate-limit check.

See bench/README.md for how to run it and how to read the report.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import io
import json
import os
import platform
import random
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
LUA_DIR = BENCH_DIR / "lua"

# Parameters. Windows are in seconds (the Lua scripts and CL.THROTTLE take seconds).
# Admitted scenarios: a huge limit and a slow refill, so nothing runs out and no key
# expires during a run (a token bucket missing one token at 0.001 token/s lives 1000 s;
# 3e6 / 0.001 per second is 95 years, under the module's 100-year refill cap).
# Denied scenarios: a limit of 1, drained by one call, that stays empty for the run.
ADMIT_LIMIT = 3_000_000
MAX_RUN = ADMIT_LIMIT // 2  # no run may exhaust a hot key
WINDOW_S = 86400
SLOW_RATE = "0.001"
GCRA_PERIOD_S = 1000
# In-flight limits: holder ids shaped like UUIDs (36 bytes), a prefix and 12 digits, so
# that redis-benchmark's `__rand_int__` (12 digits) keeps their length. Callers use
# CALLERS; RESIDENTS fill the denied scenario's semaphore (no caller is among them);
# RELEASED are the holders the release rows acquire and release (never anyone else's).
CALLERS = "8c7f3e2a-5b1d-4e9f-a6c0-{}"
RESIDENTS = "0d4c1b9e-7f2a-4c3d-b5e6-{}"
RELEASED = "f1e2d3c4-b5a6-4978-8695-{}"
HOT_HOLDERS = 100  # holders of a hot semaphore
SEMAPHORE_LIMIT = 1000  # the admitted scenarios' limit: ratelimit.max-holders' default
HOLDER_TTL_MS = "86400000"  # a day: no holder expires during a benchmark
# Pacing: a queue of capacity 1 at 20 calls/s that accepts waits of up to a day. Each
# admitted call deepens its debt by 50 ms, so even a run of MAX_RUN calls stays within the
# day (75,000 s) and every call is admitted with a wait.
QUEUE_RATE = "20"
MAX_WAIT_MS = "86400000"
# The Functions library refuses a bucket (or GCRA tolerance) that takes more than 52 days
# to refill (Lua's doubles, see the README), so its rows refill the hot key's 3e6 tokens at
# 1 per second (35 days), and their random keys are buckets of LIBRARY_RANDOM_LIMIT tokens
# at 0.001 per second (46 days), which a run never empties and whose keys outlive it.
LIBRARY_HOT_RATE = "1"
LIBRARY_RANDOM_LIMIT = "4000"
LIBRARY = BENCH_DIR.parent / "functions" / "ratelimit.lua"


def holder_id(n: int | str, prefix: str = CALLERS) -> str:
    """Holder number n (or `__rand_int__`, for redis-benchmark to fill in) of a prefix."""
    return prefix.format(n if isinstance(n, str) else f"{n:012d}")


# What redis-benchmark sends as the holder in hot-key runs: one of the callers, over
# `-r holders`.
RUN_HOLDER = holder_id("__rand_int__")


@dataclass(frozen=True)
class Approach:
    """One way of limiting, as the benchmark drives it.

    `admit` / `deny` are the arguments after the keys for the admitted and the denied
    scenarios (`random_admit`, if set, replaces `admit` on the random keys); "{limit}" and
    "{burst}" stand for `limit` and `limit` - 1, "{holder}" for a holder id.
    `stat` is the `INFO commandstats` name whose calls are counted. `reply` says how to read
    an answer: "rl" = [allowed, remaining, ...], "cell" = [limited, limit, remaining, ...],
    "int" = 1 if done, 0 if not (a release).
    `keys` is the number of limiters one call checks (see `call_keys`); with more than one,
    the reply is RL.MULTI's: those five, the binding index and one array of five per key.
    `holders`: an in-flight limit, whose hot key holds that many holders before a run and
    whose hot-key runs draw callers among as many ids (`-r holders`).
    `pairs_with`: a release, measured in pairs: each call releases a new holder that an
    acquire by that approach (whose limiters its keys hold) took just before, and a "call"
    of this row is the pair. redis-benchmark repeats one command, and releases of random
    ids would mostly find nothing, so these runs are sent by this script (`Bench.drive`).
    """

    name: str
    kind: str  # "native", "module", "lua" or "functions" (the Functions library, FCALL)
    command: str  # the command (module/native), the Lua file under bench/lua, or the function
    admit: tuple[str, ...]
    deny: tuple[str, ...]
    reply: str | None = "rl"
    lua_twin: str | None = None  # for module commands: the Lua approach doing the same
    counter: str | None = None  # module: `INFO ratelimit` counters ratelimit_<counter>_admitted
    keys: int = 1
    limit: int = ADMIT_LIMIT
    random_admit: tuple[str, ...] | None = None
    holders: int = 0
    pairs_with: str | None = None
    # The single-limit approach the "× single" ratio divides by; without max_x_single, the
    # goal is to cost the same (× single ≈ 1).
    single: str | None = None
    # The targets for CPU per call at -P 16 (at -P 1 socket I/O hides the command):
    max_x_single: float | None = None  # at most this many times one `single` call
    min_lua_factor: float | None = None  # the Lua twin at least this many times as costly

    @property
    def stat(self) -> str:
        return {"lua": "evalsha", "functions": "fcall"}.get(self.kind, self.command.lower())

    @property
    def stats(self) -> tuple[str, ...]:
        """The commandstats names a call counts under: a pair's two commands' (one name for
        two Lua scripts)."""
        if not self.pairs_with:
            return (self.stat,)
        return tuple(dict.fromkeys((BY_NAME[self.pairs_with].stat, self.stat)))

    @property
    def commands_per_call(self) -> int:
        return 2 if self.pairs_with else 1

    def params(self, admitted: bool, random_keys: bool) -> tuple[str, ...]:
        if not admitted:
            return self.deny
        return self.random_admit if random_keys and self.random_admit else self.admit

    def call_keys(self, base: str) -> list[str]:
        """The keys one call names for the benchmark key `base`: `base` itself, or
        `{base}:1` ... `{base}:N`, hash-tagged so that they share a slot as RL.MULTI's keys
        must in a cluster, and so that every key of a call is found from `base`."""
        if self.keys == 1:
            return [base]
        return [f"{{{base}}}:{i}" for i in range(1, self.keys + 1)]


# The table of approaches. Module rows are used only if the server knows the command
# (COMMAND INFO), so adding a command is one line here. Order = order in the report.
APPROACHES = [
    Approach("INCR", "native", "INCR", (), (), reply=None),
    Approach("RL.TOKENBUCKET", "module", "RL.TOKENBUCKET",
             ("{limit}", SLOW_RATE), ("1", SLOW_RATE), lua_twin="Lua token bucket",
             counter="tokenbucket"),
    Approach("Lua token bucket", "lua", "token_bucket.lua",
             ("{limit}", SLOW_RATE), ("1", SLOW_RATE)),
    Approach("RL.SLIDING", "module", "RL.SLIDING",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}"), lua_twin="Lua sliding window",
             counter="sliding"),
    Approach("Lua sliding window", "lua", "sliding_window.lua",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}")),
    Approach("RL.FIXED", "module", "RL.FIXED",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}"), lua_twin="Lua fixed window",
             counter="fixed"),
    Approach("Lua fixed window", "lua", "fixed_window.lua",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}")),
    Approach("RL.SLIDINGLOG", "module", "RL.SLIDINGLOG",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}"), lua_twin="Lua sliding log",
             counter="slidinglog"),
    Approach("Lua sliding log", "lua", "sliding_log.lua",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}")),
    Approach("CL.THROTTLE", "module", "CL.THROTTLE",
             ("{burst}", "1", f"{GCRA_PERIOD_S}"), ("0", "1", f"{GCRA_PERIOD_S}"),
             reply="cell", lua_twin="Lua GCRA", counter="throttle"),
    Approach("Lua GCRA", "lua", "gcra.lua",
             ("{burst}", "1", f"{GCRA_PERIOD_S}"), ("0", "1", f"{GCRA_PERIOD_S}"),
             reply="cell"),
    # A partial grant of cost 1 grants 1 unit or none: field 1 is the units granted, so it
    # reads as `allowed`, and the module counts it as admitted or denied like a plain call.
    Approach("RL.TOKENBUCKET PARTIAL", "module", "RL.TOKENBUCKET",
             ("{limit}", SLOW_RATE, "1", "PARTIAL"), ("1", SLOW_RATE, "1", "PARTIAL"),
             lua_twin="Lua token bucket", counter="tokenbucket", single="RL.TOKENBUCKET"),
    # Three token buckets, all or nothing. Denied: only the last bucket is drained (the two
    # others have plenty), the usual way a multi-limit call is refused, so every bucket is
    # read and decided and the last one binds.
    Approach("RL.MULTI (3 buckets)", "module", "RL.MULTI",
             ("TOKENBUCKET", "{limit}", SLOW_RATE) * 3,
             ("TOKENBUCKET", "{limit}", SLOW_RATE) * 2 + ("TOKENBUCKET", "1", SLOW_RATE),
             lua_twin="Lua multi (3 buckets)", counter="multi", keys=3,
             single="RL.TOKENBUCKET", max_x_single=1.8, min_lua_factor=5),
    Approach("Lua multi (3 buckets)", "lua", "multi_token_bucket.lua",
             ("{limit}", SLOW_RATE) * 3, ("{limit}", SLOW_RATE) * 2 + ("1", SLOW_RATE),
             keys=3),
    # Pacing. Hot key: the queue (QUEUE_RATE): the first call takes the token, every later
    # one is admitted with a wait. Random keys: the admitted scenario's slow buckets with
    # MAXWAIT, admitted from tokens there (a queue would be full again, and its key gone,
    # 50 ms after a call: those calls would create keys). Denied: a drained bucket of
    # capacity 1 at 0.001 token/s, whose next token (1000 s away) is beyond MAXWAIT 1 s.
    Approach("RL.TOKENBUCKET MAXWAIT", "module", "RL.TOKENBUCKET",
             ("{limit}", QUEUE_RATE, "1", "MAXWAIT", MAX_WAIT_MS),
             ("1", SLOW_RATE, "1", "MAXWAIT", "1000"),
             random_admit=(f"{ADMIT_LIMIT}", SLOW_RATE, "1", "MAXWAIT", MAX_WAIT_MS),
             limit=1, lua_twin="Lua reservation", counter="tokenbucket",
             single="RL.TOKENBUCKET", min_lua_factor=5),
    Approach("Lua reservation", "lua", "reservation.lua",
             ("{limit}", QUEUE_RATE, "1", MAX_WAIT_MS), ("1", SLOW_RATE, "1", "1000"),
             random_admit=(f"{ADMIT_LIMIT}", SLOW_RATE, "1", MAX_WAIT_MS), limit=1),
    # In-flight limits. Hot key: a semaphore of HOT_HOLDERS holders whose calls come from
    # those same holders, so each renews one: the set keeps its size (a stream of new
    # holders would fill any limit) and the limit, ratelimit.max-holders' default, is
    # never reached. Random keys: 100k semaphores of one holder each, the same id on every
    # key (redis-benchmark would randomize a holder over the key space, and the sets would
    # grow from round to round), so each call renews it. Denied: a semaphore full with
    # HOT_HOLDERS other holders: the caller is looked for among all of them, then refused.
    Approach("RL.ACQUIRE", "module", "RL.ACQUIRE",
             ("{limit}", "{holder}", HOLDER_TTL_MS), (f"{HOT_HOLDERS}", "{holder}", HOLDER_TTL_MS),
             limit=SEMAPHORE_LIMIT, holders=HOT_HOLDERS, lua_twin="Lua semaphore",
             counter="acquire", single="RL.TOKENBUCKET", min_lua_factor=5),
    Approach("Lua semaphore", "lua", "semaphore.lua",
             ("{limit}", "{holder}", HOLDER_TTL_MS), (f"{HOT_HOLDERS}", "{holder}", HOLDER_TTL_MS),
             limit=SEMAPHORE_LIMIT, holders=HOT_HOLDERS),
    # A new holder acquires and releases (see `pairs_with`) on those semaphores: the hot
    # key keeps its 100 holders (a pair leaves it as it was), a random key its one; denied:
    # the acquire is refused by the full semaphore and the release finds nothing.
    Approach("RL.ACQUIRE + RL.RELEASE", "module", "RL.RELEASE", ("{holder}",), ("{holder}",),
             reply="int", pairs_with="RL.ACQUIRE", lua_twin="Lua semaphore + release",
             counter="release", single="RL.TOKENBUCKET", min_lua_factor=5),
    Approach("Lua semaphore + release", "lua", "semaphore_release.lua", ("{holder}",),
             ("{holder}",), reply="int", pairs_with="Lua semaphore"),
    # The Functions library (functions/ratelimit.lua) through FCALL: the same commands
    # without the module. "× Lua" compares each with the seed's Lua token bucket (the
    # target: no costlier), or for three buckets with the Lua multi.
    Approach("rl_tokenbucket (FCALL)", "functions", "rl_tokenbucket",
             ("{limit}", LIBRARY_HOT_RATE), ("1", SLOW_RATE),
             random_admit=(LIBRARY_RANDOM_LIMIT, SLOW_RATE), lua_twin="Lua token bucket"),
    Approach("rl_sliding (FCALL)", "functions", "rl_sliding",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}"), lua_twin="Lua token bucket"),
    Approach("rl_fixed (FCALL)", "functions", "rl_fixed",
             ("{limit}", f"{WINDOW_S}"), ("1", f"{WINDOW_S}"), lua_twin="Lua token bucket"),
    Approach("cl_throttle (FCALL)", "functions", "cl_throttle",
             ("{burst}", "1", "1"), ("0", "1", f"{GCRA_PERIOD_S}"),
             random_admit=("3999", "1", f"{GCRA_PERIOD_S}"), reply="cell",
             lua_twin="Lua token bucket"),
    Approach("rl_tokenbucket PARTIAL (FCALL)", "functions", "rl_tokenbucket",
             ("{limit}", LIBRARY_HOT_RATE, "1", "PARTIAL"), ("1", SLOW_RATE, "1", "PARTIAL"),
             random_admit=(LIBRARY_RANDOM_LIMIT, SLOW_RATE, "1", "PARTIAL"),
             lua_twin="Lua token bucket"),
    Approach("rl_multi (FCALL, 3 buckets)", "functions", "rl_multi",
             ("TOKENBUCKET", "{limit}", LIBRARY_HOT_RATE) * 3,
             ("TOKENBUCKET", "{limit}", LIBRARY_HOT_RATE) * 2 + ("TOKENBUCKET", "1", SLOW_RATE),
             random_admit=("TOKENBUCKET", LIBRARY_RANDOM_LIMIT, SLOW_RATE) * 3,
             lua_twin="Lua multi (3 buckets)", keys=3),
    Approach("rl_tokenbucket MAXWAIT (FCALL)", "functions", "rl_tokenbucket",
             ("{limit}", QUEUE_RATE, "1", "MAXWAIT", MAX_WAIT_MS),
             ("1", SLOW_RATE, "1", "MAXWAIT", "1000"),
             random_admit=(LIBRARY_RANDOM_LIMIT, SLOW_RATE, "1", "MAXWAIT", MAX_WAIT_MS),
             limit=1, lua_twin="Lua token bucket"),
]
BY_NAME = {a.name: a for a in APPROACHES}


@dataclass(frozen=True)
class Scenario:
    """A key pattern and whether calls are meant to be admitted."""

    name: str
    label: str
    admitted: bool
    random_keys: bool


SCENARIOS = [
    Scenario("hot", "1 hot key, admitted", admitted=True, random_keys=False),
    Scenario("random", "{keys} random keys, admitted", admitted=True, random_keys=True),
    Scenario("denied", "1 hot key, denied", admitted=False, random_keys=False),
]
PIPELINES = (1, 16)


# --------------------------------------------------------------------------------------
# A minimal RESP2 client: enough for setup, checks and INFO, without a dependency.


class RedisError(Exception):
    """An error reply."""


class Client:
    """One connection; `call` for a command, `pipeline` for many (sent in batches)."""

    def __init__(self, port: int, timeout: float = 60.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    @staticmethod
    def encode(args) -> bytes:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(parts)

    def read(self):
        line = self.reader.readline()
        if not line:
            raise ConnectionError("the server closed the connection")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            return RedisError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            size = int(body)
            if size < 0:
                return None
            return self.reader.read(size + 2)[:-2].decode(errors="replace")
        if kind == b"*":
            size = int(body)
            return None if size < 0 else [self.read() for _ in range(size)]
        raise ConnectionError(f"unexpected reply line {line!r}")

    def call(self, *args):
        self.sock.sendall(self.encode(args))
        reply = self.read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def pipeline(self, commands, batch: int = 1000) -> list:
        """Sends commands in batches; returns the replies (errors as RedisError values)."""
        replies = []
        for start in range(0, len(commands), batch):
            chunk = commands[start:start + batch]
            self.sock.sendall(b"".join(self.encode(c) for c in chunk))
            replies.extend(self.read() for _ in chunk)
        return replies

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section)
        pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {k: v for k, v in pairs}


# --------------------------------------------------------------------------------------
# The server we start, and the processes we run: never anything else.


def _die_with_parent() -> None:
    """In a child before exec: get SIGTERM if the benchmark dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def pin_prefix(cpus: list[int] | None) -> list[str]:
    """`taskset -c ...` to pin a child, when we pin and taskset exists."""
    if not cpus or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", ",".join(map(str, cpus))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A redis-server with the module, in a temp dir, on a free port; `stop()` ends it.

    The pid we watch is the server itself (taskset execs it), and only that pid is ever
    signalled.
    """

    def __init__(self, module: Path, cpus: list[int] | None):
        self.module = module
        self.cpus = cpus
        self.dir = Path(tempfile.mkdtemp(prefix="rl-bench-"))
        self.process: subprocess.Popen | None = None
        self.port = 0

    def start(self, databases: int) -> None:
        for _attempt in range(5):
            self.port = free_port()
            command = pin_prefix(self.cpus) + [
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"),
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--databases", str(databases), "--loadmodule", str(self.module),
            ]
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )
            if self._wait_ready():
                return
            self.stop()
            if "Address already in use" not in self.log_tail():
                break  # a real failure (e.g. the module did not load), not a port race
        raise RuntimeError("redis-server did not start; its log:\n" + self.log_tail())

    def _wait_ready(self, seconds: float = 15.0) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                client = Client(self.port, timeout=1)
                try:
                    if client.call("PING") == "PONG":
                        return True
                finally:
                    client.close()
            except (OSError, RedisError, ConnectionError):
                time.sleep(0.05)
        return False

    @property
    def pid(self) -> int:
        return self.process.pid

    def main_thread_cpu_s(self) -> float:
        """utime + stime of the main thread (the thread whose tid is the pid), in seconds."""
        with open(f"/proc/{self.pid}/task/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        # After "pid (comm)": field 3 is state, so utime (14) and stime (15) are [11], [12].
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def main_thread_runtime_s(self) -> float:
        """The same thread's on-CPU time, kept in nanoseconds by the scheduler (schedstat):
        the figure used, since utime+stime only moves in whole clock ticks."""
        with open(f"/proc/{self.pid}/task/{self.pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "".join((self.dir / "redis.log").read_text().splitlines(True)[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------------------
# Running redis-benchmark and reading the server's counters around it.


@dataclass
class Bench:
    """Everything a measurement needs: the server, a client, and the run's settings."""

    server: Server
    client: Client
    args: argparse.Namespace
    client_cpus: list[int] | None
    shas: dict[str, str] = field(default_factory=dict)
    dbs: dict[str, int] = field(default_factory=dict)
    running: subprocess.Popen | None = None
    cpu_per_call: dict[tuple, float] = field(default_factory=dict)  # last run of each cell

    def argv(self, approach: Approach, key: str, admitted: bool, holder: str = RUN_HOLDER,
             random_keys: bool = False) -> list[str]:
        """The command line for one call of `approach` on `key` (by `holder`, for in-flight
        limits) in an admitted or denied scenario, on the random keys or not."""
        values = {"limit": approach.limit, "burst": approach.limit - 1, "holder": holder}
        params = [p.format(**values) for p in approach.params(admitted, random_keys)]
        keys = approach.call_keys(key)
        if approach.kind == "lua":
            return ["EVALSHA", self.shas[approach.name], str(len(keys)), *keys, *params]
        if approach.kind == "functions":
            return ["FCALL", approach.command, str(len(keys)), *keys, *params]
        if approach.keys > 1:  # RL.MULTI's form: numkeys key [key ...]
            return [approach.command, str(len(keys)), *keys, *params]
        return [approach.command, key, *params]

    def select(self, approach: Approach) -> None:
        self.client.call("SELECT", self.dbs[approach.name])

    def run_benchmark(self, argv: list[str], db: int, clients: int, requests: int,
                      pipeline: int, keyspace: int) -> dict[str, float]:
        """Runs redis-benchmark once (`__rand_int__` over `keyspace` values if not 0);
        returns its CSV row (rps, latency percentiles)."""
        command = pin_prefix(self.client_cpus) + [
            "redis-benchmark", "-h", "127.0.0.1", "-p", str(self.server.port),
            "-c", str(clients), "-n", str(requests), "-P", str(pipeline),
            "--dbnum", str(db), "--csv",
        ]
        if keyspace:
            command += ["-r", str(keyspace)]
        self.running = subprocess.Popen(command + argv, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        preexec_fn=_die_with_parent)
        out, err = self.running.communicate()
        code, self.running = self.running.returncode, None
        rows = list(csv.DictReader(io.StringIO(out)))
        if code != 0 or not rows:
            raise RuntimeError(f"redis-benchmark failed ({code}): {err.strip() or out.strip()}")
        return {k: float(v) for k, v in rows[-1].items() if k != "test"}

    def command_stats(self, stats: tuple[str, ...]) -> tuple[int, int, int]:
        """(calls, usec, failed+rejected calls) of some commands so far, summed."""
        info = self.client.info("commandstats")
        totals = [0, 0, 0]
        for stat in stats:
            line = info.get(f"cmdstat_{stat}", "")
            values = dict(item.split("=") for item in line.split(",") if "=" in item)
            totals[0] += int(values.get("calls", 0))
            totals[1] += int(values.get("usec", 0))
            totals[2] += int(values.get("failed_calls", 0)) + int(values.get("rejected_calls", 0))
        return totals[0], totals[1], totals[2]

    def decisions(self, approach: Approach) -> tuple[int, int] | None:
        """(admitted, denied) so far from the module's INFO counters, if it has them."""
        if not approach.counter:
            return None
        info = self.client.info("ratelimit")
        prefix = f"ratelimit_{approach.counter}_"
        if prefix + "admitted" not in info:
            return None
        return int(info[prefix + "admitted"]), int(info[prefix + "denied"])

    def requests_for(self, cell: tuple, pipeline: int) -> int:
        """The run's size: the configured count, lengthened (up to 10x) once a previous
        round showed the run would use less than --min-run-cpu of server CPU, so that
        fast commands are not measured in a handful of 10 ms ticks."""
        base = self.args.unpipelined_requests if pipeline == 1 else self.args.requests
        estimate = self.cpu_per_call.get(cell)
        if not estimate:
            return base
        wanted = int(self.args.min_run_cpu / (estimate * 1e-6))
        return max(base, min(wanted, 10 * base, MAX_RUN))

    def timed(self, stats: tuple[str, ...], work) -> tuple[object, dict[str, float]]:
        """Runs `work()` in a CPU window: returns its result and the server main thread's
        on-CPU ns, clock ticks (s), wall time (s) and the calls, usec and failed calls of
        the commands `stats` over it. INFO is read outside the window (stats before CPU,
        CPU before stats), so its own cost is not charged to the command."""
        calls0, usec0, failed0 = self.command_stats(stats)
        cpu0 = self.server.main_thread_cpu_s()
        ns0 = self.server.main_thread_runtime_s()
        wall0 = time.perf_counter()
        result = work()
        wall1 = time.perf_counter()
        ns1 = self.server.main_thread_runtime_s()
        cpu1 = self.server.main_thread_cpu_s()
        calls1, usec1, failed1 = self.command_stats(stats)
        return result, {"ns": (ns1 - ns0) * 1e9, "ticks": cpu1 - cpu0, "wall": wall1 - wall0,
                        "calls": calls1 - calls0, "usec": usec1 - usec0,
                        "failed": failed1 - failed0}

    def measure(self, approach: Approach, pipeline: int, scenario: Scenario,
                key: str, holder: str) -> dict[str, float]:
        """One timed run: ops/s, main-thread CPU per call and in-command time per call."""
        cell = (approach.name, scenario.name, pipeline)
        requests = self.requests_for(cell, pipeline)
        decided0 = self.decisions(approach)
        if approach.pairs_with:
            ops, window = self.pair_run(approach, scenario, pipeline, requests)
        else:
            keyspace = self.args.keys if scenario.random_keys else approach.holders
            argv = self.argv(approach, key, scenario.admitted, holder, scenario.random_keys)
            row, window = self.timed(approach.stats, lambda: self.run_benchmark(
                argv, self.dbs[approach.name], self.args.clients, requests, pipeline,
                keyspace))
            ops = row["rps"]
        decided1 = self.decisions(approach)
        calls = window["calls"] // approach.commands_per_call
        if calls < requests:
            raise RuntimeError(f"{approach.name}: {calls} calls counted, {requests} sent")
        self.cpu_per_call[cell] = window["ns"] / 1e3 / calls
        return {
            "requests": requests,
            "ops": ops,
            # On-CPU time at nanosecond resolution; ticks (10 ms) are kept as a cross-check.
            "cpu_us": window["ns"] / 1e3 / calls,
            "cmd_us": window["usec"] / calls,
            "ticks_us": window["ticks"] * 1e6 / calls,
            "calls": calls,
            "failed": window["failed"],
            "admitted": decided1[0] - decided0[0] if decided0 and decided1 else None,
            "denied": decided1[1] - decided0[1] if decided0 and decided1 else None,
        }

    def pair_run(self, approach: Approach, scenario: Scenario, pipeline: int,
                 requests: int) -> tuple[float, dict[str, float]]:
        """`requests` pairs: an acquire by a new holder (`approach.pairs_with`), then its
        release, sent by `drive` in one CPU window; every reply is checked. At -P 16 a
        batch holds whole pairs, which Redis runs back to back, so a key holds at most one
        holder more than before; at -P 1 each connection can hold one between its two
        round trips (the hot key: up to 150). Returns pairs/s and the window."""
        acquire = BY_NAME[approach.pairs_with]
        rng = random.Random(f"{scenario.name}/{pipeline}")
        # Reply lines: RL.ACQUIRE's (and the Lua semaphore's) five integers, as an array,
        # and the release's integer.
        commands = []
        for n in range(requests):
            key = (random_key(rng.randrange(self.args.keys)) if scenario.random_keys
                   else f"rl:{scenario.name}")
            holder = holder_id(n, RELEASED)
            commands.append((Client.encode(self.argv(acquire, key, scenario.admitted, holder,
                                                     scenario.random_keys)), 6))
            commands.append((Client.encode(self.argv(approach, key, scenario.admitted,
                                                     holder)), 1))
        replies, window = self.drive(self.dbs[approach.name], commands, pipeline,
                                     approach.stats)
        want = b":1" if scenario.admitted else b":0"
        for raw in replies:
            lines = raw.split(b"\r\n")[:-1]
            for at in range(0, len(lines), 7):
                pair = lines[at:at + 7]
                if len(pair) != 7 or pair[0] != b"*5" or pair[1] != want or pair[6] != want:
                    raise RuntimeError(f"{approach.name}: unexpected replies {pair!r} in "
                                       f"{scenario.name} (wanted {want!r} twice)")
        return requests / window["wall"], window

    def drive(self, db: int, commands: list[tuple[bytes, int]], pipeline: int,
              stats: tuple[str, ...]) -> tuple[list[bytes], dict[str, float]]:
        """Sends `commands` (encoded, with the reply lines each gets back) as redis-benchmark
        would: --clients connections, each with a batch of `pipeline` commands in flight,
        the next batch sent when its replies are in. Calls are dealt to the connections in
        pairs (in order), so a pair's two commands share one. Replies are integers and
        arrays of integers, one line each, so they are counted here and parsed afterwards.
        Returns each connection's replies, raw, and the `timed` window of the sending.

        With one connection (a blocking round trip per batch) the server sleeps and wakes
        for every batch, which costs it more than the calls themselves at -P 1 on a quiet
        machine (about 30 µs a call, against 5 with 50 connections); with 50, INCR sent this
        way costs the server what it does from redis-benchmark."""
        clients = min(self.args.clients, max(1, len(commands) // 2))
        queues = [[] for _ in range(clients)]
        for at in range(0, len(commands), 2):
            queues[at // 2 % clients].extend(commands[at:at + 2])
        batches = [[(b"".join(c for c, _ in queue[at:at + pipeline]),
                     sum(lines for _, lines in queue[at:at + pipeline]))
                    for at in range(0, len(queue), pipeline)] for queue in queues]
        sockets = []
        for _ in range(clients):
            client = Client(self.server.port)
            client.call("SELECT", db)
            sockets.append(client)

        def send_all() -> list[bytes]:
            selector = selectors.DefaultSelector()
            state = {}
            for client, todo in zip(sockets, batches):
                if todo:
                    client.sock.sendall(todo[0][0])
                    selector.register(client.sock, selectors.EVENT_READ)
                    state[client.sock] = {"todo": todo, "next": 0, "buffer": b"", "lines": 0,
                                          "replies": []}
            busy = len(state)
            while busy:
                for ready, _ in selector.select():
                    sock = ready.fileobj
                    conn = state[sock]
                    data = sock.recv(1 << 16)
                    if not data:
                        raise ConnectionError("the server closed a benchmark connection")
                    conn["buffer"] += data
                    conn["lines"] += data.count(b"\n")
                    if conn["lines"] < conn["todo"][conn["next"]][1]:
                        continue
                    conn["replies"].append(conn["buffer"])
                    conn["buffer"], conn["lines"] = b"", 0
                    conn["next"] += 1
                    if conn["next"] < len(conn["todo"]):
                        sock.sendall(conn["todo"][conn["next"]][0])
                    else:
                        selector.unregister(sock)
                        busy -= 1
            selector.close()
            return [b"".join(state[client.sock]["replies"]) for client in sockets
                    if client.sock in state]

        try:
            return self.timed(stats, send_all)
        finally:
            for client in sockets:
                client.close()


# --------------------------------------------------------------------------------------
# Checks: the approach answers as expected, admitted runs admit, denied runs deny.


def five_integers(value) -> bool:
    return isinstance(value, list) and len(value) == 5 and all(isinstance(v, int) for v in value)


def well_formed(approach: Approach, reply) -> bool:
    """Five integers; for several keys RL.MULTI's seven elements: five integers, the binding
    index, and one array of five integers per key."""
    if approach.keys == 1:
        return five_integers(reply)
    return (isinstance(reply, list) and len(reply) == 7 and five_integers(reply[:5])
            and isinstance(reply[5], int) and isinstance(reply[6], list)
            and len(reply[6]) == approach.keys and all(map(five_integers, reply[6])))


def allowed(approach: Approach, reply) -> bool | None:
    """Whether a reply admits the call (None for INCR, which never denies)."""
    if approach.reply is None:
        return None
    if approach.reply == "int":
        if reply not in (0, 1):
            raise RuntimeError(f"{approach.name}: unexpected reply {reply!r}")
        return reply == 1
    if not well_formed(approach, reply):
        raise RuntimeError(f"{approach.name}: unexpected reply {reply!r}")
    return reply[0] == 1 if approach.reply == "rl" else reply[0] == 0


def remaining(approach: Approach, reply) -> int:
    return reply[1] if approach.reply == "rl" else reply[2]


def expect(approach: Approach, reply, admitted: bool, what: str) -> None:
    verdict = allowed(approach, reply)
    if verdict is not None and verdict != admitted:
        raise RuntimeError(f"{approach.name}: {what}: expected "
                           f"{'admitted' if admitted else 'denied'}, got {reply!r}")


def validate(bench: Bench, approach: Approach) -> str:
    """One call of each kind on scratch keys, before any timing; returns a sample reply."""
    c = bench.client
    bench.select(approach)
    if approach.pairs_with:  # a release: of a live holder, then of the same one again
        acquire = BY_NAME[approach.pairs_with]
        holder = holder_id(0, RELEASED)
        expect(acquire, c.call(*bench.argv(acquire, "check:release", True, holder)), True,
               "acquiring a holder to release")
        first = c.call(*bench.argv(approach, "check:release", True, holder))
        expect(approach, first, True, "releasing a live holder")
        expect(approach, c.call(*bench.argv(approach, "check:release", True, holder)), False,
               "releasing it again")
        c.call("FLUSHDB")
        return repr(first)
    first = c.call(*bench.argv(approach, "check:admit", admitted=True))
    if approach.reply is None:
        if first != 1:
            raise RuntimeError(f"{approach.name}: expected 1, got {first!r}")
    else:
        expect(approach, first, True, "first call on a fresh key")
        want = approach.limit - 1
        if remaining(approach, first) != want:
            raise RuntimeError(f"{approach.name}: remaining should be {want}: {first!r}")
        prepare_hot(bench, approach, "check:deny", admitted=False)
    c.call("FLUSHDB")
    return repr(first)


def prepare_hot(bench: Bench, approach: Approach, key: str, admitted: bool) -> None:
    """A fresh hot key: created by one admitted call, or drained by one (limit 1); for an
    in-flight limit, `holders` holders: the callers' own ids (admitted: each call renews
    one) or others (denied: the semaphore is full). A release's key is its acquire's. Then
    a sample call checks it (a release's runs check every call instead)."""
    bench.select(approach)
    bench.client.call("DEL", *matching_keys(bench.client, approach.call_keys(key)))
    maker = BY_NAME[approach.pairs_with] if approach.pairs_with else approach
    prefix = CALLERS if admitted else RESIDENTS
    holders = [holder_id(n, prefix) for n in range(max(1, maker.holders))]
    for reply in bench.client.pipeline([bench.argv(maker, key, admitted, holder)
                                        for holder in holders]):
        expect(maker, reply, True, f"preparing {key}")
    if not approach.pairs_with:
        check_sample(bench, approach, key, admitted, False, "before the run")


def check_sample(bench: Bench, approach: Approach, key: str, admitted: bool,
                 random_keys: bool, when: str):
    """One call that must be admitted (or denied). An in-flight limit's is by caller 0: a
    resident of an admitted hot key, no resident of a denied one, and the holder every
    random-key semaphore was created with."""
    bench.select(approach)
    call = bench.argv(approach, key, admitted, holder_id(0), random_keys)
    expect(approach, bench.client.call(*call), admitted, f"sample call on {key} {when}")


def matching_keys(client: Client, bases: list[str]) -> list[str]:
    """The keys of one call (`bases`) that exist, and those a Lua script derives from them
    (`base:*`); `bases` themselves if there are none, so the result can be DEL's arguments.
    One SCAN of the database for all of them (their common prefix), as it holds 100k+ keys."""
    keys, cursor = [], "0"
    pattern = os.path.commonprefix(bases) + "*"
    while True:
        cursor, batch = client.call("SCAN", cursor, "MATCH", pattern, "COUNT", 10000)
        keys.extend(k for k in batch if any(k == b or k.startswith(b + ":") for b in bases))
        if cursor == "0":
            return keys or bases


# --------------------------------------------------------------------------------------
# Setup: commands on the server, scripts, and 100k fresh limiters per approach.


def detect(client: Client) -> list[Approach]:
    """Native and Lua rows always; module rows whose command the server has; the library's
    rows if it loads (Redis 7.0+)."""
    try:
        client.call("FUNCTION", "LOAD", "REPLACE", LIBRARY.read_text())
        library = True
    except RedisError:
        library = False
    present = []
    for approach in APPROACHES:
        if approach.kind == "module":
            info = client.call("COMMAND", "INFO", approach.command)
            if not info or info[0] is None:
                continue
        if approach.kind == "functions" and not library:
            continue
        present.append(approach)
    return present


def load_scripts(bench: Bench) -> None:
    """Every script, including those of approaches not selected: a release needs its
    acquire's."""
    for approach in APPROACHES:
        if approach.kind == "lua":
            source = (LUA_DIR / approach.command).read_text()
            bench.shas[approach.name] = bench.client.call("SCRIPT", "LOAD", source)


# Every approach has its own database, so all use the same key names: equal key lengths
# keep the bytes-per-limiter figures comparable (jemalloc size classes).
# redis-benchmark -r gives every `__rand_int__` of a command its own random number, so a
# call on three keys names `{rl:A}:1 {rl:B}:2 {rl:C}:3` with independent A, B and C: not the
# three keys one call created, but create_limiters makes `{rl:n}:i` for every n and i, so
# each of them is an existing limiter all the same (a run creates no key).
RANDOM_KEYS = "rl:__rand_int__"


def random_key(n: int) -> str:
    """The key redis-benchmark makes of RANDOM_KEYS for the value n."""
    return f"rl:{n:012d}"


def create_limiters(bench: Bench, approach: Approach) -> dict[str, float]:
    """Creates the random-key scenario's limiters in the approach's own empty database.

    Doubles as the memory measurement: used_memory before and after, over the number of
    calls (keyspace dict and expires dict included, as they are part of what a limiter
    costs), so a multi-key approach is charged all the limiters one call checks; and
    MEMORY USAGE of one call's limiters (summed over their keys, as for the two-key script).
    """
    c, n = bench.client, bench.args.keys
    bench.select(approach)
    c.call("FLUSHDB")
    time.sleep(0.2)
    before = int(c.info("memory")["used_memory"])
    # A release's keys are its acquire's semaphores. Every semaphore gets one holder, the
    # same id on every key: the random-key runs renew it (see APPROACHES).
    maker = BY_NAME[approach.pairs_with] if approach.pairs_with else approach
    replies = c.pipeline([bench.argv(maker, random_key(i), True, holder_id(0), True)
                          for i in range(n)])
    errors = [r for r in replies if isinstance(r, RedisError)]
    if errors:
        raise RuntimeError(f"{approach.name}: {len(errors)} errors creating keys: {errors[0]}")
    for reply in replies[:: max(1, n // 100)]:
        expect(maker, reply, True, "creating the limiters")
    time.sleep(0.5)  # let incremental rehashing of the fresh dict finish
    after = int(c.info("memory")["used_memory"])
    sample = sum(int(c.call("MEMORY", "USAGE", k, "SAMPLES", "0") or 0)
                 for k in matching_keys(c, approach.call_keys(random_key(0))))
    return {"bytes_per_limiter": (after - before) / n, "memory_usage_sample": sample,
            "keys_in_db": c.call("DBSIZE")}


# --------------------------------------------------------------------------------------
# The run: rounds x scenarios x pipelining x approaches, interleaved.


def run_round(bench: Bench, approaches: list[Approach], round_no: int, log) -> list[dict]:
    """Every approach once per (scenario, -P); approaches rotate so none is always first."""
    results = []
    shift = round_no % len(approaches)
    order = approaches[shift:] + approaches[:shift]
    for scenario in SCENARIOS:
        for pipeline in PIPELINES:
            for approach in order:
                results.append(run_one(bench, approach, scenario, pipeline, round_no))
                r = results[-1]
                log(f"  round {round_no + 1} {scenario.name:<6} -P {pipeline:<2} "
                    f"{approach.name:<20} {r['ops']:>10.0f} ops/s {r['cpu_us']:7.2f} us/call")
    for approach in order:
        results.append(run_latency(bench, approach, round_no))
    return results


def run_one(bench: Bench, approach: Approach, scenario: Scenario, pipeline: int,
            round_no: int) -> dict:
    # A release's runs check every reply themselves; a sample call would release a holder.
    samples = not approach.pairs_with
    if scenario.random_keys:
        key, holder = RANDOM_KEYS, holder_id(0)
        sample = random_key((round_no * 7919 + pipeline) % bench.args.keys)
        if samples:
            check_sample(bench, approach, sample, True, True, "before the run")
    else:
        key, holder = f"rl:{scenario.name}", RUN_HOLDER
        sample = key
        prepare_hot(bench, approach, key, scenario.admitted)
    result = bench.measure(approach, pipeline, scenario, key, holder)
    if samples:
        check_sample(bench, approach, sample, scenario.admitted, scenario.random_keys,
                     "after the run")
    if result["failed"]:
        raise RuntimeError(f"{approach.name}: {result['failed']} failed calls in {scenario.name}")
    if result["admitted"] is not None:  # the module counts decisions: check every call
        expected = "admitted" if scenario.admitted else "denied"
        if result[expected] != result["calls"]:
            raise RuntimeError(f"{approach.name}: {result[expected]} of {result['calls']} calls "
                               f"{expected} in {scenario.name}")
    return {"approach": approach.name, "scenario": scenario.name, "pipeline": pipeline,
            "round": round_no, **result}


def run_latency(bench: Bench, approach: Approach, round_no: int) -> dict:
    """One client, no pipelining, hot admitted key: redis-benchmark's percentiles (none for
    a release, which redis-benchmark does not drive)."""
    result = {"approach": approach.name, "scenario": "latency", "round": round_no,
              "p50_ms": None, "p99_ms": None, "ops": None}
    if approach.pairs_with:
        return result
    key = "rl:latency"
    prepare_hot(bench, approach, key, admitted=True)
    row = bench.run_benchmark(bench.argv(approach, key, True), bench.dbs[approach.name], 1,
                              bench.args.latency_requests, 1, approach.holders)
    return {**result, "p50_ms": row["p50_latency_ms"], "p99_ms": row["p99_latency_ms"],
            "ops": row["rps"]}


# --------------------------------------------------------------------------------------
# Summaries and the report.


def median_of(runs: list[dict], key: str) -> float | None:
    """The median of a figure over the rounds; None for a figure a row does not have."""
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def summarize(approaches: list[Approach], runs: list[dict], memory: dict) -> dict:
    """Medians over the rounds, ratios to INCR, to the Lua twin and to the single-limit
    call, and noise figures."""
    rows = []
    for scenario in SCENARIOS:
        for pipeline in PIPELINES:
            cell = {a.name: [r for r in runs if r["approach"] == a.name and
                             r["scenario"] == scenario.name and r.get("pipeline") == pipeline]
                    for a in approaches}
            cpu = {name: median_of(rs, "cpu_us") for name, rs in cell.items()}
            for a in approaches:
                values = [r["cpu_us"] for r in cell[a.name]]
                rows.append({
                    "scenario": scenario.name, "pipeline": pipeline, "approach": a.name,
                    "ops": median_of(cell[a.name], "ops"), "cpu_us": cpu[a.name],
                    "cmd_us": median_of(cell[a.name], "cmd_us"),
                    "ticks_us": median_of(cell[a.name], "ticks_us"),
                    "x_incr": cpu[a.name] / cpu["INCR"] if "INCR" in cpu else None,
                    "x_lua": cpu[a.name] / cpu[a.lua_twin] if a.lua_twin in cpu else None,
                    "x_single": cpu[a.name] / cpu[a.single] if a.single in cpu else None,
                    "spread": (max(values) - min(values)) / cpu[a.name],
                    "cpu_us_rounds": values,
                })
    per_approach = []
    for a in approaches:
        lat = [r for r in runs if r["approach"] == a.name and r["scenario"] == "latency"]
        per_approach.append({"approach": a.name, "kind": a.kind, "keys": a.keys,
                             "p50_ms": median_of(lat, "p50_ms"), "p99_ms": median_of(lat, "p99_ms"),
                             **memory[a.name]})
    noise = []
    for row in rows:
        if row["approach"] == "INCR" and len(row["cpu_us_rounds"]) > 1:
            v = row["cpu_us_rounds"]
            noise.append({"scenario": row["scenario"], "pipeline": row["pipeline"],
                          "min": min(v), "max": max(v),
                          "cv": statistics.stdev(v) / statistics.mean(v)})
    return {"rows": rows, "approaches": per_approach, "incr_noise": noise,
            "targets": targets(approaches, rows)}


def targets(approaches: list[Approach], rows: list[dict]) -> list[dict]:
    """The rows of approaches compared with a single-limit call, with the verdict on their
    targets at -P 16 (None where they have none, or at -P 1)."""
    by_name = {a.name: a for a in approaches}
    compared = []
    for row in rows:
        a = by_name[row["approach"]]
        if row["x_single"] is None:
            continue
        lua_factor = 1 / row["x_lua"] if row["x_lua"] else None
        checks = []
        if row["pipeline"] == max(PIPELINES):
            if a.max_x_single is not None:
                checks.append(row["x_single"] <= a.max_x_single)
            if a.min_lua_factor is not None and lua_factor is not None:
                checks.append(lua_factor >= a.min_lua_factor)
        compared.append({"scenario": row["scenario"], "pipeline": row["pipeline"],
                         "approach": a.name, "single": a.single, "cpu_us": row["cpu_us"],
                         "x_single": row["x_single"], "lua_factor": lua_factor,
                         "met": all(checks) if checks else None})
    return compared


SCENARIO_LABEL = {s.name: s.label for s in SCENARIOS}


def fmt(value, pattern: str = "{:.2f}") -> str:
    return "–" if value is None else pattern.format(value)


def multi_key_names(summary: dict) -> str:
    """"A (3 keys), B (3 keys)" for the approaches whose calls check several limiters."""
    names = [f"{a['approach']} ({a['keys']} keys)" for a in summary["approaches"]
             if a["keys"] > 1]
    return ", ".join(names) or "multi-key approaches (none in this run)"


def single_limit_section(compared: list[dict], keys: int) -> list[str]:
    """Approaches against one single-limit call, with their targets; empty if none ran."""
    if not compared:
        return []
    goals = []
    for name in dict.fromkeys(c["approach"] for c in compared):
        a = next(a for a in APPROACHES if a.name == name)
        parts = []
        if a.max_x_single is not None:
            parts.append(f"× single ≤ {a.max_x_single:g}")
        if a.min_lua_factor is not None:
            parts.append(f"Lua ÷ this ≥ {a.min_lua_factor:g} ({a.lua_twin})")
        goals.append(f"{name}: {', '.join(parts) or 'the same as one call (× single ≈ 1)'}")
    out = [
        "", "## Against one single-limit call", "",
        "× single = CPU/call ÷ that of the single-limit command (column single) in the same "
        "scenario and -P; Lua ÷ this = the Lua twin's CPU/call ÷ this one's (how many times "
        f"cheaper the command is). Targets, checked at -P {max(PIPELINES)} (at -P 1 socket "
        f"I/O dominates every command): {'; '.join(goals)}.", "",
        "| Scenario | -P | Approach | single | CPU µs/call | × single | Lua ÷ this "
        "| targets met |",
        "|---|--:|---|---|--:|--:|--:|:-:|",
    ]
    verdict = {True: "yes", False: "**no**", None: "–"}
    for c in compared:
        out.append(
            f"| {SCENARIO_LABEL[c['scenario']].format(keys=f'{keys // 1000}k')} "
            f"| {c['pipeline']} | {c['approach']} | {c['single']} | {c['cpu_us']:.2f} "
            f"| {c['x_single']:.2f} | {fmt(c['lua_factor'], '{:.1f}')} | {verdict[c['met']]} |")
    return out


def pairs_note(meta: dict, summary: dict) -> list[str]:
    """What the pair rows measure, if any ran: not one command like the others."""
    names = [a["approach"] for a in summary["approaches"] if BY_NAME[a["approach"]].pairs_with]
    if not names:
        return []
    return [
        f"{' and '.join(names)}: a call is a pair, an acquire by a new holder and its "
        f"release (so CPU µs/call is per pair of commands): on the hot key, which keeps its "
        f"{HOT_HOLDERS} holders; on a random key, which keeps its one; denied: the full "
        "semaphore refuses the acquire and the release finds nothing. redis-benchmark "
        f"repeats one command, so this script sends them, as it would ({meta['clients']}"
        " connections, -P commands in flight on each); there is no latency run.", "",
    ]


def report(meta: dict, summary: dict) -> str:
    """The markdown report."""
    keys = meta["keys"]
    out = [
        "# Server benchmark: RL commands vs Lua scripts vs INCR", "",
        f"{meta['date']} · commit `{meta['commit']}` · redis-server {meta['redis_version']} · "
        f"{meta['cpus']} CPU(s), {meta['pinning']}",
        f"{meta['rounds']} round(s), interleaved; per run {meta['unpipelined_requests']} requests at "
        f"-P 1 and {meta['requests']} at -P 16 ({meta['clients']} clients), from round 2 "
        f"lengthened to use ≥ {meta['min_run_cpu']} s of server CPU (up to 10×); latency: "
        f"1 client, {meta['latency_requests']} requests. Figures are medians over the rounds.",
        f"Load average before / after: {meta['load_before']} / {meta['load_after']}. "
        f"Wall time {meta['wall_s']:.0f} s.", "",
        "## Throughput and server CPU per call", "",
        "CPU µs/call = server main-thread on-CPU time (schedstat, nanoseconds) ÷ calls of the "
        "command (INFO commandstats; "
        "Lua counted as `evalsha` calls); it includes reading, parsing and replying. "
        "In-command µs = commandstats `usec` per call (the command alone, inner "
        "`redis.call`s included). × INCR and × Lua compare CPU/call with INCR and with the "
        "Lua script of the same algorithm in the same scenario. Spread = (max − min) ÷ median "
        "of CPU/call across rounds.", "",
    ]
    out += pairs_note(meta, summary)
    out += [
        "| Scenario | -P | Approach | ops/s | CPU µs/call | in-command µs | × INCR | × Lua | spread |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in summary["rows"]:
        out.append(
            f"| {SCENARIO_LABEL[r['scenario']].format(keys=f'{keys // 1000}k')} | {r['pipeline']} "
            f"| {r['approach']} | {r['ops']:,.0f} | {r['cpu_us']:.2f} | {r['cmd_us']:.2f} "
            f"| {fmt(r['x_incr'])} | {fmt(r['x_lua'])} | {r['spread']:.0%} |")
    out += single_limit_section(summary["targets"], keys)
    out += [
        "", "## Latency (1 client, -P 1, hot key, admitted) and memory per limiter", "",
        f"Bytes/call's limiters = used_memory growth ÷ {keys:,} after {keys:,} admitted calls "
        "on fresh keys in an empty database: includes the keyspace and expires dicts. It is "
        "one limiter for single-key approaches and all the limiters of one call for "
        f"{multi_key_names(summary)}. MEMORY USAGE = the limiters of one such call "
        "(all their keys).", "",
        "| Approach | p50 ms | p99 ms | bytes/call's limiters | MEMORY USAGE "
        "| keys per 100k calls |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for a in summary["approaches"]:
        out.append(f"| {a['approach']} | {fmt(a['p50_ms'], '{:.3f}')} "
                   f"| {fmt(a['p99_ms'], '{:.3f}')} "
                   f"| {a['bytes_per_limiter']:.0f} | {a['memory_usage_sample']} "
                   f"| {a['keys_in_db'] * 100_000 // keys:,} |")
    out += ["", "## Noise", ""]
    if summary["incr_noise"]:
        out.append("INCR CPU µs/call across rounds (a floor that should not move):")
        out.append("")
        for n in summary["incr_noise"]:
            out.append(f"- {SCENARIO_LABEL[n['scenario']].format(keys=f'{keys // 1000}k')}, "
                       f"-P {n['pipeline']}: {n['min']:.2f}–{n['max']:.2f}, CV {n['cv']:.1%}")
    else:
        out.append("One round: no spread to report; run more rounds for a noise estimate.")
    worst = max(abs(r["ticks_us"] / r["cpu_us"] - 1) for r in summary["rows"])
    out += ["", f"Cross-check: utime+stime, which moves in clock ticks of "
            f"{1e3 / meta['clk_tck']:.0f} ms, agrees with the schedstat figures within "
            f"{worst:.1%} (worst row).", "",
            "Admission: a sample call before and after every run checks that admitted "
            "scenarios admit and denied ones deny (pairs: every reply is checked); "
            "module commands with INFO counters "
            "(`ratelimit_<name>_admitted/denied`) are checked on every call: "
            f"{', '.join(meta['counted']) or 'none'}.", "",
            "Module commands not on this server (not measured): "
            f"{', '.join(meta['missing']) or 'none'}.", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Orchestration.


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(BENCH_DIR), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def split_cpus() -> tuple[list[int] | None, list[int] | None, str]:
    """Server on one core, redis-benchmark on the others, if there are two or more."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None, "not pinned (one CPU)"
    if not shutil.which("taskset"):
        return None, None, "not pinned (no taskset)"
    return cpus[:1], cpus[1:], f"server pinned to CPU {cpus[0]}, client to {cpus[1:]}"


def draw_chart(out_dir: Path, venv: Path) -> None:
    """Runs bench/chart.py in a venv with matplotlib (created on first use); never fatal."""
    python = venv / "bin" / "python"
    try:
        if not python.exists() or subprocess.run([str(python), "-c", "import matplotlib"],
                                                 capture_output=True).returncode != 0:
            print(f"chart: installing matplotlib into {venv} (first use)", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "matplotlib"], check=True)
        subprocess.run([str(python), str(BENCH_DIR / "chart.py"), str(out_dir / "results.json"),
                        str(out_dir / "chart.png")], check=True)
        print(f"chart: {out_dir / 'chart.png'}", file=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"chart: skipped ({error}); the report does not need it", file=sys.stderr)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module", type=Path, required=True, help="the release module (.so)")
    p.add_argument("--out", type=Path, default=Path("target/bench"), help="output directory")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=40_000,
                   help="requests per -P 16 run (-P 1 runs send 1/4, about as long)")
    p.add_argument("--min-run-cpu", type=float, default=0.5,
                   help="seconds of server CPU a run should use; shorter runs are "
                        "lengthened from the second round on (0: never)")
    p.add_argument("--unpipelined-requests", type=int, help="per -P 1 run (--requests / 4)")
    p.add_argument("--latency-requests", type=int, help="1-client run (--requests / 20)")
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--keys", type=int, default=100_000, help="keys in the random-key scenario")
    p.add_argument("--only", default="", help="regex: run only matching approaches (+ INCR)")
    p.add_argument("--venv", type=Path, default=Path("target/bench-venv"))
    p.add_argument("--no-chart", action="store_true")
    args = p.parse_args()
    args.unpipelined_requests = args.unpipelined_requests or max(1000, args.requests // 4)
    args.latency_requests = args.latency_requests or max(1000, args.requests // 20)
    if max(args.requests, args.unpipelined_requests) > MAX_RUN:
        p.error(f"at most {MAX_RUN} requests per run (hot keys must not run out)")
    if not args.module.is_file():
        p.error(f"{args.module} not found: build it with `cargo build --release`")
    return args


def prepare(bench: Bench, log) -> tuple[list[Approach], list[str], dict]:
    """Picks the approaches, loads the scripts, validates each and creates its limiters."""
    client, only = bench.client, bench.args.only
    try:  # the sliding log's limit must fit the module's log cap, if it has one
        client.call("CONFIG", "SET", "ratelimit.max-log-entries", ADMIT_LIMIT)
    except RedisError:
        pass
    approaches = [a for a in detect(client) if a.name == "INCR" or re.search(only, a.name, re.I)]
    missing = [a.name for a in APPROACHES if a.kind == "module" and a not in approaches
               and re.search(only, a.name, re.I)]
    load_scripts(bench)
    memory = {}
    for db, approach in enumerate(approaches, start=1):
        bench.dbs[approach.name] = db
        sample = validate(bench, approach)
        memory[approach.name] = create_limiters(bench, approach)
        log(f"ready: {approach.name:<20} db {db}, first reply {sample}, "
            f"{memory[approach.name]['bytes_per_limiter']:.0f} B/limiter")
    return approaches, missing, memory


def describe_run(bench: Bench, runs: list[dict], missing: list[str], pinning: str,
                 started: float, load_before: tuple) -> dict:
    """What the report header needs to make the run reproducible and its noise visible."""
    args = bench.args
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "commit": git_commit(),
        "redis_version": bench.client.info("server")["redis_version"],
        "cpus": os.cpu_count(), "pinning": pinning, "rounds": args.rounds,
        "requests": args.requests, "unpipelined_requests": args.unpipelined_requests,
        "latency_requests": args.latency_requests, "clients": args.clients,
        "min_run_cpu": args.min_run_cpu,
        "counted": sorted({r["approach"] for r in runs if r.get("admitted") is not None}),
        "keys": args.keys, "clk_tck": os.sysconf("SC_CLK_TCK"), "missing": missing,
        "load_before": " ".join(f"{x:.2f}" for x in load_before),
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "wall_s": time.time() - started, "machine": platform.platform(),
    }


def main() -> int:
    args = parse_args()
    args.module = args.module.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    server_cpus, client_cpus, pinning = split_cpus()
    # Ctrl-C, SIGTERM and SIGHUP become exceptions, so the `finally` below stops the server
    # (SIGINT explicitly: a shell starting us in the background would have us ignore it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    started, load_before = time.time(), os.getloadavg()

    def log(message: str) -> None:
        print(f"[{time.time() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    server = Server(args.module, server_cpus)
    bench = None
    try:
        server.start(databases=len(APPROACHES) + 4)
        bench = Bench(server, Client(server.port), args, client_cpus)
        log(f"redis-server pid {server.pid} on 127.0.0.1:{server.port} ({pinning})")
        approaches, missing, memory = prepare(bench, log)
        runs = []
        for round_no in range(args.rounds):
            runs += run_round(bench, approaches, round_no, log)
        meta = describe_run(bench, runs, missing, pinning, started, load_before)
    except Exception:
        log("benchmark failed; server log tail:\n" + server.log_tail())
        raise
    finally:
        if bench and bench.running and bench.running.poll() is None:
            bench.running.kill()  # the redis-benchmark we started, by its pid
        server.cleanup()
    summary = summarize(approaches, runs, memory)
    text = report(meta, summary)
    (args.out / "report.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "runs": runs}, indent=1))
    print(text)
    log(f"report: {args.out / 'report.md'}")
    if not args.no_chart:
        draw_chart(args.out, args.venv)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; the server was stopped", file=sys.stderr)
        sys.exit(130)
