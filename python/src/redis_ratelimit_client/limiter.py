"""The limiters: :class:`RateLimiter` (asyncio, on ``redis.asyncio``) and its sync twin
:class:`SyncRateLimiter` (on ``redis.Redis``), both also on a Cluster client or a Sentinel
primary. Both run the same flows (:mod:`redis_ratelimit_client.flows`); each drives the store calls
with its own I/O, and the store bounds each by the policy's timeout (50 ms by default) by the
rule of :mod:`redis_ratelimit_client.timing`: a call times out when the store is silent, never
because this process is late."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from .algorithms import Algorithm
from .clock import SYSTEM_CLOCK, Clock, LimiterClock
from .decision import Decision
from .errors import CheckError
from .flows import AcquireOp, Engine, Flow, OpResult, PolicyState, RefundOp, SpawnOp, Target, new_holder
from .keys import MissingInput
from .metric_labels import DEFAULT_NEAR_LIMIT_SHARE, NO_LIMIT, near_limit_share
from .metrics import Metrics, default_metrics
from .policy import Policy
from .protocol import Grant, Refund, StoreError, classify, max_units
from .redis_boundary import AsyncClient, SyncClient
from .replies import BackendName
from .state import Breaker, LeaseLock
from .store import RedisStore, SyncRedisStore
from .store_api import HashStore, Store, StoreLayout, SyncHashStore, SyncStore
from .tables import DEFAULT_MAX_KEYS
from .top.merge import TopDenied
from .top.options import TopKeys, TopQuery
from .top.recorder import Recorder
from .top.reporter import AsyncReporter, SyncReporter, read, read_blocking, unix_s

if TYPE_CHECKING:
    from .plans import PlanSource, SyncPlanSource

log = logging.getLogger("redis_ratelimit_client")


Replicas = int | Callable[[], int]
#: The store a limiter calls: its ``Store`` (async) or ``SyncStore``.
St = TypeVar("St", bound=StoreLayout)
T = TypeVar("T")

#: Most limit sets of store-backed policies whose states are kept (about as many as plans
#: and overrides; the Rust client's MAX_STATES).
_MAX_RESOLVED = 1024

#: A store-backed policy's limit set as resolved for a tenant: the policy's name and each
#: limit's name, key template, algorithm and key class (a frozen value, equal when its fields
#: are).
_Signature = tuple[str, tuple[tuple[str, str, Algorithm, str | None], ...]]


@dataclass(frozen=True, slots=True)
class _Prepared:
    target: Target
    cached: Decision | None
    leasable: bool
    started: float


class _Limiter(Generic[St]):
    """What both limiters share: policies, rendering, the deny cache and the engine."""

    def __init__(
        self,
        store: St,
        policies: Iterable[Policy],
        replicas: Replicas,
        breaker: tuple[int, float],
        metrics: Metrics | None,
        plans: PlanSource | SyncPlanSource | None,
        lock_factory: Callable[[], LeaseLock],
        max_keys: int,
        clock: Clock,
        top_keys: TopKeys | None,
        near_limit: float,
    ) -> None:
        if not isinstance(max_keys, int) or isinstance(max_keys, bool) or max_keys < 1:
            raise ValueError(f"max_keys: the most key sets a table remembers, a whole number from 1 (got {max_keys!r})")
        if top_keys is not None and not isinstance(top_keys, TopKeys):
            raise ValueError(f"top_keys: a TopKeys (got {top_keys!r})")
        #: A limit left with less than this share of its quota is near it (the metrics).
        self._near_limit_share = near_limit_share(near_limit)
        self._max_keys = max_keys
        self._lock_factory = lock_factory
        self._states: dict[str, PolicyState] = {}
        for policy in policies:
            if policy.name in self._states:
                raise ValueError(f"two policies are named '{policy.name}'")
            self._states[policy.name] = PolicyState(policy, lock_factory, max_keys)
        stores_backed = [p.name for p in (s.policy for s in self._states.values()) if p.tenant_input]
        if stores_backed and plans is None:
            raise ValueError(
                f"policy '{stores_backed[0]}' takes its limits from the policy store: give the "
                "limiter plans=PlanSource(...)"
            )
        self.metrics = metrics if metrics is not None else default_metrics()
        for state in self._states.values():
            self.metrics.configured(state.policy)
        self.store = store
        if metrics is not None and isinstance(store, (RedisStore, SyncRedisStore)):
            store.metrics = self.metrics
        count = replicas if callable(replicas) else (lambda: replicas)
        #: Where the limiter reads the time (leases, the deny cache, the breaker, the fallback).
        self._clock = LimiterClock(clock)
        self._engine = Engine(
            store, lambda: max(int(count()), 1), Breaker(*breaker), self.metrics, self._clock, max_keys
        )
        self.plans = plans
        # The states of store-backed policies, by limit set: the least recently used goes past
        # _MAX_RESOLVED (an outstanding lease of a forgotten state expires in the store).
        self._resolved: OrderedDict[_Signature, PolicyState] = OrderedDict()
        self.metrics.circuit(False)
        #: The denials counted for the fleet's top keys, when enabled.
        self._top = None if top_keys is None else Recorder(top_keys)

    @property
    def breaker(self) -> Breaker:
        return self._engine.breaker

    def policy(self, name: str) -> Policy | None:
        state = self._states.get(name)
        return None if state is None else state.policy

    @property
    def policies(self) -> list[Policy]:
        return [state.policy for state in self._states.values()]

    @property
    def store_unreachable(self) -> bool:
        """Whether the circuit breaker holds store calls back."""
        return self._engine.breaker.is_open

    def _state_for(self, registered: PolicyState, inputs: Mapping[str, str]) -> PolicyState:
        if registered.policy.tenant_input is None or self.plans is None:
            return registered
        tenant = inputs.get(registered.policy.tenant_input)
        if tenant is None:
            raise CheckError(str(MissingInput(registered.policy.tenant_input)))
        _check_text(f"the input '{registered.policy.tenant_input}'", str(tenant))
        policy = self.plans.policy_for(registered.policy, str(tenant))
        # The limits' names, key templates and algorithms (frozen: compared by their fields),
        # not a text of them.
        signature = (
            policy.name,
            tuple((limit.name, limit.key.text, limit.algorithm, limit.key_class) for limit in policy.limits),
        )
        state = self._resolved.get(signature)
        if state is None:
            if len(self._resolved) >= _MAX_RESOLVED:
                self._resolved.popitem(last=False)
            state = self._resolved[signature] = PolicyState(policy, self._lock_factory, self._max_keys)
            self.metrics.configured(policy)
        else:
            self._resolved.move_to_end(signature)
        return state

    def _prepare(self, policy: str, cost: int, inputs: Mapping[str, str]) -> _Prepared:
        if not isinstance(cost, int) or isinstance(cost, bool) or cost < 1:
            raise CheckError(f"a check costs at least 1 unit (got {cost!r})")
        registered = self._states.get(policy)
        if registered is None:
            raise CheckError(f"no policy is named '{policy}'")
        state = self._state_for(registered, inputs)
        heaviest = state.heaviest
        most = max_units(self.store.backend)
        if cost * heaviest > most:
            raise CheckError(
                f"policy '{policy}': a cost of {cost} (x weight {heaviest}) is more than the store takes "
                f"({most} units{' on the ' + self.store.backend if self.store.backend else ''})"
            )
        try:
            keys = tuple(limit.key.render(inputs) for limit in state.policy.limits)
        except MissingInput as missing:
            raise CheckError(str(missing)) from None
        for limit, key in zip(state.policy.limits, keys, strict=True):
            _check_text(f"policy '{policy}': limit '{limit.name}': the key", key)
        key_set = "\0".join(keys)
        target = Target(state, keys, key_set, new_holder() if state.holds_slots else None)
        now = self._clock.seconds()
        cached = state.deny.get(key_set, cost, now) if state.policy.deny_cache else None
        lease = state.policy.lease
        leasable = (
            lease is not None
            and cost <= lease.units
            and self.store.capabilities().partial
            and state.leases.has_room(key_set)
        )
        return _Prepared(target, cached, leasable, now)

    def _finish(self, prepared: _Prepared, cost: int, decision: Decision) -> Decision:
        state = prepared.target.state
        binding = decision.binding_limit
        if (
            state.policy.deny_cache
            and not decision.allowed
            and decision.source == "store"
            and not (binding is not None and binding.in_flight)
        ):
            state.deny.insert(prepared.target.key_set, cost, decision, prepared.started)
        decision.in_flight = self._engine.in_flight_of(prepared.target, decision)
        return self._observe(prepared, cost, decision)

    def _observe(self, prepared: _Prepared, cost: int, decision: Decision) -> Decision:
        """Records a decision, wherever it was decided (the store, the deny cache, a lease,
        the fallback): in the metrics, and a denial for the fleet's top keys."""
        self.metrics.record_decision(decision, cost, self._near_limit_share)
        if self._top is not None and not decision.allowed:
            self._count_denial(self._top, prepared.target, decision)
        return decision

    def _count_denial(self, recorder: Recorder, target: Target, decision: Decision) -> None:
        """Counts a denial under its binding limit and that limit's rendered key (``_none``
        and the first key when no limit was consulted)."""
        binding = decision.binding_limit
        index = None if binding is None else target.state.policy.index_of(binding.name)
        if binding is not None and index is not None:
            limit, key = binding.name, target.keys[index]
        else:
            limit, key = NO_LIMIT, target.keys[0]
        recorder.denied(target.state.name, limit, key, unix_s(self._clock))

    def _answered(self, op: AcquireOp, sent: float, result: Grant | StoreError) -> Grant | StoreError:
        """Records a store call's outcome: latency and errors in the metrics, the breaker."""
        breaker = self._engine.breaker
        now = self._clock.seconds()
        self.metrics.store_latency(op.policy, op.op, now - sent)
        if isinstance(result, StoreError):
            self.metrics.store_error(op.policy, result.kind)
            if result.kind in ("server", "config"):
                log.warning("redis-ratelimit: policy '%s': %s", op.policy, result)
            if result.unavailable and breaker.failure(sent, now):
                self.metrics.circuit_opened()
                log.warning("redis-ratelimit: the store is out of reach (%s): circuit open", result)
        elif breaker.success(now):
            self.metrics.circuit(False)
            log.info("redis-ratelimit: the store answers again: circuit closed")
        return result

    def validate(self, policy: str, **inputs: str) -> None:
        """Checks without a store call that ``policy`` exists and ``inputs`` fill its keys."""
        self._prepare(policy, 1, inputs)

    def _release_target(self, decision: Decision) -> Target | None:
        held = decision.in_flight
        if held is None:
            return None
        state = self._states.get(held.policy)
        if state is None:
            return None
        if len(state.policy.limits) != len(held.keys):
            for resolved in self._resolved.values():
                if resolved.name == held.policy and len(resolved.policy.limits) == len(held.keys):
                    state = resolved
        return Target(state, held.keys, "\0".join(held.keys), held.holder)

    def _reserve_refund(self, target: Target, units: int) -> Flow[None]:
        refunds = [
            ([index for index in group if not target.state.in_flight(index)], units)
            for group in self._engine.plan(target.state, target.keys)
        ]
        yield from self._engine.refund_groups(target, [r for r in refunds if r[0]])
        # A denial remembered while these units were spent is stale now (it could keep the
        # key set refused until the window ends).
        target.state.deny.forget(target.key_set)

    def _reserve_debit(self, target: Target, units: int) -> Flow[int]:
        """Takes ``units`` more (as much as the limits hold); the rest is owed, charged
        before the key set's next check. Returns the units owed."""
        engine = self._engine
        groups = [
            [index for index in group if not target.state.in_flight(index)]
            for group in engine.plan(target.state, target.keys)
        ]
        groups = [group for group in groups if group]
        unheld = Target(target.state, target.keys, target.key_set, None)
        acquired = yield from engine.acquire_groups(unheld, groups, units, 1, "settle")
        taken = 0 if isinstance(acquired, StoreError) else acquired.granted
        owed = units - taken
        if owed > 0:
            target.state.answers.owe(target.key_set, owed, self._clock.unix_us())
        return owed


