"""When a store call has timed out: when the store is silent, never when this process is late.

A call times out when nothing was read on its connection for a whole timeout since the call's
bytes had all left this process or since that connection's last reply, looked at only after
this process had the chance to read what was waiting on its sockets; or, however recently the
connection last read, when it was handed to the connection ``HARD_BOUND_TIMEOUTS`` timeouts
ago (a store that trickles replies, or one that stopped reading what is written to it). A
burst that keeps this process busy (its event loop, its threads) for longer than a timeout
therefore waits for the store's answers, which are read as soon as the process runs again; a
stopped, paused or unreachable store still fails every call within about a timeout. The Rust
client's ``limiter/groups.rs`` states the same rule.
"""

from __future__ import annotations

#: A call this many timeouts old fails however recently its connection read a reply.
HARD_BOUND_TIMEOUTS = 20


def timed_out(now: float, sent: float, written: float | None, read: float, timeout: float) -> bool:
    """Whether a call handed to its connection at ``sent``, whose bytes had all left at
    ``written`` (``None``: not yet), on a connection that last read a reply at ``read``
    (monotonic seconds), has timed out at ``now``."""
    if now - sent >= HARD_BOUND_TIMEOUTS * timeout:
        return True
    return written is not None and now - max(written, read) >= timeout


def next_look(sent: float, written: float | None, read: float, timeout: float) -> float:
    """The instant at which :func:`timed_out` may first hold (if nothing is read before)."""
    hard = sent + HARD_BOUND_TIMEOUTS * timeout
    return hard if written is None else min(max(written, read) + timeout, hard)
