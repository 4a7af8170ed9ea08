"""What the ``limits`` storages (sync and async) share: the URI's settings, the client's
options (the timeout, no retries), the key prefix, the reading of the module's replies, and
what a call answers when the store does not (``failure=``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from limits.errors import ConfigurationError
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..clock import SYSTEM_CLOCK, Clock, LimiterClock
from ..protocol import StoreError, classify
from ..redis_boundary import ClientOptions
from ..state import Breaker

#: Seconds per granularity, as ``limits`` counts them.
_GRANULARITY = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 2592000, "year": 31104000}
#: The prefix of every key the storage writes (``limits``' own Redis storage's).
DEFAULT_KEY_PREFIX = "LIMITS"
#: What a call answers when the store does not: raise (``limits``' contract), admit, refuse.
FAILURE_MODES = ("error", "open", "closed")
#: The default ``timeout_ms``. Longer than the client's 50 ms: it is redis-py's socket timeout,
#: with no second look and no fallback decision behind it (under ``failure=error`` a timeout
#: is an error answer), so it must exceed a healthy store's worst stall on a loaded machine:
#: a hit's latency through the storage, 16 threads or 400 async hits at a time, at a load of
#: 9-11 on 2 cores, was p99 51-111 ms and at most 236 ms (bench/limits_storage_latency.py),
#: but in 1 of 4 runs of limits' suite at a load of 14 one call of a healthy server outlasted
#: 500 ms: a second, twice that.
DEFAULT_TIMEOUT_MS = 1000
#: Longest ``timeout_ms``: a minute.
MAX_TIMEOUT_MS = 60_000
#: A count no limit reaches: what a refused call on a key with no known limit answers.
_OVER_ANY_LIMIT = 2**63 - 1

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """A ``redis-ratelimit://`` URI, read: the Redis URL (its other query parameters kept
    for redis-py), the backend, the timeout, the failure mode and the key prefix."""

    redis_url: str
    backend: str
    timeout_s: float
    failure: str
    key_prefix: str


def _one(query: dict[str, list[str]], name: str, default: str) -> str:
    values = query.pop(name, [default])
    if len(values) != 1:
        raise ConfigurationError(f"redis-ratelimit storage: '{name}' is given {len(values)} times")
    return values[0]


def settings_of(uri: str, *, secure_scheme: bool) -> StorageSettings:
    """Reads the URI; a bad ``timeout_ms``, ``failure`` or ``key_prefix`` is refused by name."""
    parts = urlsplit(uri)
    query = parse_qs(parts.query, keep_blank_values=True)
    backend = _one(query, "backend", "auto")
    failure = _one(query, "failure", "error")
    if failure not in FAILURE_MODES:
        raise ConfigurationError(
            f"redis-ratelimit storage: failure={failure!r} is not one of {', '.join(FAILURE_MODES)}"
        )
    timeout_text = _one(query, "timeout_ms", str(DEFAULT_TIMEOUT_MS))
    if not timeout_text.isdigit() or not 1 <= int(timeout_text) <= MAX_TIMEOUT_MS:
        raise ConfigurationError(
            f"redis-ratelimit storage: timeout_ms={timeout_text!r} is not a whole number of ms in 1..{MAX_TIMEOUT_MS}"
        )
    key_prefix = _one(query, "key_prefix", DEFAULT_KEY_PREFIX)
    if not key_prefix:
        raise ConfigurationError("redis-ratelimit storage: key_prefix is empty (reset() would clear every key)")
    scheme = "rediss" if secure_scheme else "redis"
    redis_url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(query, doseq=True), ""))
    return StorageSettings(redis_url, backend, int(timeout_text) / 1000, failure, key_prefix)


def client_options(settings: StorageSettings, options: Mapping[str, object]) -> ClientOptions:
    """redis-py's options: the timeout on every read and connect, and no retry (a hit sent
    twice would be counted twice; a call the store did not answer is an unknown outcome,
    answered by the failure mode)."""
    if "retry" in options or "retry_on_timeout" in options or "retry_on_error" in options:
        raise ConfigurationError(
            "redis-ratelimit storage: retries are refused (a hit resent after a lost reply is counted twice)"
        )
    merged: ClientOptions = dict(options)
    merged.setdefault("socket_timeout", settings.timeout_s)
    merged.setdefault("socket_connect_timeout", settings.timeout_s)
    merged["retry"] = Retry(NoBackoff(), 0)
    return merged


def scan_pattern(key_prefix: str) -> str:
    """The ``SCAN MATCH`` pattern of the keys under ``key_prefix`` (glob characters escaped)."""
    escaped = "".join("\\" + char if char in "*?[]\\" else char for char in key_prefix)
    return f"{escaped}:*"


def limit_of(key: str) -> tuple[int, int] | None:
    """``(amount, window_s)`` from a key ``limits`` built, or ``None``."""
    parts = key.rsplit("/", 3)
    if len(parts) != 4 or parts[3] not in _GRANULARITY:
        return None
    try:
        amount, multiples = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return (amount, multiples * _GRANULARITY[parts[3]]) if amount > 0 and multiples > 0 else None


def integer(value: object) -> int:
    """An integer reply (or one of an array reply's items)."""
    if isinstance(value, (int, str, bytes)) and not isinstance(value, bool):
        return int(value)
    raise StoreError("server", f"unexpected reply: not an integer: {value!r}")


def integers(reply: object) -> list[int]:
    """An array reply of integers (``RL.PEEK``'s, ``RL.FIXED``'s five fields)."""
    if not isinstance(reply, (list, tuple)):
        raise StoreError("server", f"unexpected reply: not an array: {reply!r}")
    return [integer(field) for field in reply]


def fixed_count(limit: int, amount: int, reply: object) -> int:
    """``incr``'s answer from ``RL.FIXED``'s reply: the count after the hit, or more than the
    limit when refused (a refused hit is not counted)."""
    allowed, remaining = integers(reply)[:2]
    return limit - remaining if allowed else limit + amount


def peeked_count(limit: int, fields: list[int]) -> int:
    """The units spent, from ``RL.PEEK``'s reply for a cost of 1."""
    allowed, remaining = fields[0], fields[1]
    return limit - remaining - (1 if allowed else 0)


class Guard:
    """Bounds what a call to the store costs when the store does not answer: the circuit
    breaker (3 outages in a row open it for 0.5 s, the client's defaults) answers at once
    while open, and the failure mode says what: ``error`` raises (the store's error, or
    :class:`StoreError` while the circuit is open), ``open`` admits, ``closed`` refuses."""

    def __init__(self, failure: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.failure = failure
        self.breaker = Breaker()
        self._clock = LimiterClock(clock)

    def now(self) -> float:
        """Now, in the breaker's monotonic seconds (when a call is sent)."""
        return self._clock.seconds()

    def permit(self) -> StoreError | None:
        """``None``: call the store; else the error standing for it while the circuit is open."""
        skip = self.breaker.permit(self._clock.seconds())
        if skip is None:
            return None
        return StoreError("unavailable", f"the store did not answer: circuit open for {skip:.3f} s more")

    def answered(self) -> None:
        self.breaker.success(self._clock.seconds())

    def unanswered(self, error: BaseException, sent: float) -> bool:
        """Records a failed call (sent at ``sent``, :meth:`now`'s); whether the store did not
        answer (else it refused)."""
        if not classify(error).unavailable:
            return False
        self.breaker.failure(sent, self._clock.seconds())
        return True

    def answer(self, error: BaseException, when_open: T, when_closed: T) -> T:
        """What a call the store did not answer returns (or raises, under ``error``)."""
        if self.failure == "open":
            return when_open
        if self.failure == "closed":
            return when_closed
        raise error


def refused_count(parsed: tuple[int, int] | None, amount: int) -> int:
    """``incr``'s answer under ``failure=closed``: over the key's limit (``parsed``: the
    key's :func:`limit_of`)."""
    return _OVER_ANY_LIMIT if parsed is None else parsed[0] + amount


def refused_spent(parsed: tuple[int, int] | None) -> int:
    """``get``'s answer under ``failure=closed``: the whole limit spent."""
    return _OVER_ANY_LIMIT if parsed is None else parsed[0]


def window_end(parsed: tuple[int, int] | None) -> float:
    """``get_expiry``'s answer when the store did not answer: a window from now."""
    return time.time() + (0 if parsed is None else parsed[1])
