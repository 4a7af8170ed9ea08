"""What the limiter keeps in memory: the circuit breaker, remembered denials, the store's last
answers (what the local fallback continues from and owes), and leases (the Rust client's
``breaker.rs``, ``deny_cache.rs``, ``limiter/answers.rs``, ``lease.rs``). Thread-safe: the
sync limiter calls them from many threads."""

from __future__ import annotations

import asyncio
import copy
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, TypeAlias

from .decision import CACHE, Decision
from .replies import BackendName, View
from .tables import DEFAULT_MAX_KEYS, KeyTable

#: A lease's lock: the async limiter's (``asyncio.Lock``) or the sync one's.
LeaseLock: TypeAlias = "asyncio.Lock | threading.Lock"  # threading.Lock is a factory at run time


class Breaker:
    """Opens after ``failures`` outages in a row and probes every ``open_for`` seconds.

    A stall is not an outage: calls in flight together count as one failure (a failure counts
    only if its call was sent after the last counted one), and a call that timed out is not an
    outage if the store answered another call since it was sent.
    """

    def __init__(self, failures: int = 3, open_for: float = 0.5) -> None:
        self.failures = max(failures, 1)
        self.open_for = open_for
        self._lock = threading.Lock()
        self._state: Literal["closed", "open", "half-open"] = "closed"
        self._count = 0
        self._last_counted: float | None = None
        self._until = 0.0
        self._since = 0.0
        self._answered_at: float | None = None

    def permit(self, now: float) -> float | None:
        """``None``: call the store (perhaps as the probe); else skip, open this much longer."""
        with self._lock:
            if self._state == "closed":
                return None
            if self._state == "open" and self._until > now:
                return self._until - now
            if self._state == "half-open" and now - self._since < self.open_for:
                return self.open_for - (now - self._since)
            self._state, self._since = "half-open", now
            return None

    def success(self, now: float) -> bool:
        """A call reached the store; whether the circuit was not closed before."""
        with self._lock:
            recovered = self._state != "closed"
            self._state, self._count, self._last_counted = "closed", 0, None
            self._answered_at = now if self._answered_at is None else max(self._answered_at, now)
            return recovered

    def answered_since(self, sent: float) -> bool:
        with self._lock:
            return self._answered_at is not None and self._answered_at >= sent

    def failure(self, sent: float, now: float) -> bool:
        """A call sent at ``sent`` found the store out of reach; whether this opened it."""
        with self._lock:
            if self._answered_at is not None and self._answered_at >= sent:
                return False
            if self._state == "closed":
                if self._last_counted is not None and sent <= self._last_counted:
                    return False
                self._count += 1
                if self._count >= self.failures:
                    self._state, self._until = "open", now + self.open_for
                    return True
                self._last_counted = now
                return False
            self._state, self._until = "open", now + self.open_for
            return False

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._state != "closed"


@dataclass(slots=True)
class _Denial:
    at: float
    cost: int
    decision: Decision


class DenyCache:
    """Store denials remembered until their ``retry_after`` (waits are rounded up, so a
    remembered denial never denies what the store would admit). At most ``max_keys`` key
    sets: past it, expired denials go first, then the one remembered longest ago (only a
    saving is lost: the store decides that key set again). O(log n) a denial."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self._entries: KeyTable[_Denial] = KeyTable(max_keys)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key_set: str, cost: int, now: float) -> Decision | None:
        with self._lock:
            denial = self._entries.get(key_set)
            until = self._entries.expires(key_set)
        if denial is None or until is None or until <= now or cost < denial.cost:
            return None
        elapsed_ms = int((now - denial.at) * 1000)
        decision = copy.copy(denial.decision)
        decision.source = CACHE
        decision.outcome = "denied"
        decision.retry_after_ms = max(math.ceil((until - now) * 1000), 0)
        decision.limits = [copy.copy(limit) for limit in denial.decision.limits]
        for limit in decision.limits:
            if limit.retry_after_ms is not None:
                limit.retry_after_ms = max(limit.retry_after_ms - elapsed_ms, 0)
            limit.reset_after_ms = max(limit.reset_after_ms - elapsed_ms, 0)
            limit.more_in_ns = max(limit.more_in_ns - int((now - denial.at) * 1e9), 0)
        return decision

    def insert(self, key_set: str, cost: int, decision: Decision, now: float) -> None:
        wait = decision.retry_after_ms
        if wait is None or wait <= 0 or decision.backend is None:
            return
        with self._lock:
            self._entries.expire(now)
            self._entries.put(key_set, _Denial(now, cost, decision), now + wait / 1000, now)

    def purge(self, now: float) -> None:
        with self._lock:
            self._entries.expire(now)

    def forget(self, key_set: str) -> None:
        """Drops the key set's denial: units were given back to it (a refund), so the store
        may admit before the remembered ``retry_after``."""
        with self._lock:
            self._entries.pop(key_set)


class StoreDenial(NamedTuple):
    """A store's denial as an answer records it: its wait, and the cost it was for."""

    wait_ms: int
    cost: int


class Seed(NamedTuple):
    """The store's last answer for a key set, to start the local states from."""

    views: list[tuple[int, View]]
    answered_at_us: int


@dataclass(slots=True)
class _Answer:
    views: list[tuple[int, View]]
    answered_at_us: int
    #: Until when (Unix µs) the store's denial holds, and for calls of what cost.
    denied: tuple[int, int] | None
    seeded: bool
    owed: int


