"""Storages for the ``limits`` library (the engine of Flask-Limiter and slowapi), registered
for ``redis-ratelimit://host:port/db`` (``redis-ratelimits://`` for TLS) and, for
``limits.aio``, ``async+redis-ratelimit://`` (``async+redis-ratelimits://``): change only the
``storage_uri`` and decisions become atomic and on the server's clock, on the module's
commands or the Functions library (``?backend=functions`` forces one).

```python
import redis_ratelimit_client.contrib.limits_storage  # registers the schemes
limiter = Limiter(key_func=get_remote_address, storage_uri="redis-ratelimit://127.0.0.1:6379")
```

- **Fixed windows** (``FixedWindowRateLimiter``) are ``RL.FIXED``: the limit is read from the
  key ``limits`` builds (``.../<amount>/<multiples>/<granularity>``); a hit over the limit is
  refused *without being counted* (``limits``' own Redis storage counts it, so a client that
  keeps retrying never gets through); windows are aligned to the Unix epoch (a per-minute
  limit resets on the minute, the same instant for every replica), not started by a first hit.
- **Moving windows** (``MovingWindowRateLimiter``) are ``RL.SLIDINGLOG``, the exact sliding
  window, up to the server's ``ratelimit.max-log-entries`` (10,000) per limit.
- The sliding window counter strategy is not offered (its storage interface computes the
  estimate on the client; use the module's ``RL.SLIDING`` through the client instead).
- **Keys**: every key is written under ``key_prefix`` (``LIMITS:`` by default, as ``limits``'
  Redis storage), and ``reset()`` deletes exactly the keys under it (every namespace of
  ``limits``, nothing else).
- **When the store does not answer**: every call waits at most ``timeout_ms`` (1,000 by
  default: redis-py's socket timeout on reads and connects, above a healthy store's worst
  latency on a loaded machine, see ``_limits_common.DEFAULT_TIMEOUT_MS``), is never resent (a
  hit sent twice would count twice), and three calls in a row that the store did not answer
  (calls in flight together count as one) open a circuit for 0.5 s in which calls do not
  wait. ``failure=error`` (the default, ``limits``' contract) raises the store's error
  (``limits.errors.StorageError`` with ``wrap_exceptions=True``), so Flask-Limiter's and
  slowapi's ``swallow_errors`` and in-memory fallback decide;
  ``failure=open`` admits (``hit``/``test`` true, ``get`` 0); ``failure=closed`` refuses
  (``hit``/``test`` false, ``get`` the limit). ``reset()`` and ``clear()`` always raise.
  A call the store did not answer may still have been counted (an unknown outcome).

URI parameters: ``backend``, ``timeout_ms``, ``failure``, ``key_prefix``; the others go to
redis-py (``redis.Redis.from_url``), as do the keyword options (``retry`` is refused).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import redis
from limits.storage import MovingWindowSupport, Storage

from ..protocol import StoreError
from ..store import SyncRedisStore
from ._limits_common import (
    Guard,
    client_options,
    fixed_count,
    integer,
    integers,
    limit_of,
    peeked_count,
    refused_count,
    refused_spent,
    scan_pattern,
    settings_of,
    window_end,
)

T = TypeVar("T")


class RedisRateLimitStorage(Storage, MovingWindowSupport):
    STORAGE_SCHEME = ["redis-ratelimit", "redis-ratelimits"]  # noqa: RUF012 (limits' own declaration)

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: float | str | bool) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        settings = settings_of(uri, secure_scheme=uri.startswith("redis-ratelimits:"))
        self.key_prefix = settings.key_prefix
        self.guard = Guard(settings.failure)
        self.client = redis.Redis.from_url(settings.redis_url, **client_options(settings, options))
        self.store = SyncRedisStore(self.client, backend=settings.backend)

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (redis.RedisError, StoreError)

    def prefixed_key(self, key: str) -> str:
        return f"{self.key_prefix}:{key}"

    def _guarded(self, call: Callable[[], T], when_open: T, when_closed: T) -> T:
        closed_circuit = self.guard.permit()
        if closed_circuit is not None:
            return self.guard.answer(closed_circuit, when_open, when_closed)
        sent = self.guard.now()
        try:
            result = call()
        except (redis.RedisError, StoreError, OSError) as error:
            if not self.guard.unanswered(error, sent):
                raise
            return self.guard.answer(error, when_open, when_closed)
        self.guard.answered()
        return result

    def _peek(self, kind: str, key: str, limit: int, window: int, cost: int = 1) -> list[int]:
        reply = self.store.call("RL.PEEK", self.prefixed_key(key), kind, limit, max(window, 1), cost)
        return integers(reply)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """The count after the hit, or more than the limit when refused (not counted)."""
        parsed = limit_of(key)

        def call() -> int:
            if parsed is None:
                with self.client.pipeline() as pipe:
                    pipe.incrby(self.prefixed_key(key), amount)
                    pipe.expire(self.prefixed_key(key), int(expiry), nx=True)
                    count, _ = pipe.execute()
                return int(count)
            reply = self.store.call("RL.FIXED", self.prefixed_key(key), parsed[0], max(int(expiry), 1), amount)
            return fixed_count(parsed[0], amount, reply)

        return self._guarded(call, 0, refused_count(parsed, amount))

    def get(self, key: str) -> int:
        parsed = limit_of(key)

        def call() -> int:
            if parsed is None:
                value = self.client.get(self.prefixed_key(key))
                return 0 if value is None else integer(value)
            return peeked_count(parsed[0], self._peek("FIXED", key, *parsed))

        return self._guarded(call, 0, refused_spent(parsed))

    def get_expiry(self, key: str) -> float:
        parsed = limit_of(key)

        def call() -> float:
            if parsed is None:
                ttl = self.client.pttl(self.prefixed_key(key))
                return time.time() + max(int(ttl), 0) / 1000
            return time.time() + self._peek("FIXED", key, *parsed)[3] / 1000

        end = window_end(parsed)
        return self._guarded(call, end, end)

    def check(self) -> bool:
        """Whether the store answers a ``PING`` (at once ``False`` while the circuit is open)."""
        try:
            return bool(self._guarded(self.client.ping, False, False))
        except (redis.RedisError, StoreError, OSError):
            return False

    def reset(self) -> int | None:
        """Deletes every key under the storage's ``key_prefix`` (every ``limits``
        namespace), and no other; the number deleted."""
        removed = 0
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=scan_pattern(self.key_prefix), count=1000):
            batch.append(key)
            if len(batch) == 1000:
                removed += int(self.client.delete(*batch))
                batch = []
        if batch:
            removed += int(self.client.delete(*batch))
        return removed

    def clear(self, key: str) -> None:
        self.client.delete(self.prefixed_key(key))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        def call() -> bool:
            reply = self.store.call("RL.SLIDINGLOG", self.prefixed_key(key), limit, max(int(expiry), 1), amount)
            return bool(integers(reply)[0])

        return self._guarded(call, True, False)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        def call() -> tuple[float, int]:
            count = peeked_count(limit, self._peek("SLIDINGLOG", key, limit, int(expiry)))
            now = time.time()
            if count <= 0:
                return now, 0
            # A call that needs exactly one unit to leave waits for the oldest.
            retry_ms = self._peek("SLIDINGLOG", key, limit, int(expiry), limit - count + 1)[2]
            return now + max(retry_ms, 0) / 1000 - int(expiry), count

        return self._guarded(call, (time.time(), 0), (time.time(), limit))


# The async storage registers its schemes when this module is imported.
from . import limits_storage_async  # noqa: E402, F401
