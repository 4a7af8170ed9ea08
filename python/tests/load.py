"""A loaded machine for the tests of exactness: busy-loop processes on every core for the
test's duration, stopped by pid afterwards (even when the test fails)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
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
