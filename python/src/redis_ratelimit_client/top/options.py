"""How a limiter counts and reports its denials for the fleet's top keys (:class:`TopKeys`),
and what a reader asks (:class:`TopQuery`): the Rust client's ``TopKeys`` and ``TopQuery``,
with the same defaults and bounds."""

from __future__ import annotations

from dataclasses import dataclass

#: The most minutes a query reads (a day).
MAX_QUERY_MINUTES = 1_440
#: The most keys a query lists per limit.
MAX_QUERY_COUNT = 1_000


class TopError(ValueError):
    """A top-keys query or option out of bounds (the message names which)."""


def _whole(name: str, value: object, least: int, most: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise TopError(f"{name} must be a whole number from {least} to {most} (got {value!r})")
    return value


def _seconds(name: str, value: object, least: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not least <= value < float("inf"):
        raise TopError(f"{name} must be a number of seconds of at least {least} (got {value!r})")
    return float(value)


@dataclass(frozen=True, slots=True)
class TopKeys:
    """How a limiter counts every denial for the fleet's top denied keys and reports them to
    Redis (``RateLimiter(..., top_keys=TopKeys())``; ``docs/operating.md``, "Top denied
    keys").

    - ``capacity``: keys per summary (per policy and limit and minute; default 128): a key
      denied more than ``denials / capacity`` times in a minute on a replica is always
      listed, and no count is over by more;
    - ``max_summaries``: summaries a replica keeps per minute (default 256): past it, denials
      of another policy and limit are not counted;
    - ``report_every``: seconds between writes of the summaries that changed (default 1: at
      most one write a second);
    - ``retention``: seconds a minute's hash is kept after the minute ends (default 900);
    - ``window_minutes``: the window the concentration gauges are read over (default 5);
    - ``concentration_every``: seconds between reads of the concentration gauges (default
      10; 0: never).
    """

    capacity: int = 128
    max_summaries: int = 256
    report_every: float = 1.0
    retention: float = 900.0
    window_minutes: int = 5
    concentration_every: float = 10.0

    def __post_init__(self) -> None:
        _whole("capacity", self.capacity, 1, 65_536)
        _whole("max_summaries", self.max_summaries, 1, 65_536)
        _seconds("report_every", self.report_every, 0.01)
        _seconds("retention", self.retention, 0.0)
        _whole("window_minutes", self.window_minutes, 1, MAX_QUERY_MINUTES)
        _seconds("concentration_every", self.concentration_every, 0.0)


@dataclass(frozen=True, slots=True)
class TopQuery:
    """What to read of the fleet's top keys: ``policy`` (the service's domain), one
    ``limit`` or every limit of it, over ``minutes`` minutes (the current one and those
    before it; default 5), ``count`` keys per limit (default 10)."""

    policy: str
    limit: str | None = None
    minutes: int = 5
    count: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.policy, str) or not self.policy:
            raise TopError(f"bad top-keys query: the policy is empty ({self.policy!r})")
        if self.limit is not None and not isinstance(self.limit, str):
            raise TopError(f"bad top-keys query: the limit is a name or None (got {self.limit!r})")
        try:
            _whole("minutes", self.minutes, 1, MAX_QUERY_MINUTES)
            _whole("count", self.count, 1, MAX_QUERY_COUNT)
        except TopError as error:
            raise TopError(f"bad top-keys query: {error}") from None
