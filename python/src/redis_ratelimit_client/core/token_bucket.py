"""Token bucket (``core/src/token_bucket.rs``): the state is the instant the bucket was empty.

Integer nanoseconds; the refill interval of one token is ``ceil(1e9 / rate)``; a maximum
wait (``MAXWAIT``) admits with a wait while the bucket goes into debt; a clock that steps
back never rewinds the state.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._kinds import TOKEN_BUCKET
from .decision import NEVER, NOW, Commit, Decision, Evaluation
from .numbers import (
    I64_MAX,
    MAX_NOW_US,
    NS_PER_SECOND,
    NS_PER_US,
    Decimal,
    ceil_ms_from_ns,
    clamp,
    expiry_ms_from_ns,
    sat_i64,
)
from .quota import Quota

#: Longest time an empty bucket may take to refill: 100 Julian years, in ns.
MAX_REFILL_NS = 100 * 31_557_600 * NS_PER_SECOND
#: Longest maximum wait: one day, in ns.
MAX_WAIT_NS = 86_400 * NS_PER_SECOND


class TokenBucketParamError(ValueError):
    """``rate_too_high`` or ``refill_too_long``."""


@dataclass(slots=True)
class TokenBucket:
    """The stored state: when the bucket held zero tokens, and the interval it was kept at."""

    empty_at_ns: int
    interval_ns: int


@dataclass(frozen=True, slots=True)
class TokenBucketParams(Quota[TokenBucket, TokenBucket]):
    capacity: int
    interval_ns: int
    cost_units: int = 1
    max_wait_ns: int = 0
    kind = TOKEN_BUCKET

    @staticmethod
    def new(capacity: int, rate: Decimal, cost: int = 1) -> TokenBucketParams:
        if rate.exceeds_power_of_ten(9):
            raise TokenBucketParamError("rate_too_high")
        interval_ns = rate.ceil_reciprocal(NS_PER_SECOND)
        if interval_ns is None:
            raise TokenBucketParamError("refill_too_long")
        return TokenBucketParams.from_interval(capacity, interval_ns, cost)

    @staticmethod
    def from_interval(capacity: int, interval_ns: int, cost: int = 1) -> TokenBucketParams:
        if capacity * interval_ns > MAX_REFILL_NS:
            raise TokenBucketParamError("refill_too_long")
        return TokenBucketParams(max(capacity, 1), max(interval_ns, 1), max(cost, 1), 0)

    def with_max_wait_ns(self, max_wait_ns: int) -> TokenBucketParams:
        if max_wait_ns > MAX_WAIT_NS:
            raise TokenBucketParamError("max_wait_too_long")
        return TokenBucketParams(self.capacity, self.interval_ns, self.cost_units, max_wait_ns)

    @property
    def cost(self) -> int:
        return self.cost_units

    def with_cost(self, cost: int) -> TokenBucketParams:
        return TokenBucketParams(self.capacity, self.interval_ns, max(cost, 1), self.max_wait_ns)

    def refill_ns(self) -> int:
        return min(self.capacity * self.interval_ns, I64_MAX)

    # The algorithm.

    def evaluate(self, state: TokenBucket | None, now_us: int) -> Evaluation[TokenBucket]:
        view = _View(state, self, now_us)
        retry = view.retry(self, view.empty_at)
        if retry == NOW:
            empty_at = sat_i64(view.empty_at + view.needed(self))
            return Evaluation(view.decision(self, True, empty_at, view.wait(empty_at)), view.commit(self, empty_at))
        return Evaluation(view.decision(self, False, view.empty_at, retry), None)

    def refund(self, state: TokenBucket | None, now_us: int) -> Evaluation[TokenBucket]:
        view = _View(state, self, now_us)
        full_since = sat_i64(view.now - view.refill)
        empty_at = max(sat_i64(view.empty_at - view.needed(self)), full_since)
        refunded = state is not None and empty_at < view.empty_at
        retry = view.retry(self, empty_at)
        return Evaluation(
            view.decision(self, refunded, empty_at, retry),
            view.commit(self, empty_at) if refunded else None,
        )

    def grantable(self, state: TokenBucket | None, up_to: int, now_us: int) -> int:
        view = _View(state, self, now_us)
        within_wait = sat_i64(sat_i64(view.now - view.empty_at) + view.max_wait)
        return min(view.whole_tokens(within_wait), self.capacity, up_to)

    @staticmethod
    def apply(state: TokenBucket, change: TokenBucket) -> TokenBucket:
        return change

    @staticmethod
    def create(change: TokenBucket) -> TokenBucket:
        return change


def _empty_at_for(state: TokenBucket, params: TokenBucketParams, now_ns: int) -> int:
    if state.interval_ns == params.interval_ns or state.empty_at_ns >= now_ns:
        return state.empty_at_ns
    elapsed = now_ns - state.empty_at_ns
    old_full = params.capacity * state.interval_ns
    if elapsed >= old_full:
        rescaled = params.refill_ns()
    else:
        rescaled = (elapsed * params.interval_ns) // state.interval_ns
    return sat_i64(now_ns - rescaled)


class _View:
    __slots__ = ("empty_at", "interval", "max_wait", "now", "refill")

    def __init__(self, state: TokenBucket | None, params: TokenBucketParams, now_us: int) -> None:
        self.now = sat_i64(clamp(now_us, 0, MAX_NOW_US) * NS_PER_US)
        self.refill = params.refill_ns()
        full_since = sat_i64(self.now - self.refill)
        empty_at = full_since if state is None else _empty_at_for(state, params, self.now)
        self.empty_at = max(empty_at, full_since)
        self.interval = min(params.interval_ns, I64_MAX)
        self.max_wait = min(params.max_wait_ns, I64_MAX)

    def needed(self, params: TokenBucketParams) -> int:
        return sat_i64(min(params.cost, I64_MAX) * self.interval)

    def retry(self, params: TokenBucketParams, empty_at: int) -> int:
        if params.cost > params.capacity:
            return NEVER
        missing = sat_i64(sat_i64(self.needed(params) - sat_i64(self.now - empty_at)) - self.max_wait)
        return NOW if missing <= 0 else max(ceil_ms_from_ns(missing), 1)

    def wait(self, empty_at: int) -> int:
        return ceil_ms_from_ns(sat_i64(empty_at - self.now))

    def whole_tokens(self, refilled_ns: int) -> int:
        return max(refilled_ns, 0) // self.interval

    def decision(self, params: TokenBucketParams, allowed: bool, empty_at: int, retry: int) -> Decision:
        return Decision(
            allowed,
            self.whole_tokens(sat_i64(self.now - empty_at)),
            retry,
            ceil_ms_from_ns(sat_i64(sat_i64(empty_at + self.refill) - self.now)),
            params.capacity,
        )

    def commit(self, params: TokenBucketParams, empty_at: int) -> Commit[TokenBucket]:
        return Commit(
            TokenBucket(empty_at, params.interval_ns),
            expiry_ms_from_ns(sat_i64(empty_at + self.refill)),
        )