class Answers:
    """The store's last answer per key set (what the fallback continues from) and the units
    the fallback admitted since (owed to the store, charged when it answers again).

    Each is kept for the policy's longest window (at least a second), and at most
    ``max_keys`` key sets: past it, expired entries go first, then the one answered longest
    ago (units owed count as an answer: a debt is the key set's latest news). An evicted key
    set has no last answer, so its fallback starts from a fresh share, and what it owed is
    forgotten (as a replica that restarts forgets it)."""

    def __init__(self, keep_us: int, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        # A fixed lifetime on a clock that never goes back: entries expire in write order.
        self._entries: KeyTable[_Answer] = KeyTable(max_keys, expiry_in_write_order=True)
        self._keep_us = max(keep_us, 1_000_000)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, key_set: str, views: list[tuple[int, View]], denied: StoreDenial | None, now: int) -> None:
        """``denied``: the answer's denial, if it was one."""
        until = None if denied is None else (now + denied.wait_ms * 1000, denied.cost)
        with self._lock:
            self._entries.expire(now)
            entry = self._entries.get(key_set)
            if entry is None:
                entry = _Answer(list(views), now, until, False, 0)
            else:
                entry.views, entry.answered_at_us, entry.denied, entry.seeded = list(views), now, until, False
            self._entries.put(key_set, entry, now + self._keep_us, now)

    def denied_for(self, key_set: str, cost: int, now: int) -> int | None:
        """How much longer (ms) the store's last denial holds for a call of ``cost``."""
        with self._lock:
            entry = self._entries.get(key_set)
            if entry is None or entry.denied is None:
                return None
            until, denied_cost = entry.denied
        left = until - now
        return -(-left // 1000) if cost >= denied_cost and left > 0 else None

    def seed(self, key_set: str, now: int) -> Seed | None:
        """The answer to seed the local states from, once per answer."""
        with self._lock:
            entry = self._entries.get(key_set)
            expires = self._entries.expires(key_set)
            if entry is None or expires is None or entry.seeded or expires <= now:
                return None
            entry.seeded = True
            return Seed(list(entry.views), entry.answered_at_us)

    def owe(self, key_set: str, units: int, now: int) -> None:
        with self._lock:
            entry = self._entries.get(key_set)
            if entry is None:
                entry = _Answer([], now, None, True, 0)
            entry.owed += units
            # Never sooner than the entry's expiry: the table keeps expiries in write order.
            self._entries.put(key_set, entry, now + self._keep_us, now)

    def take_owed(self, key_set: str, now: int) -> int | None:
        with self._lock:
            entry = self._entries.get(key_set)
            expires = self._entries.expires(key_set)
            if entry is None or expires is None:
                return None
            if expires <= now:
                entry.owed = 0
                return None
            owed, entry.owed = entry.owed, 0
            return owed or None

    def owed(self, key_set: str) -> int:
        with self._lock:
            entry = self._entries.get(key_set)
            return 0 if entry is None else entry.owed


@dataclass(slots=True)
class LastClaim:
    """How a lease's last claim ended, and when (monotonic seconds): what requests that
    waited for it take."""

    at: float
    result: Literal["granted", "denied", "failed"]
    minimum: int = 0
    views: list[tuple[int, View]] = field(default_factory=list)
    binding: int = 0
    backend: BackendName | None = None


@dataclass(slots=True)
class LeaseSlot:
    """One key set's lease: units claimed and not yet spent, until ``expires``."""

    keys: tuple[str, ...]
    lock: LeaseLock
    units: int = 0
    expires: float = 0.0
    views: list[tuple[int, View]] = field(default_factory=list)
    backend: BackendName | None = None
    last_claim: LastClaim | None = None
    claim_units: int = 0
    waiting: int = 0
    busy: bool = False


class Leases:
    """A policy's leases by key set; each behind its own lock (asyncio or threading), so
    concurrent requests for one key wait for a single claim. At most ``max_keys`` key sets
    (a lease holds units claimed from the store, so none is evicted): past it a new key set
    is checked without a lease until the sweeper has given back expired ones."""

    def __init__(self, lock_factory: Callable[[], LeaseLock], max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self._slots: dict[str, LeaseSlot] = {}
        self._lock_factory = lock_factory
        self._lock = threading.Lock()
        self._max_keys = max_keys

    def __len__(self) -> int:
        return len(self._slots)

    def has_room(self, key_set: str) -> bool:
        """Whether ``key_set`` has a lease or may get one."""
        with self._lock:
            return len(self._slots) < self._max_keys or key_set in self._slots

    def slot(self, key_set: str, keys: tuple[str, ...]) -> LeaseSlot:
        with self._lock:
            slot = self._slots.get(key_set)
            if slot is None:
                slot = self._slots[key_set] = LeaseSlot(keys, self._lock_factory())
            return slot

    def take_expired(self, now: float, everything: bool) -> list[tuple[tuple[str, ...], int]]:
        """Takes the unspent units of every expired lease (or of all, with ``everything``)
        not in use right now, and forgets empty expired ones."""
        taken = []
        with self._lock:
            for key_set, slot in list(self._slots.items()):
                if slot.busy or slot.waiting:
                    continue
                if slot.expires > now and not everything:
                    continue
                if slot.units > 0:
                    taken.append((slot.keys, slot.units))
                    slot.units = 0
                del self._slots[key_set]
        return taken
