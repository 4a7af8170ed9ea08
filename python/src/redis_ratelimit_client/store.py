"""Where limits are decided: Redis (through redis-py, async or sync, a server, a Cluster or a
Sentinel primary) or an in-process memory store for tests. A store *acquires* units from a
group of limits sharing a slot (all or nothing, or a partial grant) and *refunds* them.

The async store pipelines: the commands of checks made in the same turn of the event loop go
to Redis as one pipeline on one connection (the Rust client multiplexes one connection the
same way), so a thousand concurrent checks are a few round trips, not a thousand connections.
Keyed commands are sent exactly once, without the client's retry (:mod:`.once`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

from .core.engine import KindMismatch
from .decision import View
from .local import LocalLimits
from .metrics import Metrics
from .once import is_cluster, send, send_async, send_batch_async
from .protocol import (
    Acquire,
    Backend,
    Command,
    Grant,
    Refund,
    StoreError,
    acquire_flow,
    classify,
    has_command,
    keyed,
    lost,
    refund_commands,
    reload,
    resolve,
)
from .state import now_us

log = logging.getLogger("redis_ratelimit_client")

_HASH_SLOTS = 16384


def key_slot(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (its ``{hash tag}`` if any)."""
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    from binascii import crc_hqx

    return crc_hqx(data, 0) % _HASH_SLOTS


class _Resolved:
    __slots__ = ("backend", "multi", "sha")

    def __init__(self, backend: str, sha: str, multi: bool) -> None:
        self.backend, self.sha, self.multi = backend, sha, multi


def _resolution(wanted: Backend, multi: bool | None) -> Generator[Command, Any, _Resolved]:
    backend, sha = yield from resolve(wanted)
    if backend != "module":
        return _Resolved(backend, sha, True)
    if multi is None:
        multi = yield from has_command("RL.MULTI")
    return _Resolved(backend, sha, multi)


def _refund_flow(request: Refund, resolved: _Resolved) -> Generator[list[Command], list[Any], None]:
    commands = refund_commands(request)
    for attempt in range(2):
        replies = yield [keyed(resolved.backend, resolved.sha, args) for args in commands]
        errors = [reply for reply in replies if isinstance(reply, BaseException)]
        if not errors:
            return
        if attempt == 0 and any(lost(resolved.backend, error) for error in errors):
            sha = yield from _as_batches(reload(resolved.backend))
            resolved.sha = sha or resolved.sha
            continue
        raise classify(errors[0])


def _as_batches(flow: Generator[Command, Any, Any]) -> Generator[list[Command], list[Any], Any]:
    """Runs a flow of single commands as a flow of one-command batches."""
    reply: Any = None
    while True:
        try:
            command = flow.send(reply)
        except StopIteration as stop:
            return stop.value
        replies = yield [command]
        reply = replies[0]


def _call_flow(args: list[str], resolved: _Resolved) -> Generator[Command, Any, Any]:
    """Any module command on the backend in use, once more after reloading lost code."""
    for attempt in range(2):
        reply = yield keyed(resolved.backend, resolved.sha, args)
        if isinstance(reply, BaseException):
            if attempt == 0 and lost(resolved.backend, reply):
                resolved.sha = (yield from reload(resolved.backend)) or resolved.sha
                continue
            raise classify(reply)
        return reply
    raise StoreError("server", "the server lost the backend's code twice")


class _BaseRedisStore:
    def __init__(self, client: Any, backend: Backend | str, multi: bool | None, metrics: Metrics | None) -> None:
        self.client = client
        self.wanted = Backend(backend)
        self.cluster = is_cluster(client)
        self._multi_hint = multi
        self._resolved: _Resolved | None = None
        self.metrics = metrics or Metrics()

    @property
    def backend(self) -> str | None:
        """The backend in use (``module``, ``functions``, ``scripts``), once resolved."""
        return None if self._resolved is None else self._resolved.backend

    def capabilities(self) -> tuple[bool, bool]:
        """``(multi, partial)``: ``RL.MULTI`` and partial grants (the library has both)."""
        multi = self._resolved.multi if self._resolved is not None else bool(self._multi_hint)
        return multi, multi

    def slot(self, key: str) -> int | None:
        return key_slot(key) if self.cluster else None

    def _published(self, resolved: _Resolved) -> None:
        self._resolved = resolved
        self.metrics.backend(resolved.backend)
        log.info("redis-ratelimit: store backend %s (RL.MULTI: %s)", resolved.backend, resolved.multi)


