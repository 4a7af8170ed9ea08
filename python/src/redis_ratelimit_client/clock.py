"""The limiter's clock (the Rust client's ``clock.rs``): every reading of the time by the
limiter, its leases, deny cache, breaker, local fallback and the plans follower goes through
a :class:`Clock`, injected (``RateLimiter(..., clock=...)``; :data:`SYSTEM_CLOCK` by default),
so a test of lease lifetimes, breaker periods or the fallback's windows moves a
:class:`FakeClock` by hand and waits for nothing.

Store calls' timeouts are not the limiter's time: they stay on this process's monotonic clock
(:mod:`redis_ratelimit_client.timing`), as the Rust client's stay on Tokio's timer; so do the
background sweeper's and the plans follower's pauses between rounds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """Where the limiter reads the time."""

    def monotonic_ns(self) -> int:
        """Nanoseconds since an arbitrary instant; never less than an earlier reading."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch, by the wall clock (which may step)."""
        ...


class SystemClock:
    """This process's clocks: ``time.monotonic_ns`` and ``time.time_ns``."""

    __slots__ = ()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


#: The clock a limiter reads unless given another.
SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that moves only when :meth:`advance`\\ d, for tests. Hand one to the limiter
    (and to a :class:`~redis_ratelimit_client.MemoryStore`) and move them together; its
    monotonic and wall readings move as one."""

    #: Where a fake clock's wall time starts: 2026-01-01T00:00:00Z (the Rust
    #: ``FakeClock::START_US``).
    START_NS = 1_767_225_600_000_000_000
    #: Where its monotonic time starts: 1,000 s, as a machine's uptime (small, as the system
    #: clock's: monotonic seconds as a float keep sub-nanosecond steps).
    MONOTONIC_START_NS = 1_000_000_000_000

    def __init__(self, start_ns: int = START_NS) -> None:
        self._wall_start_ns = start_ns
        self._elapsed_ns = 0
        self._lock = threading.Lock()

    def monotonic_ns(self) -> int:
        return self.MONOTONIC_START_NS + self._elapsed_ns

    def wall_ms(self) -> int:
        return (self._wall_start_ns + self._elapsed_ns) // 1_000_000

    def advance(self, seconds: float) -> None:
        """Moves the clock forward by ``seconds`` (whole nanoseconds; never back)."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward (got {seconds!r} s)")
        with self._lock:
            self._elapsed_ns += round(seconds * 1_000_000_000)


class LimiterClock:
    """A :class:`Clock` as the limiter reads it: monotonic seconds (leases, the deny cache,
    the breaker, store latencies) and Unix microseconds that never go back (the local
    fallback's decisions: the monotonic clock anchored to the wall clock once, so a wall-clock
    step neither refills local limits early nor freezes them). On the system clock both read
    ``time`` directly (a check reads them several times)."""

    __slots__ = ("clock", "seconds", "unix_us")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        anchor_ns, anchor_us = clock.monotonic_ns(), clock.wall_ms() * 1_000
        monotonic_ns = time.monotonic_ns if type(clock) is SystemClock else clock.monotonic_ns

        def unix_us() -> int:
            return anchor_us + (monotonic_ns() - anchor_ns) // 1_000

        #: Now, in monotonic seconds.
        self.seconds: Callable[[], float] = (
            time.monotonic if type(clock) is SystemClock else lambda: clock.monotonic_ns() / 1e9
        )
        #: Now, in Unix microseconds that never go back.
        self.unix_us: Callable[[], int] = unix_us

    def wall_ms(self) -> int:
        return self.clock.wall_ms()
