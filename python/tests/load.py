"""A loaded machine for the tests of exactness: busy-loop processes on every core for the
test's duration, stopped by pid afterwards (even when the test fails), and a redis-server
that still gets the CPU it needs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator

#: The cores of the machine the suite runs on (the project's CI and shared machine: 2).
CORES = 2


@contextlib.contextmanager
def cpu_burners(count: int = CORES) -> Iterator[None]:
    """``count`` processes spinning on the CPU, so the test's own threads and event loop run late."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL) for _ in range(count)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


#: The niceness the flood tests give their redis-server (the default is 0; lower runs first).
STORE_NICENESS = -10


def favour_store(pid: int) -> None:
    """Runs the test's redis-server ahead of the CPU burners and of every test process, as a
    Redis on a host of its own runs: a healthy store, so that a test of exactness measures the
    client's timing, not the store's starvation (on the shared 2-core machine an unfavoured
    redis-server went unscheduled for 50-350 ms now and then under the burners: its silence,
    by the timeout's rule). Needs root or CAP_SYS_NICE; without, says so."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, STORE_NICENESS)
    except PermissionError:
        warnings.warn(
            "cannot raise redis-server's priority (needs root or CAP_SYS_NICE): on a loaded machine "
            "the store itself may be starved past the 50 ms timeout and checks fall back",
            stacklevel=2,
        )