class _Pipeliner:
    """Sends the keyed commands submitted in one turn of the event loop as one pipeline,
    exactly once (:mod:`redis_ratelimit_client.once`)."""

    def __init__(self, client: Any, max_batch: int = 512, max_batches: int = 4) -> None:
        self._client = client
        self._pending: list[tuple[Command, asyncio.Future[Any]]] = []
        self._running = 0
        self._scheduled = False
        self._max_batch = max_batch
        self._max_batches = max_batches
        #: The batches in flight (a task without a reference can be collected mid-flight).
        self._sending: set[asyncio.Future[None]] = set()

    def submit(self, command: Command) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((command, future))
        if not self._scheduled and self._running < self._max_batches:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        while self._pending and self._running < self._max_batches:
            taken = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            batch = [(command, future) for command, future in taken if not future.done()]
            if batch:
                self._running += 1
                task = asyncio.ensure_future(self._send(batch))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Command, asyncio.Future[Any]]]) -> None:
        try:
            replies = await send_batch_async(self._client, [command.args for command, _ in batch])
            for (_, future), reply in zip(batch, replies, strict=True):
                if not future.done():
                    future.set_result(reply)
        except Exception as error:
            for _, future in batch:
                if not future.done():
                    future.set_result(error)
        finally:
            self._running -= 1
            if self._pending and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)


class RedisStore(_BaseRedisStore):
    """The store on a ``redis.asyncio`` client: ``Redis`` (also a Sentinel ``master_for``)
    or ``RedisCluster``."""

    def __init__(
        self,
        client: Any,
        *,
        backend: Backend | str = Backend.AUTO,
        multi: bool | None = None,
        metrics: Metrics | None = None,
        pipeline: bool = True,
    ) -> None:
        super().__init__(client, backend, multi, metrics)
        self._pipeliner = _Pipeliner(client) if pipeline and not self.cluster else None
        self._resolving: asyncio.Task[_Resolved] | None = None

    async def _command(self, command: Command) -> Any:
        try:
            if self.cluster and (command.everywhere or command.anywhere):
                nodes = self.client.get_primaries() if command.everywhere else [self.client.get_random_node()]
                return await self.client.execute_command(*command.args, target_nodes=nodes)
            if command.key is None:
                return await self.client.execute_command(*command.args)
            if self._pipeliner is not None:
                return await self._pipeliner.submit(command)
            return await send_async(self.client, command.args, command.key)
        except Exception as error:  # sorted by the flow: an error reply, or out of reach
            return error

    async def _run(self, flow: Generator[Any, Any, Any]) -> Any:
        reply: Any = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as stop:
                return stop.value
            if isinstance(step, list):
                reply = list(await asyncio.gather(*(self._command(command) for command in step)))
            else:
                reply = await self._command(step)

    async def connect(self) -> str:
        """Resolves the backend now (else on the first check); returns its name."""
        return (await self._ready()).backend

    async def _ready(self) -> _Resolved:
        if self._resolved is not None:
            return self._resolved
        if self._resolving is None or self._resolving.done():
            self._resolving = asyncio.ensure_future(self._resolve())
        # Shielded: a check that gives up waiting must not cancel a resolution that takes longer.
        return await asyncio.shield(self._resolving)

    async def _resolve(self) -> _Resolved:
        if self.cluster:
            try:
                await self.client.initialize()
            except Exception as error:  # out of reach: the check falls back, the next resolves
                raise classify(error) from error
        resolved: _Resolved = await self._run(_resolution(self.wanted, self._multi_hint))
        self._published(resolved)
        return resolved

    async def acquire(self, request: Acquire) -> Grant:
        resolved = await self._ready()
        grant: Grant = await self._run(acquire_flow(request, resolved.backend, resolved.sha, resolved.multi))
        return grant

    async def refund(self, request: Refund) -> None:
        resolved = await self._ready()
        await self._run(_refund_flow(request, resolved))

    async def call(self, *args: object) -> Any:
        """Runs a module command (``RL.PEEK key ...``) on the backend in use."""
        resolved = await self._ready()
        return await self._run(_call_flow([str(arg) for arg in args], resolved))


