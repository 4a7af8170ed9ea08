"""The algorithms a limit can use, their parameters, and the two forms they take: the
arguments the module's commands expect, and the core's quota (the local fallback runs the
same arithmetic as the server).

Parameters are checked by the server's rules when a limit is built, with the server's words
(``limit must be greater than 0 (got '0')``), so a limit is refused here exactly when the
server would refuse it, not on the first request.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from ._kinds import BY_NAME, CONCURRENCY, FIXED_WINDOW, GCRA, KINDS, SLIDING_LOG, SLIDING_WINDOW, TOKEN_BUCKET, Kind
from .core import (
    AnyQuota,
    ConcurrencyParams,
    Decimal,
    FixedWindowParams,
    GcraParams,
    NumberError,
    NumberParseError,
    SlidingLogParams,
    SlidingWindowParams,
    TokenBucketParams,
)
from .core.concurrency import MAX_STORED_HOLDERS
from .core.gcra import GcraParamError, emission_interval_ns
from .core.numbers import I64_MAX, MAX_WINDOW_US, MIN_WINDOW_US, U64_MAX, parse_positive_integer
from .core.sliding_log import MAX_STORED_ENTRIES
from .core.token_bucket import MAX_REFILL_NS

#: A duration in seconds (``60``, ``0.25``, ``"1.5"``) or a ``timedelta``.
Seconds = int | float | str | decimal.Decimal | timedelta
#: A rate in tokens per second, kept as the exact decimal text sent to the server.
RateValue = int | float | str | decimal.Decimal


class AlgorithmError(ValueError):
    """An algorithm's parameters are out of range (the server's rules)."""


_RULES = {
    NumberError.MALFORMED: None,
    NumberError.NOT_FINITE: "must be a finite number",
    NumberError.NEGATIVE: "must be greater than 0",
    NumberError.ZERO: "must be greater than 0",
    NumberError.TOO_LARGE: "is too large",
}


def _quote(text: str) -> str:
    shown = "".join(c if " " <= c <= "~" else "?" for c in text[:32])
    return shown + ("..." if len(text) > 32 else "")


def or_list(names: Iterable[str]) -> str:
    """``a, b or c`` (the Rust ``kinds::or_list``)."""
    items = list(names)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _refuse(name: str, rule: str, got: str | None = None) -> AlgorithmError:
    suffix = "" if got is None else f" (got '{_quote(got)}')"
    return AlgorithmError(f"{name} {rule}{suffix}")


def positive_integer(name: str, value: object) -> int:
    """A positive integer argument, by the server's rule."""
    text = str(value)
    try:
        return parse_positive_integer(text.encode())
    except NumberParseError as error:
        raise _refuse(name, _RULES[error.kind] or "must be a positive integer", text) from None


def positive_decimal(name: str, text: str) -> Decimal:
    try:
        return Decimal.parse_positive(text.encode())
    except NumberParseError as error:
        raise _refuse(name, _RULES[error.kind] or "must be a positive decimal number", text) from None


def seconds_to_us(name: str, value: Seconds) -> int:
    """A duration as whole microseconds (refused when it is not whole microseconds)."""
    if isinstance(value, timedelta):
        us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    else:
        try:
            exact = decimal.Decimal(repr(value) if isinstance(value, float) else str(value))
        except decimal.InvalidOperation:
            raise _refuse(name, "must be a number of seconds", str(value)) from None
        if not exact.is_finite():
            raise _refuse(name, "must be a finite number", str(value))
        scaled = exact * 1_000_000
        if scaled != scaled.to_integral_value():
            raise _refuse(name, "must be whole microseconds", str(value))
        us = int(scaled)
    return us


def _window_us(name: str, value: Seconds) -> int:
    us = seconds_to_us(name, value)
    if us < MIN_WINDOW_US:
        raise _refuse(name, "must be at least 0.001 seconds (1 ms)", str(value))
    if us > MAX_WINDOW_US:
        raise _refuse(name, "must be at most 3155760000 seconds (100 years)", str(value))
    return us


