"""The engine (``core/src/engine.rs``, ``grant.rs``, ``multi.rs``): what a call on several
keys decides, every limit against one ``now`` before anything is written, all or nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from .._kinds import Kind
from .decision import NEVER, Commit, Decision, Evaluation, wait_rank
from .numbers import U64_MAX, clamp, sat_u64
from .quota import AnyQuota, C, Quota, S


class KindMismatch(Exception):
    """Key ``index`` holds another algorithm than its quota's."""

    def __init__(self, index: int) -> None:
        super().__init__(f"key {index} holds another kind of limiter")
        self.index = index


@dataclass(slots=True)
class Held:
    """A key's state as the engine sees it: its kind (``None``: missing) and state (of
    that kind's quota)."""

    kind: Kind | None
    state: object


MISSING = Held(None, None)


def _state_for(held: Held, quota: Quota[S, C], index: int) -> S | None:
    if held.kind is None:
        return None
    if held.kind != quota.kind:
        raise KindMismatch(index)
    # A state stored under the quota's kind is that kind's state.
    return cast("S", held.state)


def units_to_evaluate(cost: int, partial_min: int | None, grantable: Sequence[tuple[int, int]]) -> int:
    """The units every limit is asked for (``multi::units_to_evaluate``)."""
    if partial_min is None:
        return cost
    minimum = clamp(partial_min, 1, max(cost, 1))
    all_can_give = cost
    for units, weight in grantable:
        all_can_give = min(all_can_give, units // weight if weight else units)
    return max(all_can_give, minimum)


def bind(decisions: Sequence[Decision], costs: Sequence[int]) -> tuple[int, Decision] | None:
    """The binding limit and the call's decision (``multi::bind``)."""
    if not decisions:
        return None
    allowed = all(decision.allowed for decision in decisions)
    reset_after_ms = max(decision.reset_after_ms for decision in decisions)
    if allowed:

        def calls_left(index: int) -> int:
            cost = max(costs[index] if index < len(costs) else 1, 1)
            return decisions[index].remaining // cost

        binding = min(range(len(decisions)), key=calls_left)
        retry = max((decision.retry for decision in decisions), key=wait_rank)
    else:
        denied = [index for index, decision in enumerate(decisions) if not decision.allowed]
        best = max(wait_rank(decisions[index].retry) for index in denied)
        binding = next(index for index in denied if wait_rank(decisions[index].retry) == best)
        retry = decisions[binding].retry
    chosen = decisions[binding]
    return binding, Decision(allowed, chosen.remaining, retry, reset_after_ms, chosen.limit)


@dataclass(slots=True)
class Verdict:
    """What a multi-limit call decided: the units taken (0 when denied), the binding limit,
    the call's decision, each limit's own view and the writes (``None``: unchanged)."""

    units: int
    binding: int
    decision: Decision
    per_limit: list[Decision]
    commits: list[Commit[object] | None]


def grant_evaluate(
    held: Held, quota: Quota[S, C], partial_min: int | None, now_us: int, index: int = 0
) -> tuple[int, Evaluation[C]]:
    """A call of ``quota.cost`` units, whole or partial (``grant::evaluate``)."""
    state = _state_for(held, quota, index)
    cost = quota.cost
    if partial_min is None:
        minimum, grantable = cost, cost
    else:
        minimum = clamp(partial_min, 1, max(cost, 1))
        grantable = quota.grantable(state, cost, now_us)
    units = grantable if grantable >= minimum else minimum
    evaluation = quota.with_cost(units).evaluate(state, now_us)
    return (units if evaluation.decision.allowed else 0), evaluation


def acquire_many(
    held: Sequence[Held],
    quotas: Sequence[AnyQuota],
    weights: Sequence[int],
    cost: int,
    partial_min: int | None,
    now_us: int,
) -> Verdict:
    """Every limit admits its cost and all are charged, or none is (``engine::acquire_many``).

    ``quotas`` are each for one unit; limit ``i`` is charged ``units × weights[i]``.
    """
    if not quotas:
        raise ValueError("a multi-limit call needs at least one limit")

    def quota_for(index: int, units: int) -> AnyQuota:
        return quotas[index].with_cost(sat_u64(units * weights[index]))

    units = cost
    if partial_min is not None:
        grantable = []
        for index in range(len(quotas)):
            quota = quota_for(index, cost)
            state = _state_for(held[index], quota, index)
            grantable.append((quota.grantable(state, quota.cost, now_us), weights[index]))
        units = units_to_evaluate(cost, partial_min, grantable)
    per_limit: list[Decision] = []
    commits: list[Commit[object] | None] = []
    costs: list[int] = []
    charged: list[AnyQuota] = []
    for index in range(len(quotas)):
        quota = quota_for(index, units)
        state = _state_for(held[index], quota, index)
        evaluation = quota.evaluate(state, now_us)
        per_limit.append(evaluation.decision)
        commits.append(evaluation.commit)
        costs.append(quota.counted_cost())
        charged.append(quota)
    bound = bind(per_limit, costs)
    assert bound is not None
    binding, decision = bound
    if not decision.allowed:
        decision.reset_after_ms = _reset_as_it_stands(held, charged, per_limit, now_us)
        return Verdict(0, binding, decision, per_limit, [None] * len(quotas))
    return Verdict(units, binding, decision, per_limit, commits)


def _reset_as_it_stands(
    held: Sequence[Held], quotas: Sequence[AnyQuota], views: Sequence[Decision], now_us: int
) -> int:
    reset = 0
    for index, (quota, view) in enumerate(zip(quotas, views, strict=True)):
        if view.allowed:
            unchanged = quota.with_cost(U64_MAX)
            state = _state_for(held[index], unchanged, index)
            as_it_stands = unchanged.evaluate(state, now_us).decision.reset_after_ms
        else:
            as_it_stands = view.reset_after_ms
        reset = max(reset, as_it_stands)
    return reset


def refund(held: Held, quota: Quota[S, C], now_us: int) -> Evaluation[C]:
    """Gives a call's cost back to one key's limiter (``engine::refund``)."""
    return quota.refund(_state_for(held, quota, 0), now_us)


__all__ = [
    "MISSING",
    "NEVER",
    "Held",
    "KindMismatch",
    "Verdict",
    "acquire_many",
    "bind",
    "grant_evaluate",
    "refund",
    "units_to_evaluate",
]
