"""Fixed windows and the sliding window counter (``core/src/fixed_window.rs``,
``core/src/sliding_window.rs``, ``core/src/window.rs``): epoch-aligned windows, integer µs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .._kinds import FIXED_WINDOW, SLIDING_WINDOW
from .decision import NEVER, NOW, Commit, Decision, Evaluation
from .numbers import (
    I64_MAX,
    MAX_NOW_US,
    MAX_WINDOW_US,
    MIN_WINDOW_US,
    U32_MAX,
    U64_MAX,
    ceil_div,
    ceil_ms_from_us,
    clamp,
    expiry_ms_from_us,
    sat_u64,
    window_start_us,
)
from .quota import Quota

if TYPE_CHECKING:
    from typing_extensions import Self

#: Largest limit of a windowed limiter (counts are stored as u32).
MAX_WINDOW_LIMIT = U32_MAX


class WindowParamError(ValueError):
    """``limit_too_large``, ``window_too_short`` or ``window_too_long``."""


def check_window(window_us: int) -> None:
    if window_us < MIN_WINDOW_US:
        raise WindowParamError("window_too_short")
    if window_us > MAX_WINDOW_US:
        raise WindowParamError("window_too_long")


@dataclass(slots=True)
class FixedWindow:
    window_start_us: int
    count: int


@dataclass(slots=True)
class SlidingWindow:
    window_start_us: int
    previous: int
    current: int


#: A windowed limiter's state (it is also what its calls commit).
W = TypeVar("W", FixedWindow, SlidingWindow)


@dataclass(frozen=True, slots=True)
class _WindowParams(Quota[W, W]):
    limit: int
    window_us: int
    cost_units: int = 1

    @classmethod
    def new(cls, limit: int, window_us: int, cost: int = 1) -> Self:
        if limit > MAX_WINDOW_LIMIT:
            raise WindowParamError("limit_too_large")
        check_window(window_us)
        return cls(max(limit, 1), window_us, max(cost, 1))

    @property
    def cost(self) -> int:
        return self.cost_units

    def with_cost(self, cost: int) -> Self:
        return type(self)(self.limit, self.window_us, max(cost, 1))


class FixedWindowParams(_WindowParams[FixedWindow]):
    __slots__ = ()
    kind = FIXED_WINDOW

    def _view(self, state: FixedWindow | None, now_us: int) -> _FixedView:
        return _FixedView(state, self, now_us)

    def evaluate(self, state: FixedWindow | None, now_us: int) -> Evaluation[FixedWindow]:
        view = self._view(state, now_us)
        retry = view.retry(self, view.count)
        if retry == NOW:
            count = sat_u64(view.count + self.cost)
            return Evaluation(view.decision(self, True, count, NOW), view.commit(count))
        return Evaluation(view.decision(self, False, view.count, retry), None)

    def refund(self, state: FixedWindow | None, now_us: int) -> Evaluation[FixedWindow]:
        view = self._view(state, now_us)
        count = max(view.count - self.cost, 0)
        refunded = count < view.count
        retry = view.retry(self, count)
        return Evaluation(view.decision(self, refunded, count, retry), view.commit(count) if refunded else None)

    def grantable(self, state: FixedWindow | None, up_to: int, now_us: int) -> int:
        view = self._view(state, now_us)
        return min(max(self.limit - view.count, 0), up_to)

    @staticmethod
    def apply(state: FixedWindow, change: FixedWindow) -> FixedWindow:
        return change

    @staticmethod
    def create(change: FixedWindow) -> FixedWindow:
        return change


class _FixedView:
    __slots__ = ("count", "now", "start", "window")

    def __init__(self, state: FixedWindow | None, params: FixedWindowParams, now_us: int) -> None:
        now_us = clamp(now_us, 0, MAX_NOW_US)
        current = window_start_us(now_us, params.window_us)
        start, count = current, 0
        if state is not None:
            stored_start = window_start_us(state.window_start_us, params.window_us)
            if stored_start >= current:
                start, count = stored_start, state.count
        self.now = now_us
        self.start = start
        self.window = params.window_us
        self.count = count

    def end(self) -> int:
        return self.start + self.window

    def retry(self, params: FixedWindowParams, count: int) -> int:
        if params.cost > params.limit:
            return NEVER
        if sat_u64(count + params.cost) <= params.limit:
            return NOW
        return max(ceil_ms_from_us(self.end() - self.now), 1)

    def decision(self, params: FixedWindowParams, allowed: bool, count: int, retry: int) -> Decision:
        reset = 0 if count == 0 else ceil_ms_from_us(self.end() - self.now)
        return Decision(allowed, max(params.limit - count, 0), retry, reset, params.limit)

    def commit(self, count: int) -> Commit[FixedWindow]:
        start = self.start if self.start <= I64_MAX else MAX_NOW_US
        expires = expiry_ms_from_us(self.now) if count == 0 else expiry_ms_from_us(self.end())
        return Commit(FixedWindow(start, min(count, U32_MAX)), expires)


def _earliest_elapsed(weight: int, room: int, window: int) -> int:
    if weight <= room:
        return 0
    return ceil_div((weight - room) * window, weight)


class SlidingWindowParams(_WindowParams[SlidingWindow]):
    __slots__ = ()
    kind = SLIDING_WINDOW

    def evaluate(self, state: SlidingWindow | None, now_us: int) -> Evaluation[SlidingWindow]:
        view = _SlidingView(state, self, now_us)
        previous, current = view.previous, view.current
        if self.cost <= self.limit and view.admits(self, previous, current):
            current = sat_u64(current + self.cost)
            return Evaluation(view.decision(self, True, previous, current, NOW), view.commit(previous, current))
        retry = view.retry(self, previous, current)
        return Evaluation(view.decision(self, False, previous, current, retry), None)

    def refund(self, state: SlidingWindow | None, now_us: int) -> Evaluation[SlidingWindow]:
        view = _SlidingView(state, self, now_us)
        from_current = min(view.current, self.cost)
        current = view.current - from_current
        previous = max(view.previous - (self.cost - from_current), 0)
        refunded = current < view.current or previous < view.previous
        retry = view.retry(self, previous, current)
        return Evaluation(
            view.decision(self, refunded, previous, current, retry),
            view.commit(previous, current) if refunded else None,
        )

    def grantable(self, state: SlidingWindow | None, up_to: int, now_us: int) -> int:
        view = _SlidingView(state, self, now_us)
        return min(view.room(self, view.previous, view.current), up_to)

    @staticmethod
    def apply(state: SlidingWindow, change: SlidingWindow) -> SlidingWindow:
        return change

    @staticmethod
    def create(change: SlidingWindow) -> SlidingWindow:
        return change


class _SlidingView:
    __slots__ = ("current", "elapsed", "now", "previous", "start", "window")

    def __init__(self, state: SlidingWindow | None, params: SlidingWindowParams, now_us: int) -> None:
        now_us = clamp(now_us, 0, MAX_NOW_US)
        window = params.window_us
        current_start = window_start_us(now_us, window)
        start, previous, current = current_start, 0, 0
        if state is not None:
            stored_start = window_start_us(state.window_start_us, window)
            if stored_start >= current_start:
                start, previous, current = stored_start, state.previous, state.current
            elif stored_start + window == current_start:
                start, previous, current = current_start, state.current, 0
        self.now = now_us
        self.window = window
        self.start = start
        self.elapsed = max(now_us - start, 0)
        self.previous = previous
        self.current = current

    def weighted(self, previous: int, current: int) -> int:
        return previous * (self.window - self.elapsed) + current * self.window

    def admits(self, params: SlidingWindowParams, previous: int, current: int) -> bool:
        with_cost = sat_u64(current + params.cost)
        return self.weighted(previous, with_cost) <= params.limit * self.window

    def admitted_at(self, params: SlidingWindowParams, previous: int, current: int) -> int | None:
        if params.cost > params.limit:
            return None
        room = params.limit - current - params.cost
        if room >= 0:
            elapsed = _earliest_elapsed(previous, room, self.window)
            return self.now if elapsed <= self.elapsed else self.start + elapsed
        room = params.limit - params.cost
        elapsed = _earliest_elapsed(current, room, self.window)
        return self.start + self.window + elapsed

    def retry(self, params: SlidingWindowParams, previous: int, current: int) -> int:
        at = self.admitted_at(params, previous, current)
        if at is None:
            return NEVER
        if at <= self.now:
            return NOW
        return max(ceil_ms_from_us(at - self.now), 1)

    def empty_at(self, previous: int, current: int) -> int | None:
        if current > 0:
            return self.start + 2 * self.window
        if previous > 0:
            return self.start + self.window
        return None

    def room(self, params: SlidingWindowParams, previous: int, current: int) -> int:
        left = params.limit * self.window - self.weighted(previous, current)
        return min(max(left // self.window, 0), U64_MAX)

    def decision(self, params: SlidingWindowParams, allowed: bool, previous: int, current: int, retry: int) -> Decision:
        empty = self.empty_at(previous, current)
        reset = 0 if empty is None else ceil_ms_from_us(empty - self.now)
        return Decision(allowed, self.room(params, previous, current), retry, reset, params.limit)

    def commit(self, previous: int, current: int) -> Commit[SlidingWindow]:
        start = self.start if self.start <= I64_MAX else MAX_NOW_US
        empty = self.empty_at(previous, current)
        state = SlidingWindow(start, min(previous, U32_MAX), min(current, U32_MAX))
        return Commit(state, expiry_ms_from_us(self.now if empty is None else empty))
