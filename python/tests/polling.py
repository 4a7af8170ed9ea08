"""The one way a test waits for something to happen: it polls the condition, bounded. A fixed
sleep either wastes time or, on a busy machine, is too short."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

POLL_EVERY_S = 0.02


def wait_for(condition: Callable[[], object], what: str, within_s: float = 10.0) -> None:
    """Calls ``condition`` every ``POLL_EVERY_S`` until it is true; fails naming ``what`` once
    ``within_s`` has passed."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {within_s} s waiting for {what}"
        time.sleep(POLL_EVERY_S)


async def wait_for_async(condition: Callable[[], object], what: str, within_s: float = 10.0) -> None:
    """``wait_for`` in a coroutine: ``condition`` may be a coroutine function (awaited), and
    the pauses let the event loop's other tasks run."""
    deadline = time.monotonic() + within_s
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        assert time.monotonic() < deadline, f"timed out after {within_s} s waiting for {what}"
        await asyncio.sleep(POLL_EVERY_S)
