"""How a check runs, written once for the async and the sync limiter (the Rust client's
``limiter/``): generators that yield the store calls they need (:class:`AcquireOp`,
:class:`RefundOp`, :class:`SpawnOp`) to a driver, which makes them with its own I/O and the
policy's timeout, and sends back the result.

1. Deny cache: a key set the store denied for ``d`` is denied from memory until ``d`` passed.
2. Lease (opt-in): paid from units claimed earlier; one claim (a partial grant) serves every
   request waiting for it.
3. Store: limits whose keys share a slot in one ``RL.MULTI``; across slots, most specific
   group first, and earlier groups refunded when a later one denies (all-or-nothing).
4. Fallback: on a timeout or a connection error, ``open``, ``closed`` or ``local``: this
   replica's share, ``quota / replicas``, continuing from the store's last answer, and what it
   admits is owed to the store and charged when it answers again.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, TypeVar

from .algorithms import Shape
from .clock import LimiterClock
from .core import NEVER, NOW, AnyQuota
from .core import Decision as CoreDecision
from .core import bind as core_bind
from .core.engine import KindMismatch
from .decision import FALLBACK, LEASE, STORE, Decision, InFlight, LimitStatus, Source
from .errors import CheckError
from .local import LocalLimits
from .metrics import Metrics
from .policy import Fallback, Policy
from .protocol import Acquire, Call, Grant, Refund, StoreError
from .replies import BackendName, View
from .state import Answers, Breaker, DenyCache, LastClaim, LeaseLock, Leases, LeaseSlot, StoreDenial
from .store_api import StoreLayout
from .tables import DEFAULT_MAX_KEYS

#: Why a group is acquired (the ``op`` label of the store latency metric).
AcquireKind: TypeAlias = Literal["acquire", "claim", "settle"]


@dataclass(frozen=True, slots=True)
class AcquireOp:
    """Take units from one group, bounded by the policy's timeout: a ``Grant`` or a
    ``StoreError`` comes back."""

    request: Acquire
    op: AcquireKind
    policy: str
    timeout: float


@dataclass(frozen=True, slots=True)
class RefundOp:
    """Give units back to groups, concurrently: whether every refund reached the store."""

    requests: tuple[Refund, ...]
    policy: str
    timeout: float


@dataclass(frozen=True, slots=True)
class SpawnOp:
    """Run this flow in the background: ``None`` comes back at once."""

    flow: Flow[None]


#: A store call a flow asks its driver for.
Op: TypeAlias = AcquireOp | RefundOp | SpawnOp
#: What the driver sends back: for an ``AcquireOp`` a ``Grant`` or a ``StoreError``, for a
#: ``RefundOp`` whether every refund reached the store, for a ``SpawnOp`` ``None``.
OpResult: TypeAlias = Grant | StoreError | bool | None
T = TypeVar("T")
#: A flow ending in a ``T``: a generator of the store calls it needs.
Flow: TypeAlias = Generator[Op, OpResult, T]


class PolicyState:
    """A policy with what the limiter keeps for it."""

    def __init__(self, policy: Policy, lock_factory: Callable[[], LeaseLock], max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.policy = policy
        self.name = policy.name
        self.shapes: list[Shape] = [limit.algorithm.shape() for limit in policy.limits]
        longest_ns = max((shape.window_ns() for shape in self.shapes), default=0)
        # Most specific key first (stable: declaration order among equals).
        self.order = sorted(range(len(policy.limits)), key=lambda index: -policy.limits[index].key.specificity())
        self.deny = DenyCache(max_keys)
        self.leases = Leases(lock_factory, max_keys)
        self.answers = Answers(longest_ns // 1000, max_keys)
        self.holds_slots = policy.holds_slots
        #: The largest weight of the policy's limits (a call's cost times it must fit the store).
        self.heaviest = max(limit.weight for limit in policy.limits)

    def in_flight(self, index: int) -> bool:
        return self.policy.limits[index].algorithm.in_flight

    def weight(self, index: int) -> int:
        return self.policy.limits[index].weight

    def paced(self, index: int) -> bool:
        return self.policy.limits[index].max_wait_ms is not None

    def status(self, index: int, view: View) -> LimitStatus:
        return LimitStatus.from_view(self.policy.limits[index].name, self.shapes[index], view)


@dataclass(frozen=True, slots=True)
class Target:
    """What one check is about: the policy state, its rendered keys (policy order), the key
    set's id, and the holder id of the slots it takes in in-flight limits."""

    state: PolicyState
    keys: tuple[str, ...]
    key_set: str
    holder: str | None

    def call(self, index: int) -> Call:
        limit = self.state.policy.limits[index]
        return Call(self.keys[index], limit.algorithm, limit.weight, limit.max_wait_ms)

    def calls(self, group: Sequence[int]) -> tuple[Call, ...]:
        return tuple(self.call(index) for index in group)