class SyncRedisStore(_BaseRedisStore):
    """The store on a sync client: ``redis.Redis`` (also a Sentinel ``master_for``) or
    ``redis.cluster.RedisCluster``. Calls block the calling thread (the sync limiter runs
    them on its own threads, bounded by the policy's timeout)."""

    def __init__(
        self,
        client: Any,
        *,
        backend: Backend | str = Backend.AUTO,
        multi: bool | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(client, backend, multi, metrics)
        self._lock = threading.Lock()

    def _command(self, command: Command) -> Any:
        try:
            if self.cluster and (command.everywhere or command.anywhere):
                nodes = self.client.get_primaries() if command.everywhere else [self.client.get_random_node()]
                return self.client.execute_command(*command.args, target_nodes=nodes)
            if command.key is None:
                return self.client.execute_command(*command.args)
            return send(self.client, command.args, command.key)
        except Exception as error:  # sorted by the flow: an error reply, or out of reach
            return error

    def _run(self, flow: Generator[Any, Any, Any]) -> Any:
        reply: Any = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as stop:
                return stop.value
            if isinstance(step, list):
                reply = [self._command(command) for command in step]
            else:
                reply = self._command(step)

    def connect(self) -> str:
        return self._ready().backend

    def _ready(self) -> _Resolved:
        if self._resolved is not None:
            return self._resolved
        with self._lock:
            if self._resolved is None:
                self._published(self._run(_resolution(self.wanted, self._multi_hint)))
            assert self._resolved is not None
            return self._resolved

    def acquire_blocking(self, request: Acquire) -> Grant:
        resolved = self._ready()
        grant: Grant = self._run(acquire_flow(request, resolved.backend, resolved.sha, resolved.multi))
        return grant

    def refund_blocking(self, request: Refund) -> None:
        self._run(_refund_flow(request, self._ready()))

    def call(self, *args: object) -> Any:
        """Runs a module command (``RL.PEEK key ...``) on the backend in use."""
        return self._run(_call_flow([str(arg) for arg in args], self._ready()))


class MemoryStore:
    """An in-process store on the core's algorithms and this process's clock, for tests and
    single-process services. ``down`` makes every call fail as unreachable; ``cluster``
    reports hash slots so limits in different slots are called separately."""

    backend = "memory"

    def __init__(self, *, multi: bool = True, cluster: bool = False, clock: Callable[[], int] | None = None) -> None:
        self.limits = LocalLimits(strict=True)
        #: Unix µs of the decisions (default: this process's clock).
        self.clock = clock or now_us
        self._multi = multi
        self.cluster = cluster
        self.down = False
        self.delay = 0.0
        self.offset_us = 0
        self.calls = 0
        self._lock = threading.Lock()

    def capabilities(self) -> tuple[bool, bool]:
        return self._multi, self._multi

    def slot(self, key: str) -> int | None:
        return key_slot(key) if self.cluster else None

    def _acquire(self, request: Acquire) -> Grant:
        self.calls += 1
        if self.down:
            raise StoreError("unavailable", "the memory store is down")
        quotas = []
        for call in request.calls:
            quota = call.algorithm.shape().unit_quota()
            if call.max_wait_ms is not None:
                quota = quota.with_max_wait_ns(call.max_wait_ms * 1_000_000)  # type: ignore[attr-defined]
            if call.algorithm.in_flight:
                if request.holder is None:
                    raise StoreError("config", "an in-flight limit needs a holder id")
                quota = quota.with_holder(request.holder.encode())  # type: ignore[attr-defined]
            quotas.append(quota)
        keys = [call.key for call in request.calls]
        with self._lock:
            try:
                verdict = self.limits.acquire(
                    keys,
                    quotas,
                    [call.weight for call in request.calls],
                    request.units,
                    request.partial_min,
                    self.clock() + self.offset_us,
                )
            except KindMismatch as error:
                raise StoreError(
                    "server", f"WRONGTYPE key '{keys[error.index]}' holds another kind of limiter"
                ) from None
        views = tuple(View.from_fields(decision.reply_fields()) for decision in verdict.per_limit)
        if request.partial_min is None and len(views) == 1:
            view = views[0]
            views = (View(verdict.units > 0, view.remaining, view.retry_after_ms, view.reset_after_ms, view.limit),)
        return Grant(verdict.units, verdict.binding, views, "memory")

    def _refund(self, request: Refund) -> None:
        self.calls += 1
        if self.down:
            raise StoreError("unavailable", "the memory store is down")
        keys, quotas = [], []
        for call in request.calls:
            quota = call.algorithm.shape().unit_quota().with_cost(request.units * call.weight)
            if call.algorithm.in_flight:
                quota = quota.with_holder((request.holder or "-").encode())  # type: ignore[attr-defined]
            keys.append(call.key)
            quotas.append(quota)
        with self._lock:
            self.limits.refund(keys, quotas, self.clock() + self.offset_us)

    async def acquire(self, request: Acquire) -> Grant:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._acquire(request)

    async def refund(self, request: Refund) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self._refund(request)

    async def connect(self) -> str:
        return "memory"

    def acquire_blocking(self, request: Acquire) -> Grant:
        if self.delay:
            time.sleep(self.delay)
        return self._acquire(request)

    def refund_blocking(self, request: Refund) -> None:
        if self.delay:
            time.sleep(self.delay)
        self._refund(request)
