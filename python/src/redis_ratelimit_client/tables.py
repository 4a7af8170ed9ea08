"""A bounded table of per-key state: what the limiter remembers per key set (the store's last
answers, remembered denials, the local fallback's states) never grows past a capacity,
however many distinct keys come.

Eviction order, when an entry would take the table past its capacity: expired entries first
(soonest expiry first), then the entry written longest ago. Every operation is O(1) or
O(log n) amortised: entries are kept in write order (an ``OrderedDict``), and their
expiries in a heap whose stale items (of entries rewritten or removed since) are skipped
when they surface and dropped by a rebuild once they outnumber the entries; nothing walks
the live entries. A table whose entries expire in the order they are written (a fixed
lifetime from a clock that does not go back: the store's last answers) needs no heap: its
oldest entries are its first to expire.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

#: Default capacity of each per-key table of a limiter (the Rust client's, and its deny
#: cache's): 100,000 key sets.
DEFAULT_MAX_KEYS = 100_000

V = TypeVar("V")

#: Stale heap items allowed beyond the live entries before the heap is rebuilt.
_STALE_SLACK = 1024


class _Entry(Generic[V]):
    __slots__ = ("expires", "value")

    def __init__(self, value: V, expires: float) -> None:
        self.value = value
        self.expires = expires


class KeyTable(Generic[V]):
    """Values by key, each with the instant it expires (any clock, as long as the caller
    uses one), at most ``capacity`` of them (``None``: no bound). Not thread-safe: the
    owner locks. Times compare as numbers: an entry has expired at ``now`` when its expiry
    is not after ``now``. With ``expiry_in_write_order`` an entry never expires before one
    written earlier (an earlier expiry is raised to the latest), and no heap is kept."""

    def __init__(self, capacity: int | None, *, expiry_in_write_order: bool = False) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"a table holds at least 1 entry (got a capacity of {capacity})")
        self.capacity = capacity
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()
        # (expiry, key): an item is stale unless its key's entry still expires then.
        self._expiries: list[tuple[float, str]] | None = None if expiry_in_write_order else []
        self._latest: float | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> V | None:
        """The value of ``key``, expired or not (the caller compares)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def expires(self, key: str) -> float | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.expires

    def put(self, key: str, value: V, expires: float, now: float) -> None:
        """Sets ``key`` (the most recently written now), expiring at ``expires``; past the
        capacity, drops the entries expired by ``now``, then the ones written longest ago."""
        expiries = self._expiries
        if expiries is None and self._latest is not None:
            expires = max(expires, self._latest)
        self._latest = expires
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(value, expires)
        else:
            entry.value, entry.expires = value, expires
            self._entries.move_to_end(key)
        if expiries is not None:
            heapq.heappush(expiries, (expires, key))
        if self.capacity is not None and len(self._entries) > self.capacity:
            self.expire(now)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        if expiries is not None and len(expiries) > 2 * len(self._entries) + _STALE_SLACK:
            self._expiries = [(e.expires, k) for k, e in self._entries.items()]
            heapq.heapify(self._expiries)

    def pop(self, key: str) -> V | None:
        entry = self._entries.pop(key, None)
        return None if entry is None else entry.value

    def expire(self, now: float) -> int:
        """Drops the entries expired by ``now``, soonest first; returns how many."""
        dropped = 0
        expiries, entries = self._expiries, self._entries
        if expiries is None:
            while entries:
                oldest, first = next(iter(entries.items()))
                if first.expires > now:
                    break
                del entries[oldest]
                dropped += 1
            return dropped
        while expiries and expiries[0][0] <= now:
            expires, key = heapq.heappop(expiries)
            entry = entries.get(key)
            if entry is not None and entry.expires == expires:
                del entries[key]
                dropped += 1
        return dropped

    def keys(self) -> Iterator[str]:
        """Keys from the one written longest ago to the latest."""
        return iter(self._entries)
