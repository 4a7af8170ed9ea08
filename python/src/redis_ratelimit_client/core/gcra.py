"""GCRA as redis-cell's ``CL.THROTTLE`` computes it (``core/src/gcra.rs``), in integer ns.

Where redis-cell uses floating point (the emission interval, its whole seconds), the same
IEEE-754 double operations are done here: Python floats are doubles, rounded alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._kinds import GCRA
from .decision import NEVER, NOW, Commit, Decision, Evaluation
from .numbers import (
    I64_MAX,
    I64_MIN,
    MAX_NOW_US,
    NS_PER_SECOND,
    NS_PER_US,
    ceil_ms_from_ns,
    clamp,
    expiry_ms_from_ns,
    sat_i64,
    tdiv,
    trem,
)
from .quota import Quota

#: Largest tolerance ``interval * (max_burst + 1)``: 100 Julian years, in ns.
MAX_TOLERANCE_NS = 100 * 31_557_600 * 1_000_000_000


class GcraParamError(ValueError):
    """``ZeroRate``, ``NegativeRate``, ``NegativeBurst`` or ``ToleranceTooLong``."""


def _f64_to_i64(value: float) -> int:
    """Rust's ``f64 as i64``: truncation, saturating, NaN to 0."""
    if math.isnan(value):
        return 0
    if value >= 9.223372036854775807e18:
        return I64_MAX
    if value <= -9.223372036854775808e18:
        return I64_MIN
    return int(value)


def emission_interval_ns(count: int, period: int) -> int:
    """redis-cell's ``trunc(f64(period × 1e9) / f64(count))``."""
    if count == 0 or period == 0:
        raise GcraParamError("ZeroRate")
    interval = _f64_to_i64(float(period * NS_PER_SECOND) / float(count))
    if interval == 0:
        raise GcraParamError("ZeroRate")
    if interval < 0:
        raise GcraParamError("NegativeRate")
    return interval


@dataclass(slots=True)
class Gcra:
    tat_ns: int


@dataclass(frozen=True, slots=True)
class CellOutcome:
    limited: bool
    limit: int
    remaining: int
    retry_after_ns: int | None
    reset_after_ns: int


def cell_seconds(ns: int) -> int:
    """redis-cell's whole seconds: ``as_seconds_f64() as i64`` plus one for any ms fraction."""
    seconds = tdiv(ns, NS_PER_SECOND)
    nanos = trem(ns, NS_PER_SECOND)
    whole = _f64_to_i64(float(seconds) + float(nanos) / 1_000_000_000.0)
    return sat_i64(whole + 1) if tdiv(nanos, 1_000_000) > 0 else whole


def cell_reply(outcome: CellOutcome) -> list[int]:
    """The ``CL.THROTTLE`` reply: ``[limited, limit, remaining, retry_s, reset_s]``."""
    retry = -1 if outcome.retry_after_ns is None else cell_seconds(outcome.retry_after_ns)
    return [
        int(outcome.limited),
        outcome.limit,
        outcome.remaining,
        retry,
        cell_seconds(outcome.reset_after_ns),
    ]


def _cell_remaining(tolerance: int, interval: int, ttl: int) -> int:
    next_ns = tolerance - ttl
    if next_ns <= -interval:
        return 0
    next_us = tdiv(next_ns, NS_PER_US)
    interval_us = tdiv(interval, NS_PER_US)
    if interval_us == 0:
        return I64_MAX if next_us > 0 else I64_MIN if next_us < 0 else 0
    quotient = tdiv(next_us, interval_us)
    return quotient if I64_MIN <= quotient <= I64_MAX else 0