@dataclass(slots=True)
class Acquired:
    granted: int
    views: list[tuple[int, View]]
    binding: int
    backend: BackendName | None


# The process's start instant is part of an id here, not a reading of the limiter's time.
_HOLDER_PREFIX = f"{os.getpid():x}.{time.time_ns():x}"
_HOLDER_COUNTER = itertools.count()


def new_holder() -> str:
    """A holder id no other request of the fleet uses: process id, start instant, counter."""
    return f"{_HOLDER_PREFIX}.{next(_HOLDER_COUNTER):x}"


def _to_core(view: View) -> CoreDecision:
    if view.retry_after_ms is None:
        retry = NEVER
    else:
        retry = view.retry_after_ms if view.retry_after_ms > 0 else NOW
    return CoreDecision(view.allowed, view.remaining, retry, view.reset_after_ms, view.limit)


def binding_of(state: PolicyState, views: Sequence[tuple[int, View]], units: int) -> int:
    """The binding limit over every group's views, by ``RL.MULTI``'s rule."""
    if len(views) == 1:
        return views[0][0]
    costs = [units * state.weight(index) for index, _ in views]
    bound = core_bind([_to_core(view) for _, view in views], costs)
    position = 0 if bound is None else bound[0]
    return views[position][0] if position < len(views) else 0


def decided(
    state: PolicyState,
    allowed: bool,
    source: Source,
    backend: BackendName | None,
    limits: list[LimitStatus],
    binding: int,
) -> Decision:
    if allowed:
        retry: int | None = 0
    else:
        retry = limits[binding].retry_after_ms if binding < len(limits) else None
    waits = [limit.retry_after_ms or 0 for limit in limits if allowed and limit.allowed and not limit.in_flight]
    return Decision(
        allowed=allowed,
        policy=state.name,
        source=source,
        backend=backend,
        outcome="allowed" if allowed else "denied",
        retry_after_ms=retry,
        limits=limits,
        binding_index=binding,
        wait_ms=max(waits, default=0),
        definition=state.policy,
    )


def views_decision(
    state: PolicyState,
    allowed: bool,
    views: Sequence[tuple[int, View]],
    binding_index: int,
    source: Source,
    backend: BackendName | None,
) -> Decision:
    limits: list[LimitStatus] = []
    binding = 0
    for index, view in views:
        if index == binding_index:
            binding = len(limits)
        limits.append(state.status(index, view))
    return decided(state, allowed, source, backend, limits, binding)


def store_decision(state: PolicyState, acquired: Acquired) -> Decision:
    return views_decision(state, acquired.granted > 0, acquired.views, acquired.binding, STORE, acquired.backend)


def add_leased(decision: Decision, state: PolicyState, leased: int) -> None:
    """Units this replica holds in its lease count as remaining to it."""
    weights = {limit.name: limit.weight for limit in state.policy.limits}
    for limit in decision.limits:
        limit.remaining = min(limit.remaining + leased * weights.get(limit.name, 1), limit.quota)


def blanket(target: Target, allowed: bool, wait_s: float) -> Decision:
    """A decision that consulted no limit: admit or deny everything."""
    return Decision(
        allowed=allowed,
        policy=target.state.name,
        source=FALLBACK,
        backend=None,
        outcome="fallback_allowed",
        retry_after_ms=0 if allowed else max(int(wait_s * 1000 + 0.999), 1000),
        definition=target.state.policy,
    )


def _charge(state: PolicyState, index: int, units: int) -> int:
    return 1 if state.in_flight(index) else units * state.weight(index)


def _give_back(view: View, units: int) -> View:
    return View(
        view.allowed, min(view.remaining + units, view.limit), view.retry_after_ms, view.reset_after_ms, view.limit
    )