def _decimal_text(digits: int, decimals: int) -> str:
    text = str(digits)
    if decimals == 0:
        return text
    padded = text.rjust(decimals + 1, "0")
    whole, fraction = padded[:-decimals], padded[-decimals:].rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def _shortest_rate(interval_ns: int) -> str:
    """The shortest decimal rate whose interval, ``ceil(1e9 / rate)``, is exactly
    ``interval_ns`` (``wire::encode``'s ``push_rate``: what the Rust client sends)."""
    wanted = max(interval_ns, 1)
    digits, decimals = 1_000_000_000, 0
    for decimals in range(30):
        scaled = 10**decimals * 1_000_000_000
        digits = -(-scaled // wanted)
        if -(-scaled // digits) == wanted:
            break
    return _decimal_text(digits, decimals)


@dataclass(frozen=True, slots=True)
class Rate:
    """A refill rate in tokens per second: the decimal text sent to the server (the shortest
    that gives the same interval, as the Rust client writes it: ``16.6666667`` for
    ``16.666666667``), and the interval of one token the server derives from it,
    ``ceil(1e9 / rate)`` ns."""

    text: str
    interval_ns: int

    @staticmethod
    def per_second(value: RateValue) -> Rate:
        if isinstance(value, bool):
            raise _refuse("rate", "must be a positive decimal number", str(value))
        text = repr(value) if isinstance(value, float) else str(value)
        rate = positive_decimal("rate", text)
        if rate.exceeds_power_of_ten(9):
            raise _refuse("rate", "must be at most 1000000000 tokens per second", text)
        interval = rate.ceil_reciprocal(1_000_000_000)
        if interval is None:
            raise AlgorithmError("capacity / rate must be at most 100 years (the time an empty bucket takes to refill)")
        interval = max(interval, 1)
        return Rate(_shortest_rate(interval), interval)

    @staticmethod
    def every(interval_ns: int) -> Rate:
        """The shortest decimal rate whose derived interval is exactly ``interval_ns``."""
        wanted = max(interval_ns, 1)
        for decimals in range(31):
            digits = -(-(10**decimals * 1_000_000_000) // wanted)
            rate = Rate.per_second(_decimal_text(digits, decimals))
            if rate.interval_ns == wanted:
                return rate
        raise AlgorithmError(f"no decimal rate gives one token every {interval_ns} ns")

    @staticmethod
    def per(tokens: int, period_ns: int) -> Rate:
        if tokens <= 0 or period_ns <= 0:
            raise AlgorithmError(f"{tokens} tokens per {period_ns} ns is not a rate")
        return Rate.every(-(-period_ns // tokens))


@dataclass(frozen=True, slots=True)
class Shape:
    """An algorithm in the core's integer terms (what the local fallback shares out)."""

    kind: Kind
    quota: int
    interval_ns: int = 0
    window_us: int = 0
    ttl_us: int = 0

    def share(self, replicas: int) -> Shape | None:
        """``1 / replicas`` of the quota, refilled ``replicas`` times slower; ``None`` below
        one unit."""
        replicas = max(replicas, 1)
        part = self.quota // replicas
        if part == 0:
            return None
        if self.kind in (TOKEN_BUCKET, GCRA):
            interval = self.interval_ns * replicas
            if interval > (U64_MAX if self.kind == TOKEN_BUCKET else I64_MAX):
                return None
            return Shape(self.kind, part, interval_ns=interval)
        return Shape(self.kind, part, window_us=self.window_us, ttl_us=self.ttl_us)

    def unit_quota(self) -> AnyQuota:
        """The core's quota for a call of one unit."""
        try:
            if self.kind == TOKEN_BUCKET:
                return TokenBucketParams.from_interval(self.quota, self.interval_ns)
            if self.kind == FIXED_WINDOW:
                return FixedWindowParams.new(self.quota, self.window_us)
            if self.kind == SLIDING_WINDOW:
                return SlidingWindowParams.new(self.quota, self.window_us)
            if self.kind == SLIDING_LOG:
                return SlidingLogParams.new(self.quota, self.window_us)
            if self.kind == GCRA:
                return GcraParams.from_interval(self.quota - 1, self.interval_ns)
            if self.kind == CONCURRENCY:
                return ConcurrencyParams.new(self.quota, self.ttl_us)
        except ValueError as error:
            raise AlgorithmError(f"parameters out of range: {error}") from None
        raise AlgorithmError(f"the Python client has no twin of kind {self.kind!r}")

    def call_quota(self, *, max_wait_ms: int | None = None, holder: str | None = None) -> AnyQuota:
        """The core's quota for one unit of a call: a token bucket paced up to
        ``max_wait_ms`` (``MAXWAIT``), an in-flight limit's slot held by ``holder``."""
        quota = self.unit_quota()
        if max_wait_ms is not None and isinstance(quota, TokenBucketParams):
            quota = quota.with_max_wait_ns(max_wait_ms * 1_000_000)
        if holder is not None and isinstance(quota, ConcurrencyParams):
            quota = quota.with_holder(holder.encode())
        return quota

    def window_ns(self) -> int:
        """The window the quota applies to: a window's length, the time an empty bucket (or
        GCRA) takes to refill; 0 for an in-flight limit."""
        if self.kind in (TOKEN_BUCKET, GCRA):
            return min(self.quota * self.interval_ns, U64_MAX)
        if self.kind == CONCURRENCY:
            return 0
        return self.window_us * 1_000

    def more_in_ns(self, remaining: int, reset_after_ms: int) -> int:
        """When at least one unit more than ``remaining`` is available (the ``t`` of
        ``RateLimit``), in ns: exact for buckets and fixed windows, ``reset_after`` for the
        sliding algorithms (an upper bound), 0 for an in-flight limit."""
        if remaining >= self.quota or self.kind == CONCURRENCY:
            return 0
        reset_ns = reset_after_ms * 1_000_000
        if self.kind not in (TOKEN_BUCKET, GCRA):
            return reset_ns
        # The missing units come back one interval apart, the last one at reset_after.
        return max(reset_ns - (self.quota - remaining - 1) * self.interval_ns, 0)


@dataclass(frozen=True, slots=True)
class Algorithm:
    """One rate-limiting algorithm with its parameters (the cost is per call).

    Build it with the class methods; the fields are the module's arguments.
    """

    #: The kind (``_kinds.py``, from the Rust ``kinds!`` table), a ``str`` equal to its short
    #: name: ``token``, ``sliding``, ``fixed``, ``log``, ``gcra``, ``concurrency`` (in-flight).
    kind: Kind
    #: The most units it can admit at once: capacity, limit, or GCRA's ``max_burst + 1``.
    quota: int
    rate: Rate | None = None
    window_us: int = 0
    max_burst: int = 0
    count: int = 0
    period_s: int = 0
    ttl_ms: int = 0

    @staticmethod
    def token_bucket(capacity: int, rate: RateValue | None = None, *, refill: Seconds | None = None) -> Algorithm:
        """``capacity`` tokens refilled at ``rate`` per second, or completely over ``refill``."""
        capacity = positive_integer("capacity", capacity)
        if (rate is None) == (refill is None):
            raise AlgorithmError("give either a rate (tokens per second) or a refill time, not both")
        if rate is not None:
            built = Rate.per_second(rate)
        else:
            assert refill is not None
            built = Rate.per(capacity, seconds_to_us("refill", refill) * 1_000)
        if capacity * built.interval_ns > MAX_REFILL_NS:
            raise AlgorithmError("capacity / rate must be at most 100 years (the time an empty bucket takes to refill)")
        return Algorithm(TOKEN_BUCKET, capacity, rate=built)

    @staticmethod
    def _windowed(kind: Kind, limit: int, window: Seconds) -> Algorithm:
        limit = positive_integer("limit", limit)
        window_us = _window_us("window", window)
        if kind == SLIDING_LOG:
            if limit > MAX_STORED_ENTRIES:
                raise _refuse(
                    "limit", f"must be at most {MAX_STORED_ENTRIES} (the ratelimit.max-log-entries setting)", str(limit)
                )
        elif limit > 4_294_967_295:
            raise _refuse("limit", "must be at most 4294967295", str(limit))
        return Algorithm(kind, limit, window_us=window_us)

    @staticmethod
    def fixed_window(limit: int, window: Seconds) -> Algorithm:
        """At most ``limit`` units per window aligned to the Unix epoch."""
        return Algorithm._windowed(FIXED_WINDOW, limit, window)

    @staticmethod
    def sliding_window(limit: int, window: Seconds) -> Algorithm:
        """The sliding-window counter: ``limit`` per window, approximate (see the README)."""
        return Algorithm._windowed(SLIDING_WINDOW, limit, window)

    @staticmethod
    def sliding_log(limit: int, window: Seconds) -> Algorithm:
        """The exact sliding window (one entry per admitted unit)."""
        return Algorithm._windowed(SLIDING_LOG, limit, window)

    @staticmethod
    def gcra(max_burst: int, count: int, period: Seconds) -> Algorithm:
        """GCRA as ``CL.THROTTLE``: ``max_burst + 1`` at once, ``count`` per ``period`` (whole seconds)."""
        period_us = seconds_to_us("period", period)
        if period_us <= 0 or period_us % 1_000_000:
            raise AlgorithmError("a GCRA period is a whole number of seconds (at least 1)")
        if max_burst < 0:
            raise _refuse("max_burst", "must be at least 0", str(max_burst))
        try:
            GcraParams.new(max_burst, count, period_us // 1_000_000)
        except GcraParamError as error:
            raise AlgorithmError(f"GCRA parameters refused: {error}") from None
        return Algorithm(GCRA, max_burst + 1, max_burst=max_burst, count=count, period_s=period_us // 1_000_000)

    @staticmethod
    def concurrency(limit: int, ttl: Seconds) -> Algorithm:
        """At most ``limit`` requests in flight; a slot never released frees itself after ``ttl``."""
        limit = positive_integer("limit", limit)
        ttl_us = seconds_to_us("ttl", ttl)
        if ttl_us % 1_000 or ttl_us < 1_000:
            raise AlgorithmError(f"an in-flight ttl is whole milliseconds, at least 1 (got {ttl})")
        if ttl_us > MAX_WINDOW_US:
            raise _refuse("ttl_ms", "must be at most 3155760000000 (100 years)", str(ttl_us // 1000))
        if limit > MAX_STORED_HOLDERS:
            raise _refuse(
                "limit", f"must be at most {MAX_STORED_HOLDERS} (the ratelimit.max-holders setting)", str(limit)
            )
        return Algorithm(CONCURRENCY, limit, ttl_ms=ttl_us // 1_000)

    @staticmethod
    def from_params(kind: Kind | str, params: Sequence[str]) -> Algorithm:
        """The algorithm of ``kind`` (its short name, or the ``Kind``) with the parameters its
        command takes (``("10", "2")`` for a token bucket of 10 refilled at 2 per second)."""
        info = BY_NAME.get(kind)
        if info is None:
            raise AlgorithmError(f"algorithm is {or_list(k.name for k in KINDS)} (got '{kind}')")
        kind = info.name
        if len(params) != len(info.params):
            raise AlgorithmError(
                f"{kind} takes {len(info.params)} parameters ({', '.join(p.name for p in info.params)})"
            )
        if kind == TOKEN_BUCKET:
            return Algorithm.token_bucket(positive_integer("capacity", params[0]), params[1])
        if kind == GCRA:
            max_burst, count, period = (int(value) for value in params)
            return Algorithm.gcra(max_burst, count, period)
        if kind == CONCURRENCY:
            ttl_ms = int(params[1])
            return Algorithm.concurrency(positive_integer("limit", params[0]), f"{ttl_ms // 1000}.{ttl_ms % 1000:03d}")
        return Algorithm._windowed(kind, positive_integer("limit", params[0]), params[1])

    @property
    def wire_name(self) -> str:
        """The module's ALGORITHM word for it (``RL.MULTI``'s, ``RL.REFUND``'s limit names)."""
        name = BY_NAME[self.kind].algorithm
        assert name is not None, f"{self.kind} has no ALGORITHM word"
        return name

    @property
    def command(self) -> str | None:
        """Its kind's own command (``RL.TOKENBUCKET``); ``None``: called through ``RL.MULTI``."""
        return BY_NAME[self.kind].command

    def wire_args(self) -> list[str]:
        """The parameters after the key, as the module's commands take them."""
        if self.kind == TOKEN_BUCKET:
            assert self.rate is not None
            return [str(self.quota), self.rate.text]
        if self.kind in (SLIDING_WINDOW, FIXED_WINDOW, SLIDING_LOG):
            return [str(self.quota), f"{self.window_us // 1_000_000}.{self.window_us % 1_000_000:06d}"]
        if self.kind == CONCURRENCY:
            return [str(self.quota), str(self.ttl_ms)]
        if self.kind == GCRA:
            return [str(self.max_burst), str(self.count), str(self.period_s)]
        raise AlgorithmError(f"the Python client has no twin of kind {self.kind!r}")

    def shape(self) -> Shape:
        if self.kind == TOKEN_BUCKET:
            assert self.rate is not None
            return Shape(TOKEN_BUCKET, self.quota, interval_ns=self.rate.interval_ns)
        if self.kind == GCRA:
            return Shape(GCRA, self.quota, interval_ns=emission_interval_ns(self.count, self.period_s))
        if self.kind == CONCURRENCY:
            return Shape(CONCURRENCY, self.quota, ttl_us=self.ttl_ms * 1_000)
        if self.kind in (SLIDING_WINDOW, FIXED_WINDOW, SLIDING_LOG):
            return Shape(self.kind, self.quota, window_us=self.window_us)
        raise AlgorithmError(f"the Python client has no twin of kind {self.kind!r}")

    def window_ns(self) -> int:
        return self.shape().window_ns()

    @property
    def in_flight(self) -> bool:
        return self.kind == CONCURRENCY