def retrieved(task: asyncio.Future[T]) -> None:
    """A task's done callback marking its exception read: a store call the caller stopped
    waiting for (its own deadline, a client gone away) still fails in the background, and
    asyncio would log "Task exception was never retrieved" for it."""
    if not task.cancelled():
        task.exception()


def _check_text(what: str, text: str) -> None:
    """Raises ``CheckError`` for text Redis cannot be sent (UTF-8): a lone surrogate, which
    ``json.loads('"\\udcff"')`` and ``os.fsdecode`` make. Checked per call, so a bad key fails
    its own check only, never the pipeline it would have joined."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CheckError(
            f"{what} {text[:64]!r} is not valid text: a lone surrogate at position {error.start} "
            "(keys are sent as UTF-8)"
        ) from None


def _inputs(inputs: Mapping[str, object] | None, extra: Mapping[str, object]) -> dict[str, str]:
    merged = {} if inputs is None else {str(k): str(v) for k, v in inputs.items()}
    merged.update({k: str(v) for k, v in extra.items()})
    return merged


class RateLimiter(_Limiter[Store]):
    """Checks requests against policies, on a ``redis.asyncio`` client (or a store).

    ```python
    limiter = RateLimiter(redis.asyncio.Redis(), [Policy("api", [Limit.token_bucket(
        "per-key", 100, refill=60, key="rl:{{{key}}}")])], replicas=3)
    decision = await limiter.check("api", key="alice")
    ```

    ``replicas`` (a number, or a function read at each fallback decision) divides quotas in
    the local fallback; ``breaker`` is ``(failures, open_for_seconds)``, default ``(3, 0.5)``.
    ``max_keys`` bounds each table of per-key-set state (each policy's last store answers,
    remembered denials and leases; the fallback's local states): past it, expired entries
    go first, then the one answered longest ago (see the README's "Memory"). ``clock`` is
    where it reads the time (a :class:`~redis_ratelimit_client.clock.FakeClock` in tests).
    ``redis`` may also be a store (:class:`~redis_ratelimit_client.store_api.Store`).
    ``top_keys`` (a :class:`~redis_ratelimit_client.top.TopKeys`) counts every denial for the
    fleet's top denied keys and reports them to Redis once a second (read them with
    :meth:`top_denied`); ``near_limit_share`` is the share of a limit's quota under which an
    admitted check counts as near it (``ratelimit_near_limit_total``; default 0.2).
    """

    def __init__(
        self,
        redis: AsyncClient | Store,
        policies: Iterable[Policy] = (),
        *,
        replicas: Replicas = 1,
        breaker: tuple[int, float] = (3, 0.5),
        metrics: Metrics | None = None,
        plans: PlanSource | None = None,
        backend: str = "auto",
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Clock = SYSTEM_CLOCK,
        top_keys: TopKeys | None = None,
        near_limit_share: float = DEFAULT_NEAR_LIMIT_SHARE,
    ) -> None:
        store: Store
        if isinstance(redis, Store):
            store = redis
        else:
            store = RedisStore(redis, backend=backend, metrics=metrics or default_metrics())
        super().__init__(
            store,
            policies,
            replicas,
            breaker,
            metrics,
            plans,
            asyncio.Lock,
            max_keys,
            clock,
            top_keys,
            near_limit_share,
        )
        self._tasks: set[asyncio.Future[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._reporter: AsyncReporter | None = None
        if self._top is not None:
            if not isinstance(store, HashStore):
                raise ValueError(
                    f"top_keys: the top-keys reports need a store that keeps hashes (RedisStore, MemoryStore): "
                    f"{type(store).__name__} has no write_hashes/read_hashes"
                )
            self._reporter = AsyncReporter(self._top, store, self.metrics, self._clock)

    async def connect(self) -> str | None:
        """Resolves the store backend now (it is otherwise resolved on the first check);
        returns it. Raises the store's error if it is unreachable."""
        try:
            return await self.store.connect()
        except Exception as error:
            raise classify(error) from error

    @property
    def backend(self) -> BackendName | None:
        """The store backend in use (``module``, ``functions``, ``scripts``, ``memory``)."""
        return self.store.backend

    async def check(
        self, policy: str, /, cost: int = 1, *, inputs: Mapping[str, object] | None = None, **values: object
    ) -> Decision:
        """Checks a request of ``cost`` units against ``policy``; the key templates' inputs
        are keyword arguments (or ``inputs=``). Admitted only if every limit admits it, and
        then every limit is charged."""
        prepared = self._prepare(policy, cost, _inputs(inputs, values))
        self._start_sweeper(prepared.target.state)
        if self._reporter is not None:
            self._reporter.start()
        if prepared.cached is not None:
            return self._observe(prepared, cost, prepared.cached)
        engine = self._engine
        target = prepared.target
        if prepared.leasable:
            slot = target.state.leases.slot(target.key_set, target.keys)
            lock = slot.lock
            assert isinstance(lock, asyncio.Lock), "the async limiter's leases have asyncio locks"
            slot.waiting += 1
            try:
                await lock.acquire()
            finally:
                slot.waiting -= 1
            try:
                slot.busy = True
                decision = await self._drive(engine.leased_flow(target, cost, slot, prepared.started))
            finally:
                slot.busy = False
                lock.release()
        else:
            decision = await self._drive(engine.store_flow(target, cost))
        return self._finish(prepared, cost, decision)

    async def release(self, decision: Decision) -> None:
        """Gives back the in-flight slots an admitted request holds (when it ends)."""
        target = self._release_target(decision)
        if target is None:
            return
        decision.in_flight = None
        if target.holder is not None and decision.source == "fallback":
            self._engine.release_local(target)
            return
        await self._drive(self._engine.release_flow(target))

    @contextlib.asynccontextmanager
    async def hold(
        self, policy: str, /, cost: int = 1, *, inputs: Mapping[str, object] | None = None, **values: object
    ) -> AsyncIterator[Decision]:
        """``async with limiter.hold("uploads", key=k) as decision:`` checks, and gives the
        request's in-flight slots back when the block ends (however it ends)."""
        decision = await self.check(policy, cost, inputs=inputs, **values)
        try:
            yield decision
        finally:
            if decision.in_flight is not None:
                await self.release(decision)

    async def reserve(
        self, policy: str, /, estimate: int, *, inputs: Mapping[str, object] | None = None, **values: object
    ) -> Reservation:
        """Reserves ``estimate`` units (an LLM call's token budget, say); settle with the
        actual amount once known (see :class:`Reservation`)."""
        merged = _inputs(inputs, values)
        decision = await self.check(policy, estimate, inputs=merged)
        return Reservation(self, policy, merged, estimate, decision)

    async def release_leases(self) -> None:
        """Refunds every outstanding lease now (call it on shutdown)."""
        await self._sweep(everything=True)

    async def aclose(self) -> None:
        """Stops the background sweeper and gives unspent leases back; with ``top_keys``,
        stops the reporter and writes what it had not written yet."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        await self.release_leases()
        if self._reporter is not None:
            await self._reporter.stop()
            try:
                await self._reporter.report_once()
            except StoreError as error:
                log.warning("redis-ratelimit: the last top-keys report was not written: %s", error)

    async def report_top(self) -> None:
        """Writes this replica's changed top-keys summaries now (the reporter does every
        ``report_every``), once; raises ``StoreError``. Nothing without ``top_keys``."""
        if self._reporter is not None:
            await self._reporter.report_once()

    async def top_denied(
        self, policy: str, *, limit: str | None = None, minutes: int = 5, count: int = 10
    ) -> list[TopDenied]:
        """The fleet's most denied keys of each limit of ``policy`` (or of ``limit``) over
        the last ``minutes`` minutes, ``count`` per limit, read from the store now: every
        replica's reports, in every client language (``docs/operating.md``, "Top denied
        keys"). Raises ``TopError`` for a query out of bounds, ``StoreError`` when the store
        does not answer."""
        query = TopQuery(policy, limit, minutes, count)
        if not isinstance(self.store, HashStore):
            raise StoreError("config", f"{type(self.store).__name__} keeps no hashes (the top keys are in Redis)")
        return await read(self.store, query, unix_s(self._clock))

    # The driver.

    async def _drive(self, flow: Flow[T]) -> T:
        reply: OpResult = None
        while True:
            try:
                op = flow.send(reply)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if isinstance(op, AcquireOp):
                reply = await self._timed_acquire(op)
            elif isinstance(op, RefundOp):
                reply = await self._refunds(op)
            elif isinstance(op, SpawnOp):
                task = asyncio.ensure_future(self._drive(op.flow))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                task.add_done_callback(retrieved)
                reply = None
            else:
                raise TypeError(f"unknown operation {op!r}")

    async def _timed_acquire(self, op: AcquireOp) -> Grant | StoreError:
        sent = self._clock.seconds()
        result: Grant | StoreError
        try:
            result = await self.store.acquire(op.request, op.timeout)
        except Exception as error:
            result = classify(error)
        return self._answered(op, sent, result)

    async def _refunds(self, op: RefundOp) -> bool:
        async def one(request: Refund) -> bool:
            started = self._clock.seconds()
            try:
                await self.store.refund(request, op.timeout)
                ok = True
            except Exception as error:
                self.metrics.store_error(op.policy, classify(error).kind)
                ok = False
            self.metrics.store_latency(op.policy, "refund", self._clock.seconds() - started)
            return ok

        return all(await asyncio.gather(*(one(request) for request in op.requests)))

    def _start_sweeper(self, state: PolicyState) -> None:
        if self._sweeper is not None or state.policy.lease is None:
            return
        every = max(min(s.policy.lease.lifetime for s in self._states.values() if s.policy.lease) / 2, 0.01)
        self._sweeper = asyncio.ensure_future(self._sweep_every(every))

    async def _sweep_every(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self._sweep(everything=False)

    async def _sweep(self, everything: bool) -> None:
        now = self._clock.seconds()
        for state in [*self._states.values(), *self._resolved.values()]:
            state.deny.purge(now)
            for keys, units in state.leases.take_expired(now, everything):
                await self._drive(self._engine.refund_lease(state, keys, units))

    async def _reservation_settle(self, reservation: Reservation, actual: int) -> int:
        prepared = self._prepare(reservation.policy, 1, reservation.inputs)
        target = prepared.target
        difference = actual - reservation.estimate
        if difference < 0:
            await self._drive(self._reserve_refund(target, -difference))
            return 0
        if difference > 0:
            return await self._drive(self._reserve_debit(target, difference))
        return 0


class SyncRateLimiter(_Limiter[SyncStore]):
    """The sync twin of :class:`RateLimiter`, on ``redis.Redis`` (or a store): the same
    policies, flows and guarantees. A check runs on the calling thread; its store calls are
    bounded as :class:`~redis_ratelimit_client.store.SyncRedisStore` says (give the client a
    ``socket_connect_timeout``, and on a Cluster a ``socket_timeout``, of a second or so)."""

    def __init__(
        self,
        redis: SyncClient | SyncStore,
        policies: Iterable[Policy] = (),
        *,
        replicas: Replicas = 1,
        breaker: tuple[int, float] = (3, 0.5),
        metrics: Metrics | None = None,
        plans: SyncPlanSource | None = None,
        backend: str = "auto",
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Clock = SYSTEM_CLOCK,
        top_keys: TopKeys | None = None,
        near_limit_share: float = DEFAULT_NEAR_LIMIT_SHARE,
    ) -> None:
        store: SyncStore
        if isinstance(redis, SyncStore):
            store = redis
        else:
            store = SyncRedisStore(redis, backend=backend, metrics=metrics or default_metrics())
        super().__init__(
            store,
            policies,
            replicas,
            breaker,
            metrics,
            plans,
            threading.Lock,
            max_keys,
            clock,
            top_keys,
            near_limit_share,
        )
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._sweeper_lock = threading.Lock()
        self._reporter: SyncReporter | None = None
        if self._top is not None:
            if not isinstance(store, SyncHashStore):
                raise ValueError(
                    f"top_keys: the top-keys reports need a store that keeps hashes (SyncRedisStore, MemoryStore): "
                    f"{type(store).__name__} has no write_hashes_blocking/read_hashes_blocking"
                )
            self._reporter = SyncReporter(self._top, store, self.metrics, self._clock)

    def connect(self) -> str | None:
        try:
            return self.store.connect_blocking()
        except Exception as error:
            raise classify(error) from error

    @property
    def backend(self) -> BackendName | None:
        """The store backend in use (``module``, ``functions``, ``scripts``, ``memory``)."""
        return self.store.backend

    def check(
        self, policy: str, /, cost: int = 1, *, inputs: Mapping[str, object] | None = None, **values: object
    ) -> Decision:
        """See :meth:`RateLimiter.check`."""
        prepared = self._prepare(policy, cost, _inputs(inputs, values))
        self._start_sweeper(prepared.target.state)
        if self._reporter is not None:
            self._reporter.start()
        if prepared.cached is not None:
            return self._observe(prepared, cost, prepared.cached)
        engine = self._engine
        target = prepared.target
        if prepared.leasable:
            slot = target.state.leases.slot(target.key_set, target.keys)
            lock = slot.lock
            assert not isinstance(lock, asyncio.Lock), "the sync limiter's leases have thread locks"
            slot.waiting += 1
            try:
                lock.acquire()
            finally:
                slot.waiting -= 1
            try:
                slot.busy = True
                decision = self._drive(engine.leased_flow(target, cost, slot, prepared.started))
            finally:
                slot.busy = False
                lock.release()
        else:
            decision = self._drive(engine.store_flow(target, cost))
        return self._finish(prepared, cost, decision)

    def release(self, decision: Decision) -> None:
        target = self._release_target(decision)
        if target is None:
            return
        decision.in_flight = None
        if decision.source == "fallback":
            self._engine.release_local(target)
            return
        self._drive(self._engine.release_flow(target))

    @contextlib.contextmanager
    def hold(
        self, policy: str, /, cost: int = 1, *, inputs: Mapping[str, object] | None = None, **values: object
    ) -> Iterator[Decision]:
        decision = self.check(policy, cost, inputs=inputs, **values)
        try:
            yield decision
        finally:
            if decision.in_flight is not None:
                self.release(decision)

    def reserve(
        self, policy: str, /, estimate: int, *, inputs: Mapping[str, object] | None = None, **values: object
    ) -> SyncReservation:
        merged = _inputs(inputs, values)
        decision = self.check(policy, estimate, inputs=merged)
        return SyncReservation(self, policy, merged, estimate, decision)

    def release_leases(self) -> None:
        self._sweep(everything=True)

    def close(self) -> None:
        """Stops the sweeper, gives unspent leases back and the store's connections to the
        client's pool; with ``top_keys``, stops the reporter and writes what it had not
        written yet."""
        self._stop.set()
        self.release_leases()
        if self._reporter is not None:
            self._reporter.stop()
            try:
                self._reporter.report_once()
            except StoreError as error:
                log.warning("redis-ratelimit: the last top-keys report was not written: %s", error)
        if isinstance(self.store, SyncRedisStore):
            self.store.close()

    def report_top(self) -> None:
        """See :meth:`RateLimiter.report_top`."""
        if self._reporter is not None:
            self._reporter.report_once()

    def top_denied(
        self, policy: str, *, limit: str | None = None, minutes: int = 5, count: int = 10
    ) -> list[TopDenied]:
        """See :meth:`RateLimiter.top_denied`."""
        query = TopQuery(policy, limit, minutes, count)
        if not isinstance(self.store, SyncHashStore):
            raise StoreError("config", f"{type(self.store).__name__} keeps no hashes (the top keys are in Redis)")
        return read_blocking(self.store, query, unix_s(self._clock))

    def _drive(self, flow: Flow[T]) -> T:
        reply: OpResult = None
        while True:
            try:
                op = flow.send(reply)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if isinstance(op, AcquireOp):
                reply = self._timed_acquire(op)
            elif isinstance(op, RefundOp):
                reply = self._refunds(op)
            elif isinstance(op, SpawnOp):
                self._drive(op.flow)  # an expired lease's refund: one store call, here
                reply = None
            else:
                raise TypeError(f"unknown operation {op!r}")

    def _timed_acquire(self, op: AcquireOp) -> Grant | StoreError:
        sent = self._clock.seconds()
        result: Grant | StoreError
        try:
            result = self.store.acquire_blocking(op.request, op.timeout)
        except Exception as error:
            result = classify(error)
        return self._answered(op, sent, result)

    def _refunds(self, op: RefundOp) -> bool:
        ok = True
        for request in op.requests:
            started = self._clock.seconds()
            try:
                self.store.refund_blocking(request, op.timeout)
            except Exception as error:
                self.metrics.store_error(op.policy, classify(error).kind)
                ok = False
            self.metrics.store_latency(op.policy, "refund", self._clock.seconds() - started)
        return ok

    def _start_sweeper(self, state: PolicyState) -> None:
        if self._sweeper is not None or state.policy.lease is None:
            return
        with self._sweeper_lock:
            if self._sweeper is not None:
                return
            every = max(min(s.policy.lease.lifetime for s in self._states.values() if s.policy.lease) / 2, 0.01)

            def run() -> None:
                while not self._stop.wait(every):
                    self._sweep(everything=False)

            self._sweeper = threading.Thread(target=run, name="redis-ratelimit-sweeper", daemon=True)
            self._sweeper.start()

    def _sweep(self, everything: bool) -> None:
        now = self._clock.seconds()
        for state in [*self._states.values(), *self._resolved.values()]:
            state.deny.purge(now)
            for keys, units in state.leases.take_expired(now, everything):
                self._drive(self._engine.refund_lease(state, keys, units))

    def _reservation_settle(self, reservation: SyncReservation, actual: int) -> int:
        prepared = self._prepare(reservation.policy, 1, reservation.inputs)
        difference = actual - reservation.estimate
        if difference < 0:
            self._drive(self._reserve_refund(prepared.target, -difference))
            return 0
        if difference > 0:
            return self._drive(self._reserve_debit(prepared.target, difference))
        return 0


class _ReservationBase:
    """Units reserved before the real amount is known (LLM tokens, bytes of an upload).

    ``settle(actual)`` refunds ``estimate - actual`` when the call used less, and debits
    ``actual - estimate`` when it used more: as much as every limit holds at once, and the
    rest is owed by the key set, charged (as partial grants, before deciding) by this
    replica's next checks of it. **Debt bound**: at any instant a key set's admissions exceed
    its allowance by at most the overshoot of its settled reservations still owed, each
    overshoot at most ``actual - estimate``; it is paid from the refill before any later
    request of that key set is decided by the store on this replica (a replica that stops
    forgets its debts: that much over-admission, never more). ``release()`` gives the whole
    estimate back (the call was not made). A denied reservation has nothing to settle.
    """

    def __init__(self, policy: str, inputs: dict[str, str], estimate: int, decision: Decision) -> None:
        self.policy = policy
        self.inputs = inputs
        self.estimate = estimate
        self.decision = decision
        self.settled = False
        #: Units the last settle could not take from the limits (owed by the key set).
        self.owed = 0

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def _begin(self, actual: int) -> bool:
        if not isinstance(actual, int) or isinstance(actual, bool) or not 0 <= actual <= max_units(None):
            raise CheckError(
                f"a reservation settles with a whole number of units from 0 to {max_units(None)} (got {actual!r})"
            )
        if self.settled:
            raise CheckError("this reservation was already settled or released")
        self.settled = True
        return self.decision.allowed


class Reservation(_ReservationBase):
    def __init__(
        self, limiter: RateLimiter, policy: str, inputs: dict[str, str], estimate: int, decision: Decision
    ) -> None:
        super().__init__(policy, inputs, estimate, decision)
        self._limiter = limiter

    async def settle(self, actual: int) -> int:
        """Refunds or debits the difference to ``actual``; returns the units owed."""
        if not self._begin(actual):
            return 0
        self.owed = await self._limiter._reservation_settle(self, actual)  # noqa: SLF001
        return self.owed

    async def release(self) -> None:
        """The call was not made: every reserved unit goes back."""
        await self.settle(0)


class SyncReservation(_ReservationBase):
    def __init__(
        self, limiter: SyncRateLimiter, policy: str, inputs: dict[str, str], estimate: int, decision: Decision
    ) -> None:
        super().__init__(policy, inputs, estimate, decision)
        self._limiter = limiter

    def settle(self, actual: int) -> int:
        if not self._begin(actual):
            return 0
        self.owed = self._limiter._reservation_settle(self, actual)  # noqa: SLF001
        return self.owed

    def release(self) -> None:
        self.settle(0)