class Engine:
    """The limiter's logic, shared by :class:`~redis_ratelimit_client.RateLimiter` and
    :class:`~redis_ratelimit_client.SyncRateLimiter`."""

    def __init__(
        self,
        store: StoreLayout,
        replicas: Callable[[], int],
        breaker: Breaker,
        metrics: Metrics,
        clock: LimiterClock,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self.store = store
        self.replicas = replicas
        self.breaker = breaker
        self.metrics = metrics
        self.clock = clock
        self.local = LocalLimits(max_keys=max_keys)
        self.local_lock = threading.Lock()

    # Planning.

    def plan(self, state: PolicyState, keys: Sequence[str]) -> list[list[int]]:
        """The store calls a check makes: limits grouped by slot (one group off a cluster),
        most specific group first; without ``RL.MULTI`` one group per limit."""
        multi = self.store.capabilities().multi
        groups: list[tuple[int | None, list[int]]] = []
        for index in state.order:
            key = keys[index]
            slot = self.store.slot(key)

            def fits(group: list[int], index: int = index, key: str = key) -> bool:
                return not state.paced(index) and all(not state.paced(other) and keys[other] != key for other in group)

            for group_slot, group in groups:
                if multi and group_slot == slot and fits(group):
                    group.append(index)
                    break
            else:
                groups.append((slot, [index]))
        return [group for _, group in groups]

    # Store calls.

    def acquire_groups(
        self,
        target: Target,
        groups: Sequence[Sequence[int]],
        units: int,
        partial_min: int | None,
        op: AcquireKind,
    ) -> Flow[Acquired | StoreError]:
        """Takes ``units`` from every group in turn; a group granting fewer lowers the grant
        (earlier groups refunded the difference); a denial or failure refunds them all."""
        state = target.state
        units = max(units, 1)
        charged: list[tuple[list[int], int]] = []
        views: list[tuple[int, View]] = []
        backend: BackendName | None = None
        for group in groups:
            request = Acquire(
                target.calls(group),
                units,
                None if partial_min is None else min(partial_min, units),
                target.holder,
            )
            grant = yield AcquireOp(request, op, state.name, state.policy.timeout)
            if isinstance(grant, StoreError):
                yield from self.refund_groups(target, charged)
                return grant
            assert isinstance(grant, Grant)
            backend = grant.backend
            views.extend(zip(group, grant.views, strict=True))
            if grant.granted == 0:
                evaluated = units if partial_min is None else max(min(partial_min, units), 1)
                views = [
                    (index, _give_back(view, _charge(state, index, evaluated)))
                    if index in group and view.allowed
                    else (index, view)
                    for index, view in views
                ]
                binding = group[grant.binding] if grant.binding < len(group) else 0
                views = yield from self._refund_all(target, charged, views)
                return Acquired(0, views, binding, grant.backend)
            if grant.granted < units:
                excess = [(g, c - grant.granted) for g, c in charged]
                yield from self.refund_groups(target, excess)
                charged = [(g, grant.granted) for g, _ in charged]
                units = grant.granted
            charged.append((list(group), grant.granted))
        views.sort(key=lambda item: item[0])
        return Acquired(units, views, binding_of(state, views, units), backend)

    def _refund_all(
        self, target: Target, charged: list[tuple[list[int], int]], views: list[tuple[int, View]]
    ) -> Flow[list[tuple[int, View]]]:
        if charged:
            state = target.state
            self.metrics.group_refunded(state.name)
            if (yield from self.refund_groups(target, charged)):
                for group, units in charged:
                    views = [(i, _give_back(v, _charge(state, i, units))) if i in group else (i, v) for i, v in views]
        views.sort(key=lambda item: item[0])
        return views

    def refund_groups(self, target: Target, refunds: Sequence[tuple[Sequence[int], int]]) -> Flow[bool]:
        requests = tuple(Refund(target.calls(group), units, target.holder) for group, units in refunds if units > 0)
        if not requests:
            return True
        policy = target.state.policy
        ok = yield RefundOp(requests, policy.name, policy.timeout)
        return bool(ok)

    # Checks.

    def store_flow(self, target: Target, cost: int) -> Flow[Decision]:
        """A check without leases."""
        skip = self.breaker.permit(self.clock.seconds())
        if skip is not None:
            return self.fallback(target, cost, None, skip)
        error = yield from self.settle(target)
        if error is not None:
            return self.fallback(target, cost, error, self.breaker.open_for)
        groups = self.plan(target.state, target.keys)
        acquired = yield from self.acquire_groups(target, groups, cost, None, "acquire")
        if isinstance(acquired, StoreError):
            return self.fallback(target, cost, acquired, self.breaker.open_for)
        self.remember(target, acquired, cost)
        return store_decision(target.state, acquired)

    def leased_flow(self, target: Target, cost: int, slot: LeaseSlot, started: float) -> Flow[Decision]:
        """A check paid from a lease (the caller holds the slot's lock)."""
        state = target.state
        lease = state.policy.lease
        assert lease is not None
        now = self.clock.seconds()
        if slot.expires <= now and slot.units > 0:
            units, slot.units = slot.units, 0
            yield SpawnOp(self.refund_lease(state, slot.keys, units))
        if slot.backend is not None and slot.units >= cost:
            slot.units -= cost
            binding = binding_of(state, slot.views, 1)
            decision = views_decision(state, True, slot.views, binding, LEASE, slot.backend)
            add_leased(decision, state, slot.units)
            return decision
        last = slot.last_claim
        if last is not None and last.at >= started:
            if last.result == "denied" and cost - slot.units >= last.minimum:
                return views_decision(state, False, last.views, last.binding, LEASE, last.backend)
            if last.result == "failed":
                self.metrics.store_error(state.name, "lease_wait")
                return self.fallback(target, cost, StoreError("timeout"), self.breaker.open_for)
        skip = self.breaker.permit(now)
        if skip is not None:
            return self.fallback(target, cost, None, skip)
        error = yield from self.settle(target)
        if error is not None:
            slot.last_claim = LastClaim(self.clock.seconds(), "failed")
            return self.fallback(target, cost, error, self.breaker.open_for)
        held = slot.units
        hot = last is not None and last.result == "granted" and now - last.at < lease.lifetime / 4
        recent = slot.claim_units * 2 if hot else lease.units
        size = lease.claim_for(cost, slot.waiting, recent)
        slot.claim_units = size
        want = max(size - held, 0)
        minimum = max(cost - held, 1)
        groups = self.plan(state, target.keys)
        claimed = yield from self.acquire_groups(target, groups, want, minimum, "claim")
        answered = self.clock.seconds()
        if isinstance(claimed, StoreError):
            slot.last_claim = LastClaim(answered, "failed")
            return self.fallback(target, cost, claimed, self.breaker.open_for)
        self.remember(target, claimed, minimum)
        if claimed.granted == 0:
            slot.last_claim = LastClaim(
                answered, "denied", minimum, list(claimed.views), claimed.binding, claimed.backend
            )
            return store_decision(state, claimed)
        self.metrics.lease_claimed(state.name, claimed.granted)
        slot.units = held + claimed.granted - cost
        slot.expires = now + lease.lifetime
        slot.views = list(claimed.views)
        slot.backend = claimed.backend
        slot.last_claim = LastClaim(answered, "granted")
        decision = store_decision(state, claimed)
        add_leased(decision, state, slot.units)
        return decision

    def refund_lease(self, state: PolicyState, keys: tuple[str, ...], units: int) -> Flow[None]:
        target = Target(state, keys, "\0".join(keys), None)
        refunds = [(group, units) for group in self.plan(state, keys)]
        if (yield from self.refund_groups(target, refunds)):
            self.metrics.lease_refunded(state.name, units)

    def release_flow(self, target: Target) -> Flow[None]:
        """Gives back the target holder's slots in the in-flight limits."""
        state = target.state
        releases = []
        for group in self.plan(state, target.keys):
            slots = [index for index in group if state.in_flight(index)]
            if slots:
                releases.append((slots, 1))
        yield from self.refund_groups(target, releases)

    # Fallback.

    def fallback(self, target: Target, cost: int, error: StoreError | None, wait_s: float) -> Decision:
        """The decision when the store cannot decide (``error`` ``None``: the breaker is open).
        A request the store refused as invalid is the caller's error: raised, never decided."""
        if error is not None and error.kind == "invalid":
            raise CheckError(f"policy '{target.state.name}': {error}")
        refused = error is not None and not error.unavailable
        mode = target.state.policy.fallback
        if mode == Fallback.OPEN:
            decision = blanket(target, True, wait_s)
        elif mode == Fallback.CLOSED:
            decision = blanket(target, False, wait_s)
        else:
            decision = self._local_decision(target, cost, wait_s)
        if refused:
            decision.outcome = "error"
        else:
            decision.outcome = "fallback_allowed" if decision.allowed else "fallback_denied"
        return decision

    def _local_calls(self, target: Target) -> list[tuple[Shape, AnyQuota]] | None:
        replicas = self.replicas()
        calls = []
        for limit, shape in zip(target.state.policy.limits, target.state.shapes, strict=True):
            share = shape.share(replicas)
            if share is None:
                return None
            try:
                quota = share.call_quota(max_wait_ms=limit.max_wait_ms, holder=target.holder or "-")
            except ValueError:
                return None
            calls.append((share, quota))
        return calls

    def _local_decision(self, target: Target, cost: int, wait_s: float) -> Decision:
        state = target.state
        now = self.clock.unix_us()
        left_ms = state.answers.denied_for(target.key_set, cost, now)
        if left_ms is not None:
            return blanket(target, False, left_ms / 1000)
        calls = self._local_calls(target)
        if calls is None:
            return blanket(target, False, wait_s)
        quotas = [quota for _, quota in calls]
        weights = [limit.weight for limit in state.policy.limits]
        try:
            with self.local_lock:
                seed = state.answers.seed(target.key_set, now)
                if seed is not None:
                    self._seed_local(target, calls, seed.views, seed.answered_at_us)
                verdict = self.local.acquire(target.keys, quotas, weights, cost, None, now)
        except (KindMismatch, ValueError):
            return blanket(target, False, wait_s)
        if verdict.units > 0:
            state.answers.owe(target.key_set, verdict.units, now)
        limits = []
        for (share, _), limit, core_view in zip(calls, state.policy.limits, verdict.per_limit, strict=True):
            view = View.from_fields(core_view.reply_fields())
            status = LimitStatus.from_view(limit.name, share, view)
            status.configured_quota = limit.algorithm.quota
            limits.append(status)
        return decided(state, verdict.units > 0, FALLBACK, None, limits, verdict.binding)

    def _seed_local(
        self,
        target: Target,
        calls: list[tuple[Shape, AnyQuota]],
        views: list[tuple[int, View]],
        answered_at_us: int,
    ) -> None:
        replicas = max(self.replicas(), 1)
        for index, view in views:
            if target.state.in_flight(index) or index >= len(calls):
                continue
            share, quota = calls[index]
            try:
                self.local.seed(target.keys[index], quota, share.quota, view.remaining // replicas, answered_at_us)
            except (KindMismatch, ValueError):
                continue

    def release_local(self, target: Target) -> None:
        calls = self._local_calls(target)
        if calls is None:
            return
        slots = [(target.keys[i], quota) for i, (_, quota) in enumerate(calls) if target.state.in_flight(i)]
        if slots:
            with self.local_lock:
                self.local.refund([key for key, _ in slots], [quota for _, quota in slots], self.clock.unix_us())

    def remember(self, target: Target, acquired: Acquired, cost: int) -> None:
        """Remembers what the store answered, for the fallback to continue from."""
        state = target.state
        denied = None
        if acquired.granted == 0 and not state.in_flight(acquired.binding):
            for index, view in acquired.views:
                if index == acquired.binding and view.retry_after_ms is not None:
                    denied = StoreDenial(view.retry_after_ms, cost)
        state.answers.record(target.key_set, acquired.views, denied, self.clock.unix_us())

    def settle(self, target: Target) -> Flow[StoreError | None]:
        """Charges the store what the fallback (or an overrun reservation) admitted for the
        target's keys while it could not ask: a partial grant, as much as the store has."""
        state = target.state
        owed = state.answers.take_owed(target.key_set, self.clock.unix_us())
        if owed is None:
            return None
        groups = [[index for index in group if not state.in_flight(index)] for group in self.plan(state, target.keys)]
        groups = [group for group in groups if group]
        unheld = Target(state, target.keys, target.key_set, None)
        acquired = yield from self.acquire_groups(unheld, groups, owed, 1, "settle")
        if isinstance(acquired, StoreError):
            if acquired.unavailable:
                state.answers.owe(target.key_set, owed, self.clock.unix_us())
                return acquired
            return None
        self.metrics.fallback_settled(state.name, owed, acquired.granted)
        return None

    def in_flight_of(self, target: Target, decision: Decision) -> InFlight | None:
        if target.holder is None or not decision.allowed:
            return None
        if not any(limit.in_flight for limit in decision.limits):
            return None
        return InFlight(target.state.name, target.holder, target.keys, decision.source == FALLBACK)
