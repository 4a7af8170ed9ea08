"""Sliding log (``core/src/sliding_log.rs``): the exact sliding window, one timestamp per unit."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .._kinds import SLIDING_LOG
from .decision import NEVER, NOW, Commit, Decision, Evaluation
from .numbers import MAX_NOW_US, ceil_ms_from_us, clamp, expiry_ms_from_us, sat_u64
from .quota import Quota
from .windows import check_window

#: Most entries a log ever stores (and the largest ``ratelimit.max-log-entries``).
MAX_STORED_ENTRIES = 10_000_000


class SlidingLogParamError(ValueError):
    """A window out of range, or a limit above the server's maximum entries."""


@dataclass(slots=True)
class SlidingLog:
    entries: list[int] = field(default_factory=list)
    as_of_us: int = 0


@dataclass(frozen=True, slots=True)
class SlidingLogChange:
    at_us: int
    expired: int
    #: ``("admit", units)`` or ``("refund", units)``.
    action: str
    units: int


@dataclass(frozen=True, slots=True)
class SlidingLogParams(Quota[SlidingLog, SlidingLogChange]):
    limit: int
    window_us: int
    cost_units: int = 1
    kind = SLIDING_LOG

    @staticmethod
    def new(limit: int, window_us: int, cost: int = 1, max_entries: int = MAX_STORED_ENTRIES) -> SlidingLogParams:
        try:
            check_window(window_us)
        except ValueError as error:
            raise SlidingLogParamError(str(error)) from None
        if limit > clamp(max_entries, 1, MAX_STORED_ENTRIES):
            raise SlidingLogParamError("limit_above_max_entries")
        return SlidingLogParams(max(limit, 1), window_us, max(cost, 1))

    @property
    def cost(self) -> int:
        return self.cost_units

    def with_cost(self, cost: int) -> SlidingLogParams:
        return SlidingLogParams(self.limit, self.window_us, max(cost, 1))

    def evaluate(self, state: SlidingLog | None, now_us: int) -> Evaluation[SlidingLogChange]:
        view = _View(state, self, now_us)
        in_window = view.in_window()
        if not (self.cost <= self.limit and sat_u64(in_window + self.cost) <= self.limit):
            return Evaluation(view.decision(self, False, in_window), None)
        decision = Decision(
            True,
            max(self.limit - sat_u64(in_window + self.cost), 0),
            NOW,
            view.ms_until_gone(view.at),
            self.limit,
        )
        change = SlidingLogChange(view.at, view.start, "admit", self.cost)
        return Evaluation(decision, Commit(change, expiry_ms_from_us(view.at + view.window)))

    def refund(self, state: SlidingLog | None, now_us: int) -> Evaluation[SlidingLogChange]:
        view = _View(state, self, now_us)
        in_window = view.in_window()
        given_back = min(self.cost, in_window)
        after = in_window - given_back
        decision = view.decision(self, given_back > 0, after)
        if given_back == 0:
            return Evaluation(decision, None)
        newest = view.nth_in_window(after)
        expires = expiry_ms_from_us(view.at if newest is None else newest + view.window)
        change = SlidingLogChange(view.at, view.start, "refund", given_back)
        return Evaluation(decision, Commit(change, expires))

    def grantable(self, state: SlidingLog | None, up_to: int, now_us: int) -> int:
        view = _View(state, self, now_us)
        return min(max(self.limit - view.in_window(), 0), up_to)

    @staticmethod
    def apply(state: SlidingLog, change: SlidingLogChange) -> SlidingLog:
        state.as_of_us = clamp(max(state.as_of_us, change.at_us), 0, MAX_NOW_US)
        del state.entries[: min(change.expired, len(state.entries))]
        if change.action == "admit":
            room = max(MAX_STORED_ENTRIES - len(state.entries), 0)
            state.entries.extend([state.as_of_us] * min(change.units, room))
        else:
            keep = max(len(state.entries) - change.units, 0)
            del state.entries[keep:]
        return state

    @staticmethod
    def create(change: SlidingLogChange) -> SlidingLog:
        return SlidingLogParams.apply(SlidingLog(), change)


class _View:
    __slots__ = ("at", "entries", "now", "start", "window")

    def __init__(self, state: SlidingLog | None, params: SlidingLogParams, now_us: int) -> None:
        self.entries: list[int] = [] if state is None else state.entries
        self.now = clamp(now_us, 0, MAX_NOW_US)
        self.at = self.now if state is None else max(state.as_of_us, self.now)
        self.window = params.window_us
        self.start = bisect.bisect_right(self.entries, self.at - self.window)

    def in_window(self) -> int:
        return max(len(self.entries) - self.start, 0)

    def nth_in_window(self, k: int) -> int | None:
        if k < 1:
            return None
        index = self.start + k - 1
        return self.entries[index] if index < len(self.entries) else None

    def ms_until_gone(self, t: int) -> int:
        return ceil_ms_from_us(t + self.window - self.now)

    def retry(self, params: SlidingLogParams, in_window: int) -> int:
        if params.cost > params.limit:
            return NEVER
        needed = max(sat_u64(in_window + params.cost) - params.limit, 0)
        if needed == 0:
            return NOW
        last = self.nth_in_window(needed)
        return max(self.ms_until_gone(self.at if last is None else last), 1)

    def decision(self, params: SlidingLogParams, allowed: bool, in_window: int) -> Decision:
        newest = self.nth_in_window(in_window)
        return Decision(
            allowed,
            max(params.limit - in_window, 0),
            self.retry(params, in_window),
            0 if newest is None else self.ms_until_gone(newest),
            params.limit,
        )
