"""A storage for the ``limits`` library (the engine of Flask-Limiter and slowapi), registered
for ``redis-ratelimit://host:port/db`` (``redis-ratelimits://`` for TLS): change only the
``storage_uri`` and decisions become atomic and on the server's clock, on the module's
commands or the Functions library (``?backend=functions`` forces one).

```python
import redis_ratelimit_client.contrib.limits_storage  # registers the scheme
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
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import redis
from limits.storage import MovingWindowSupport, Storage

from ..protocol import StoreError
from ..store import SyncRedisStore

#: Seconds per granularity, as ``limits`` counts them.
_GRANULARITY = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 2592000, "year": 31104000}


def _limit_of(key: str) -> tuple[int, int] | None:
    """``(amount, window_s)`` from a key ``limits`` built, or ``None``."""
    parts = key.rsplit("/", 3)
    if len(parts) != 4 or parts[3] not in _GRANULARITY:
        return None
    try:
        amount, multiples = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return (amount, multiples * _GRANULARITY[parts[3]]) if amount > 0 and multiples > 0 else None


def _int(value: Any) -> int:
    return int(value.decode() if isinstance(value, bytes) else value)


class RedisRateLimitStorage(Storage, MovingWindowSupport):
    STORAGE_SCHEME = ["redis-ratelimit", "redis-ratelimits"]  # noqa: RUF012 (limits' own declaration)

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        parts = urlsplit(uri)
        query = parse_qs(parts.query)
        backend = query.pop("backend", ["auto"])[0]
        scheme = "rediss" if parts.scheme == "redis-ratelimits" else "redis"
        url = urlunsplit((scheme, parts.netloc, parts.path, "", ""))
        self.client = redis.Redis.from_url(url, **options)
        self.store = SyncRedisStore(self.client, backend=backend)

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (redis.RedisError, StoreError)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """The count after the hit, or more than the limit when refused (not counted)."""
        parsed = _limit_of(key)
        if parsed is None:
            with self.client.pipeline() as pipe:
                pipe.incrby(key, amount)
                pipe.expire(key, int(expiry), nx=True)
                count, _ = pipe.execute()
            return int(count)
        limit = parsed[0]
        allowed, remaining, *_ = self.store.call("RL.FIXED", key, limit, max(int(expiry), 1), amount)
        return limit - _int(remaining) if _int(allowed) else limit + amount

    def _peek(self, kind: str, key: str, limit: int, window: int, cost: int = 1) -> list[int]:
        reply = self.store.call("RL.PEEK", key, kind, limit, max(window, 1), cost)
        return [_int(field) for field in reply]

    def get(self, key: str) -> int:
        parsed = _limit_of(key)
        if parsed is None:
            value = self.client.get(key)
            return 0 if value is None else _int(value)
        allowed, remaining, *_ = self._peek("FIXED", key, *parsed)
        return parsed[0] - remaining - (1 if allowed else 0)

    def get_expiry(self, key: str) -> float:
        parsed = _limit_of(key)
        if parsed is None:
            ttl = self.client.pttl(key)
            return time.time() + max(int(ttl), 0) / 1000
        fields = self._peek("FIXED", key, *parsed)
        return time.time() + fields[3] / 1000

    def check(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def reset(self) -> int | None:
        """Deletes every key of ``limits``' namespace (``LIMITER/...``)."""
        removed = 0
        for key in self.client.scan_iter(match="LIMITER*", count=1000):
            removed += int(self.client.delete(key))
        return removed

    def clear(self, key: str) -> None:
        self.client.delete(key)

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        allowed, *_ = self.store.call("RL.SLIDINGLOG", key, limit, max(int(expiry), 1), amount)
        return bool(_int(allowed))

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        allowed, remaining, *_ = self._peek("SLIDINGLOG", key, limit, int(expiry))
        count = limit - remaining - (1 if allowed else 0)
        now = time.time()
        if count <= 0:
            return now, 0
        # A call that needs exactly one unit to leave waits for the oldest.
        retry_ms = self._peek("SLIDINGLOG", key, limit, int(expiry), limit - count + 1)[2]
        return now + max(retry_ms, 0) / 1000 - int(expiry), count
