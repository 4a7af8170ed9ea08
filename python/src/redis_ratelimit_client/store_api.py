"""What the limiters need of a store (the Rust client's ``Store`` trait): the async
:class:`Store` (:class:`~redis_ratelimit_client.RateLimiter`'s), the sync :class:`SyncStore`
(:class:`~redis_ratelimit_client.SyncRateLimiter`'s), and what planning a check reads of
either (:class:`StoreLayout`). :class:`~redis_ratelimit_client.RedisStore`,
:class:`~redis_ratelimit_client.SyncRedisStore` and
:class:`~redis_ratelimit_client.MemoryStore` (both) are the package's; an object with these
methods stands in for them (a limiter given one calls it instead of wrapping a client).
:class:`HashStore` and :class:`SyncHashStore` are what the fleet's top-keys reports need
besides (the three stores have them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from .protocol import Acquire, Grant, Refund
from .replies import BackendName


class Capabilities(NamedTuple):
    """What the backend in use can do."""

    #: ``RL.MULTI``: limits sharing a slot in one call.
    multi: bool
    #: Partial grants (``PARTIAL MIN``): what leases and settling debts claim with.
    partial: bool


#: What a backend with ``RL.MULTI`` can do (the library too), and one without it: built once,
#: as a store answers them on every check.
BOTH = Capabilities(multi=True, partial=True)
NEITHER = Capabilities(multi=False, partial=False)


class StoreLayout(Protocol):
    """What planning a check reads of a store: its backend, what it can do, where keys live."""

    @property
    def backend(self) -> BackendName | None:
        """The backend in use, once known."""
        ...

    def capabilities(self) -> Capabilities: ...

    def slot(self, key: str) -> int | None:
        """The cluster hash slot of ``key``; ``None`` off a cluster (every key together)."""
        ...


@runtime_checkable
class Store(StoreLayout, Protocol):
    """An async store: each call bounded by the timeout it is given, raising ``StoreError``
    (or the client's error, which the limiter sorts) when it fails."""

    async def connect(self, timeout: float = ...) -> str:
        """Resolves the backend now; returns its name."""
        ...

    async def acquire(self, request: Acquire, timeout: float) -> Grant:
        """Takes units from one group of limits (all or nothing, or a partial grant)."""
        ...

    async def refund(self, request: Refund, timeout: float) -> None:
        """Gives units back to one group of limits (in-flight: the holder's slots)."""
        ...


@runtime_checkable
class SyncStore(StoreLayout, Protocol):
    """A sync store: the same calls, made on the calling thread."""

    def connect_blocking(self, timeout: float = ...) -> str: ...

    def acquire_blocking(self, request: Acquire, timeout: float) -> Grant: ...

    def refund_blocking(self, request: Refund, timeout: float) -> None: ...


class HashWrite(NamedTuple):
    """One hash the top-keys reporter writes (:mod:`.top`): its fields set (each value
    replacing the field's), then its absolute expiry."""

    key: str
    fields: tuple[tuple[str, str], ...]
    #: When the hash expires, in ms since the Unix epoch (``PEXPIREAT``).
    expire_at_ms: int


#: A hash as read: its fields and values.
HashFields = list[tuple[str, str]]


@runtime_checkable
class HashStore(Protocol):
    """An async store that keeps hashes: what the fleet's top-keys reports need (Redis, or
    the memory store). Each call is bounded by ``timeout`` and raises ``StoreError`` (or the
    client's error) when it fails; a write is never sent twice."""

    async def write_hashes(self, hashes: Sequence[HashWrite], timeout: float) -> None:
        """Writes ``hashes`` in one pipeline: ``HSET key field value ...``, then ``PEXPIREAT
        key ms``, for each."""
        ...

    async def read_hashes(self, keys: Sequence[str], timeout: float) -> list[HashFields]:
        """Each of ``keys``' hash whole (``HGETALL``, in one pipeline), in order; a missing
        key is an empty hash."""
        ...


@runtime_checkable
class SyncHashStore(Protocol):
    """A sync store that keeps hashes: the same calls, made on the calling thread."""

    def write_hashes_blocking(self, hashes: Sequence[HashWrite], timeout: float) -> None: ...

    def read_hashes_blocking(self, keys: Sequence[str], timeout: float) -> list[HashFields]: ...