@dataclass(frozen=True, slots=True)
class GcraParams(Quota[Gcra, Gcra]):
    max_burst: int
    interval_ns: int
    quantity: int = 1
    kind = GCRA

    @staticmethod
    def new(max_burst: int, count: int, period: int, quantity: int = 1) -> GcraParams:
        return GcraParams.from_interval(max_burst, emission_interval_ns(count, period), quantity)

    @staticmethod
    def from_interval(max_burst: int, interval_ns: int, quantity: int = 1) -> GcraParams:
        if interval_ns == 0:
            raise GcraParamError("ZeroRate")
        if interval_ns < 0:
            raise GcraParamError("NegativeRate")
        if max_burst < 0:
            raise GcraParamError("NegativeBurst")
        if interval_ns * (max_burst + 1) > MAX_TOLERANCE_NS:
            raise GcraParamError("ToleranceTooLong")
        return GcraParams(max_burst, interval_ns, quantity)

    def with_quantity(self, quantity: int) -> GcraParams:
        return GcraParams(self.max_burst, self.interval_ns, quantity)

    @property
    def limit(self) -> int:
        return max(self.max_burst, 0) + 1

    def tolerance_ns(self) -> int:
        return sat_i64(self.interval_ns * sat_i64(self.max_burst + 1))

    @property
    def cost(self) -> int:
        return max(self.quantity, 0)

    def with_cost(self, cost: int) -> GcraParams:
        return self.with_quantity(max(min(cost, I64_MAX), 1))

    def throttle(self, state: Gcra | None, now_us: int) -> tuple[Evaluation[Gcra], CellOutcome]:
        view = _View(state, self, now_us)
        limited, new_tat, retry_ns, ttl = view.judge(view.tat)
        cell = CellOutcome(
            limited,
            sat_i64(self.max_burst + 1),
            view.remaining(self, ttl),
            None if retry_ns is None else sat_i64(retry_ns),
            sat_i64(ttl),
        )
        decision = view.decision(self, not limited, limited, retry_ns, ttl)
        commit = _commit(new_tat) if not limited and new_tat != view.tat else None
        return Evaluation(decision, commit), cell

    def evaluate(self, state: Gcra | None, now_us: int) -> Evaluation[Gcra]:
        return self.throttle(state, now_us)[0]

    def refund(self, state: Gcra | None, now_us: int) -> Evaluation[Gcra]:
        view = _View(state, self, now_us)
        tat = max(view.tat - max(view.increment, 0), view.now)
        refunded = tat < view.tat
        limited, _, retry_ns, _ = view.judge(tat)
        decision = view.decision(self, refunded, limited, retry_ns, tat - view.now)
        return Evaluation(decision, _commit(tat) if refunded else None)

    def grantable(self, state: Gcra | None, up_to: int, now_us: int) -> int:
        view = _View(state, self, now_us)
        slack = view.tolerance - (view.tat - view.now)
        return min(max(tdiv(slack, view.interval), 0), up_to)

    @staticmethod
    def apply(state: Gcra, change: Gcra) -> Gcra:
        return change

    @staticmethod
    def create(change: Gcra) -> Gcra:
        return change


def _commit(tat: int) -> Commit[Gcra]:
    return Commit(Gcra(sat_i64(tat)), expiry_ms_from_ns(tat))


class _View:
    __slots__ = ("increment", "interval", "now", "tat", "tolerance")

    def __init__(self, state: Gcra | None, params: GcraParams, now_us: int) -> None:
        self.now = clamp(now_us, 0, MAX_NOW_US) * NS_PER_US
        self.interval = params.interval_ns
        self.tolerance = params.tolerance_ns()
        self.increment = self.interval * params.quantity
        self.tat = self.now if state is None else max(state.tat_ns, self.now)

    def judge(self, tat: int) -> tuple[bool, int, int | None, int]:
        """``(limited, new_tat, retry_ns, ttl)`` for a call against ``tat >= now``."""
        new_tat = tat + self.increment
        diff = self.now - (new_tat - self.tolerance)
        if diff < 0:
            retry = -diff if self.increment <= self.tolerance else None
            return True, tat, retry, tat - self.now
        new_tat = max(new_tat, self.now)
        return False, new_tat, None, new_tat - self.now

    def remaining(self, params: GcraParams, ttl: int) -> int:
        return min(_cell_remaining(self.tolerance, self.interval, ttl), sat_i64(params.max_burst + 1))

    def decision(self, params: GcraParams, allowed: bool, limited: bool, retry_ns: int | None, ttl: int) -> Decision:
        if not limited:
            retry = NOW
        elif retry_ns is None:
            retry = NEVER
        else:
            retry = max(ceil_ms_from_ns(retry_ns), 1)
        return Decision(allowed, max(self.remaining(params, ttl), 0), retry, ceil_ms_from_ns(ttl), params.limit)
