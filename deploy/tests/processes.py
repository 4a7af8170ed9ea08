"""The processes of the live dashboard test: Redis with the module, the rate-limit service,
the demo service, rlctl and Prometheus, each on a free loopback port, in the run's own
temporary directory, and every one stopped by its pid when the run ends, however it ends
(``Fleet`` is a context manager). Nothing waits a fixed time: readiness is polled."""

from __future__ import annotations

import functools
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

# How long any process gets to show it is ready, and to exit once asked.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
POLL_EVERY_S = 0.05
# The store timeout of the service and the demo: debug builds on a shared 2-core machine
# stall past the default (tens of ms) now and then, and those fallbacks would blur what the
# test shows. A stopped Redis refuses connections at once, whatever the timeout.
STORE_TIMEOUT_MS = 1_000


class HarnessError(RuntimeError):
    """The test cannot go on: what is missing or what did not happen, said in full."""


def free_port() -> int:
    """A port free on 127.0.0.1 now (the process that binds it next may still lose a race:
    each starter retries on a bind failure)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
    """Polls `condition` until it holds; fails naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(POLL_EVERY_S)
    raise HarnessError(f"{what}: not within {timeout_s:.0f} s")


@dataclass
class Process:
    """One child process, its output kept (bounded) for the failure message."""

    name: str
    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    MAX_LINES = 2_000

    def follow(self) -> None:
        """Reads the child's merged output on a thread until it closes."""

        def read() -> None:
            assert self.popen.stdout is not None
            for line in self.popen.stdout:
                if len(self.lines) < self.MAX_LINES:
                    self.lines.append(line.rstrip("\n"))

        threading.Thread(target=read, name=f"{self.name}-output", daemon=True).start()

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    def line_after(self, prefix: str) -> str | None:
        """The rest of the first output line that contains `prefix`."""
        for line in list(self.lines):
            at = line.find(prefix)
            if at >= 0:
                return line[at + len(prefix) :].strip()
        return None

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within STOP_TIMEOUT_S: by pid."""
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=STOP_TIMEOUT_S)


class Fleet:
    """Every process the run started; leaving the `with` block stops them all, newest first."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[Process] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for process in reversed(self.processes):
            try:
                process.stop()
            except (OSError, subprocess.SubprocessError) as stop_error:
                print(f"live test: could not stop {process.name} (pid {process.popen.pid}): {stop_error}")

    def spawn(self, name: str, command: list[str]) -> Process:
        popen = subprocess.Popen(
            command,
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        process = Process(name, popen)
        self.processes.append(process)
        process.follow()
        return process

    def ready(self, process: Process, condition: Callable[[], bool]) -> None:
        """Waits for `condition`, failing at once (with the log) if the process exits."""

        def up() -> bool:
            if not process.running():
                raise HarnessError(f"{process.name} exited ({process.popen.returncode})")
            return condition()

        try:
            wait_for(f"{process.name} ready", up)
        except HarnessError as error:
            raise HarnessError(f"{error}\n{process.name}'s output:\n{process.output()}") from None


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            status: int = response.status
            return status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_redis(fleet: Fleet, module: Path) -> tuple[Process, int]:
    """redis-server with the module, no persistence, in its own directory."""
    data = fleet.directory / "redis"
    data.mkdir()
    for _ in range(5):
        port = free_port()
        process = fleet.spawn(
            "redis-server",
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(data),
                "--save",
                "",
                "--appendonly",
                "no",
                "--loadmodule",
                str(module),
            ],
        )
        try:
            fleet.ready(process, functools.partial(redis_ping, port))
            return process, port
        except HarnessError:
            if "Address already in use" not in process.output():
                raise
    raise HarnessError("redis-server: no free port after 5 tries")


def start_service(fleet: Fleet, binary: Path, redis_url: str, config: Path) -> tuple[Process, str]:
    """The rate-limit service; its HTTP listener (the JSON API and /metrics) on a port it
    picks itself, read back from its log. gRPC is on a picked port too (unused here)."""
    process = fleet.spawn(
        "redis-ratelimit-server",
        [
            str(binary),
            "--redis",
            redis_url,
            "--config",
            str(config),
            "--grpc-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--watch-ms",
            "100",
            "--timeout-ms",
            str(STORE_TIMEOUT_MS),
        ],
    )
    fleet.ready(process, lambda: process.line_after("HTTP API on ") is not None)
    address = process.line_after("HTTP API on ") or ""
    return process, "http://" + address.split()[0]


def start_demo(fleet: Fleet, binary: Path, name: str, redis_url: str, replicas: int) -> tuple[Process, str]:
    """One replica of the demo service (the client library's example), limits from the
    policy store (--plans), a token bucket of 20 refilled over 10 s by default."""
    process = fleet.spawn(
        name,
        [
            str(binary),
            "--redis",
            redis_url,
            "--listen",
            "127.0.0.1:0",
            "--limit",
            "20",
            "--window",
            "10",
            "--replicas",
            str(replicas),
            "--timeout-ms",
            str(STORE_TIMEOUT_MS),
            "--plans",
        ],
    )
    fleet.ready(process, lambda: process.line_after("listening on ") is not None)
    return process, "http://" + (process.line_after("listening on ") or "")


def run_rlctl(binary: Path, redis_url: str, *arguments: str) -> None:
    done = subprocess.run(
        [str(binary), "--redis", redis_url, "--who", "live-dashboard-test", *arguments],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise HarnessError(f"rlctl {' '.join(arguments)} failed ({done.returncode}): {done.stderr.strip()}")


def start_prometheus(fleet: Fleet, config: Path) -> tuple[Process, str]:
    """Prometheus on a free loopback port, its TSDB in the run's directory."""
    for _ in range(5):
        port = free_port()
        process = fleet.spawn(
            "prometheus",
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={fleet.directory / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
        )
        url = f"http://127.0.0.1:{port}"
        try:
            fleet.ready(process, functools.partial(http_ok, url + "/-/ready"))
            return process, url
        except HarnessError:
            if "address already in use" not in process.output():
                raise
    raise HarnessError("prometheus: no free port after 5 tries")
