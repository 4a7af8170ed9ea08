"""The ``limits.aio`` storage, ``async+redis-ratelimit://host:port/db``
(``async+redis-ratelimits://`` for TLS), on ``redis.asyncio``: the sync storage's commands,
keys, timeout and failure modes (see :mod:`redis_ratelimit_client.contrib.limits_storage`,
whose import registers this scheme too).

```python
import redis_ratelimit_client.contrib.limits_storage  # registers both schemes
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

limiter = MovingWindowRateLimiter(storage_from_string("async+redis-ratelimit://127.0.0.1:6379"))
```
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis
import redis.asyncio
from limits.aio.storage import MovingWindowSupport, Storage

from ..protocol import StoreError
from ..store import RedisStore
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


class AsyncRedisRateLimitStorage(Storage, MovingWindowSupport):
    STORAGE_SCHEME = ["async+redis-ratelimit", "async+redis-ratelimits"]  # noqa: RUF012 (limits' own declaration)

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: float | str | bool) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        settings = settings_of(uri, secure_scheme=uri.startswith("async+redis-ratelimits:"))
        self.key_prefix = settings.key_prefix
        self.guard = Guard(settings.failure)
        self.client = redis.asyncio.Redis.from_url(settings.redis_url, **client_options(settings, options))
        self.store = RedisStore(self.client, backend=settings.backend)

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (redis.RedisError, StoreError)

    def prefixed_key(self, key: str) -> str:
        return f"{self.key_prefix}:{key}"

    async def _guarded(self, call: Callable[[], Awaitable[T]], when_open: T, when_closed: T) -> T:
        closed_circuit = self.guard.permit()
        if closed_circuit is not None:
            return self.guard.answer(closed_circuit, when_open, when_closed)
        sent = self.guard.now()
        try:
            result = await call()
        except (redis.RedisError, StoreError, OSError) as error:
            if not self.guard.unanswered(error, sent):
                raise
            return self.guard.answer(error, when_open, when_closed)
        self.guard.answered()
        return result

    async def _peek(self, kind: str, key: str, limit: int, window: int, cost: int = 1) -> list[int]:
        reply = await self.store.call("RL.PEEK", self.prefixed_key(key), kind, limit, max(window, 1), cost)
        return integers(reply)

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """The count after the hit, or more than the limit when refused (not counted)."""
        parsed = limit_of(key)

        async def call() -> int:
            if parsed is None:
                async with self.client.pipeline() as pipe:
                    pipe.incrby(self.prefixed_key(key), amount)
                    pipe.expire(self.prefixed_key(key), int(expiry), nx=True)
                    count, _ = await pipe.execute()
                return int(count)
            reply = await self.store.call("RL.FIXED", self.prefixed_key(key), parsed[0], max(int(expiry), 1), amount)
            return fixed_count(parsed[0], amount, reply)

        return await self._guarded(call, 0, refused_count(parsed, amount))

    async def get(self, key: str) -> int:
        parsed = limit_of(key)

        async def call() -> int:
            if parsed is None:
                value = await self.client.get(self.prefixed_key(key))
                return 0 if value is None else integer(value)
            return peeked_count(parsed[0], await self._peek("FIXED", key, *parsed))

        return await self._guarded(call, 0, refused_spent(parsed))

    async def get_expiry(self, key: str) -> float:
        parsed = limit_of(key)

        async def call() -> float:
            if parsed is None:
                ttl = await self.client.pttl(self.prefixed_key(key))
                return time.time() + max(int(ttl), 0) / 1000
            return time.time() + (await self._peek("FIXED", key, *parsed))[3] / 1000

        end = window_end(parsed)
        return await self._guarded(call, end, end)

    async def check(self) -> bool:
        """Whether the store answers a ``PING`` (at once ``False`` while the circuit is open)."""
        try:
            return bool(await self._guarded(self.client.ping, False, False))
        except (redis.RedisError, StoreError, OSError):
            return False

    async def reset(self) -> int | None:
        """Deletes every key under the storage's ``key_prefix`` (every ``limits``
        namespace), and no other; the number deleted."""
        removed = 0
        batch: list[bytes] = []
        async for key in self.client.scan_iter(match=scan_pattern(self.key_prefix), count=1000):
            batch.append(key)
            if len(batch) == 1000:
                removed += int(await self.client.delete(*batch))
                batch = []
        if batch:
            removed += int(await self.client.delete(*batch))
        return removed

    async def clear(self, key: str) -> None:
        await self.client.delete(self.prefixed_key(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        async def call() -> bool:
            reply = await self.store.call("RL.SLIDINGLOG", self.prefixed_key(key), limit, max(int(expiry), 1), amount)
            return bool(integers(reply)[0])

        return await self._guarded(call, True, False)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        async def call() -> tuple[float, int]:
            count = peeked_count(limit, await self._peek("SLIDINGLOG", key, limit, int(expiry)))
            now = time.time()
            if count <= 0:
                return now, 0
            # A call that needs exactly one unit to leave waits for the oldest.
            retry_ms = (await self._peek("SLIDINGLOG", key, limit, int(expiry), limit - count + 1))[2]
            return now + max(retry_ms, 0) / 1000 - int(expiry), count

        return await self._guarded(call, (time.time(), 0), (time.time(), limit))
