"""In-flight limits (``core/src/concurrency.rs``): at most ``limit`` live holders at once.

Holders are kept sorted by (expiry, id), the Rust core's canonical order, so expired holders
are a prefix and the same changes give the same list.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .._kinds import CONCURRENCY
from .decision import NEVER, NOW, Commit, Decision, Evaluation
from .numbers import (
    MAX_NOW_US,
    MAX_WINDOW_US,
    MIN_WINDOW_US,
    ceil_ms_from_us,
    clamp,
    expiry_ms_from_us,
)
from .quota import Quota

#: Most holders a list stores (the largest ``ratelimit.max-holders``).
MAX_STORED_HOLDERS = 100_000
MIN_TTL_US = MIN_WINDOW_US
MAX_TTL_US = MAX_WINDOW_US
MAX_HOLDER_ID_BYTES = 128


class ConcurrencyParamError(ValueError):
    """A ttl out of range, a limit above the maximum holders, or a bad holder id."""


@dataclass(slots=True)
class Concurrency:
    #: (expiry in Unix µs, holder id), sorted.
    holders: list[tuple[int, bytes]] = field(default_factory=list)

    def expired_at(self, at_us: int) -> int:
        return bisect.bisect_right(self.holders, (at_us, b"\xff" * (MAX_HOLDER_ID_BYTES + 1)))

    def position(self, holder: bytes, start: int) -> int | None:
        for index in range(start, len(self.holders)):
            if self.holders[index][1] == holder:
                return index
        return None

    def remove(self, holder: bytes) -> None:
        for index, (_, stored) in enumerate(self.holders):
            if stored == holder:
                del self.holders[index]
                return

    def insert(self, expiry_us: int, holder: bytes) -> None:
        if len(self.holders) >= MAX_STORED_HOLDERS:
            return
        bisect.insort(self.holders, (expiry_us, holder))


@dataclass(frozen=True, slots=True)
class ConcurrencyChange:
    at_us: int
    #: ``acquire`` (with ``expires_at_us``) or ``release``.
    action: str
    holder: bytes
    expires_at_us: int = 0


@dataclass(frozen=True, slots=True)
class ConcurrencyParams(Quota[Concurrency, ConcurrencyChange]):
    limit: int
    ttl_us: int
    holder: bytes | None = None
    cost_units: int = 1
    kind = CONCURRENCY

    @staticmethod
    def new(limit: int, ttl_us: int, max_holders: int = MAX_STORED_HOLDERS) -> ConcurrencyParams:
        if ttl_us < MIN_TTL_US or ttl_us > MAX_TTL_US:
            raise ConcurrencyParamError("ttl out of range")
        if limit > clamp(max_holders, 1, MAX_STORED_HOLDERS):
            raise ConcurrencyParamError("limit above max holders")
        return ConcurrencyParams(max(limit, 1), ttl_us)

    def with_holder(self, holder: bytes) -> ConcurrencyParams:
        if not 1 <= len(holder) <= MAX_HOLDER_ID_BYTES:
            raise ConcurrencyParamError("a holder id is 1 to 128 bytes")
        return ConcurrencyParams(self.limit, self.ttl_us, holder, self.cost_units)

    @property
    def cost(self) -> int:
        return self.cost_units

    def with_cost(self, cost: int) -> ConcurrencyParams:
        return ConcurrencyParams(self.limit, self.ttl_us, self.holder, max(cost, 1))

    def counted_cost(self) -> int:
        return 1

    def evaluate(self, state: Concurrency | None, now_us: int) -> Evaluation[ConcurrencyChange]:
        view = _View(state, self, now_us)
        admitted = view.admits(self)
        if self.holder is None or not admitted:
            return Evaluation(view.unchanged(self, admitted), None)
        renewed = None if view.own is None else view.holders[view.own][0]
        expires = max(view.now + self.ttl_us, -(1 << 63) if renewed is None else renewed)
        live = view.live(view.own) + 1
        last_other = view.last_live_expiry(view.own)
        last = expires if last_other is None else max(last_other, expires)
        change = ConcurrencyChange(view.now, "acquire", self.holder, expires)
        return Evaluation(view.decision(self, True, live, last, NOW), view.commit(change, last))

    def refund(self, state: Concurrency | None, now_us: int) -> Evaluation[ConcurrencyChange]:
        view = _View(state, self, now_us)
        if self.holder is None or view.own is None:
            return Evaluation(view.unchanged(self, False), None)
        skip = view.own
        last = view.last_live_expiry(skip)
        retry = view.retry(self, skip)
        change = ConcurrencyChange(view.now, "release", self.holder)
        return Evaluation(view.decision(self, True, view.live(skip), last, retry), view.commit(change, last))

    def grantable(self, state: Concurrency | None, up_to: int, now_us: int) -> int:
        return up_to if _View(state, self, now_us).admits(self) else 0

    @staticmethod
    def apply(state: Concurrency, change: ConcurrencyChange) -> Concurrency:
        del state.holders[: state.expired_at(change.at_us)]
        state.remove(change.holder)
        if change.action == "acquire":
            state.insert(change.expires_at_us, change.holder)
        return state

    @staticmethod
    def create(change: ConcurrencyChange) -> Concurrency:
        return ConcurrencyParams.apply(Concurrency(), change)

    @staticmethod
    def is_vacant(state: Concurrency) -> bool:
        return not state.holders


class _View:
    __slots__ = ("holders", "now", "own", "start")

    def __init__(self, state: Concurrency | None, params: ConcurrencyParams, now_us: int) -> None:
        stored = Concurrency() if state is None else state
        self.holders = stored.holders
        self.now = clamp(now_us, 0, MAX_NOW_US)
        self.start = stored.expired_at(self.now)
        self.own = None if params.holder is None else stored.position(params.holder, self.start)

    def live(self, skip: int | None) -> int:
        return max(len(self.holders) - self.start - (skip is not None), 0)

    def admits(self, params: ConcurrencyParams) -> bool:
        return (params.holder is not None and self.own is not None) or self.live(None) < params.limit

    def nth_live_expiry(self, k: int, skip: int | None) -> int | None:
        if k < 1:
            return None
        index = k - 1 + self.start
        if skip is not None and skip <= index:
            index += 1
        return self.holders[index][0] if index < len(self.holders) else None

    def last_live_expiry(self, skip: int | None) -> int | None:
        return self.nth_live_expiry(self.live(skip), skip)

    def retry(self, params: ConcurrencyParams, skip: int | None) -> int:
        live = self.live(skip)
        if live < params.limit:
            return NOW
        expiry = self.nth_live_expiry(live - params.limit + 1, skip)
        return NEVER if expiry is None else max(self.ms_until(expiry), 1)

    def ms_until(self, instant_us: int) -> int:
        return ceil_ms_from_us(instant_us - self.now)

    def decision(self, params: ConcurrencyParams, allowed: bool, live: int, last: int | None, retry: int) -> Decision:
        reset = 0 if last is None else self.ms_until(last)
        return Decision(allowed, max(params.limit - live, 0), retry, reset, params.limit)

    def unchanged(self, params: ConcurrencyParams, allowed: bool) -> Decision:
        if params.holder is not None and self.own is not None:
            retry = NOW
        else:
            retry = self.retry(params, None)
        return self.decision(params, allowed, self.live(None), self.last_live_expiry(None), retry)

    def commit(self, change: ConcurrencyChange, last: int | None) -> Commit[ConcurrencyChange]:
        return Commit(change, expiry_ms_from_us(self.now if last is None else last))
