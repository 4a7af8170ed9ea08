"""Where limits are decided: Redis (through redis-py, async or sync, a server, a Cluster or a
Sentinel primary) or an in-process memory store for tests. A store *acquires* units from a
group of limits sharing a slot (all or nothing, or a partial grant) and *refunds* them.

The async store multiplexes one connection: the commands of checks made in the same turn of
the event loop go to Redis in one write, without waiting for earlier replies (as the Rust
client does), so a thousand concurrent checks are a few round trips, not a thousand
connections.
Keyed commands are never sent twice: the multiplexer's own connection never resends, and the
cluster path sends each to its key's node without the client's retry (:mod:`.once`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TypeAlias, TypeVar

from redis.exceptions import ResponseError

from .clock import SYSTEM_CLOCK, Clock, LimiterClock
from .core.engine import KindMismatch
from .local import LocalLimits
from .metrics import Metrics
from .once import is_cluster, send_cluster, send_cluster_async
from .protocol import (
    Acquire,
    Backend,
    Command,
    Grant,
    Refund,
    Reply,
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
from .redis_boundary import AsyncClient, Connection, Pool, RedisReply, SyncClient
from .replies import BackendName, View
from .store_api import BOTH, NEITHER, Capabilities, HashFields, HashWrite
from .sync_connections import SyncConnections
from .timing import HARD_BOUND_TIMEOUTS, next_look, timed_out

T = TypeVar("T")
#: A store flow: the commands it needs, one at a time or a batch at once (sent together),
#: and what they answered, ending in a ``T``.
StoreFlow: TypeAlias = Generator[Command | list[Command], Reply, T]

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


def _hash_commands(hashes: Sequence[HashWrite]) -> list[Command]:
    """The commands writing ``hashes``: ``HSET key field value ...`` then ``PEXPIREAT key ms``
    for each, each to be sent once."""
    commands = []
    for written in hashes:
        args = ["HSET", written.key]
        for field, value in written.fields:
            args += [field, value]
        commands.append(Command(tuple(args), key=written.key))
        commands.append(Command(("PEXPIREAT", written.key, str(written.expire_at_ms)), key=written.key))
    return commands


def _text(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _hash_fields(reply: Reply) -> HashFields:
    """An ``HGETALL`` reply: a map (RESP3, or a cluster client's parsed reply) or a flat list
    of fields and values; raises the reply when it is an error."""
    if isinstance(reply, BaseException):
        raise classify(reply)
    if reply is None:
        return []
    if isinstance(reply, dict):
        return [(_text(field), _text(value)) for field, value in reply.items()]
    if isinstance(reply, (list, tuple)):
        return [(_text(reply[i]), _text(reply[i + 1])) for i in range(0, len(reply) - 1, 2)]
    raise StoreError("server", f"HGETALL: not a hash: {reply!r}")


def _written(replies: Sequence[Reply]) -> None:
    """Raises the first error among a hash write's replies."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise classify(reply)


class _Resolved:
    __slots__ = ("backend", "multi", "sha")

    def __init__(self, backend: BackendName, sha: str, multi: bool) -> None:
        self.backend, self.sha, self.multi = backend, sha, multi


def _resolution(wanted: Backend, multi: bool | None) -> Generator[Command, Reply, _Resolved]:
    backend, sha = yield from resolve(wanted)
    if backend != "module":
        return _Resolved(backend, sha, True)
    if multi is None:
        multi = yield from has_command("RL.MULTI")
    return _Resolved(backend, sha, multi)


def _refund_flow(request: Refund, resolved: _Resolved) -> Generator[list[Command], Reply, None]:
    commands = refund_commands(request)
    for attempt in range(2):
        replies = yield [keyed(resolved.backend, resolved.sha, args) for args in commands]
        assert isinstance(replies, list), "a batch is answered by a list of replies"
        errors = [reply for reply in replies if isinstance(reply, BaseException)]
        if not errors:
            return
        if attempt == 0 and any(lost(resolved.backend, error) for error in errors):
            sha = yield from _as_batches(reload(resolved.backend))
            resolved.sha = sha or resolved.sha
            continue
        raise classify(errors[0])


def _as_batches(flow: Generator[Command, Reply, T]) -> Generator[list[Command], Reply, T]:
    """Runs a flow of single commands as a flow of one-command batches."""
    reply: Reply = None
    while True:
        try:
            command = flow.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result
        replies = yield [command]
        assert isinstance(replies, list), "a batch is answered by a list of replies"
        reply = replies[0]


def _call_flow(args: list[str], resolved: _Resolved) -> Generator[Command, Reply, Reply]:
    """A module command on the backend in use, once more after reloading lost code."""
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
    def __init__(
        self, client: AsyncClient | SyncClient, backend: Backend | str, multi: bool | None, metrics: Metrics | None
    ) -> None:
        self.client = client
        self.wanted = Backend(backend)
        self.cluster = is_cluster(client)
        self._multi_hint = multi
        self._resolved: _Resolved | None = None
        self.metrics = metrics or Metrics()

    @property
    def backend(self) -> BackendName | None:
        """The backend in use (``module``, ``functions``, ``scripts``), once resolved."""
        return None if self._resolved is None else self._resolved.backend

    def capabilities(self) -> Capabilities:
        """``RL.MULTI`` and partial grants: both or neither (the library has both)."""
        multi = self._resolved.multi if self._resolved is not None else bool(self._multi_hint)
        return BOTH if multi else NEITHER

    def slot(self, key: str) -> int | None:
        return key_slot(key) if self.cluster else None

    def _published(self, resolved: _Resolved) -> None:
        self._resolved = resolved
        self.metrics.backend(resolved.backend)
        log.info("redis-ratelimit: store backend %s (RL.MULTI: %s)", resolved.backend, resolved.multi)


def _take_connection(pool: Pool) -> Awaitable[Connection]:
    """A connection from a redis-py async pool (the awaitable), on redis-py 5.0
    (which wants a command name) and later (which warns about one)."""
    opening: Awaitable[Connection]
    try:
        opening = pool.get_connection()
    except TypeError:
        opening = pool.get_connection("_")
    return opening


class _Queued:
    """A command, its reply to come, its timeout; when it was handed to the connection and
    when its bytes had all left this process (monotonic seconds; ``None``: not yet)."""

    __slots__ = ("args", "future", "sent_at", "timeout", "written_at")

    def __init__(self, args: tuple[str, ...], future: asyncio.Future[Reply], timeout: float) -> None:
        self.args, self.future, self.timeout = args, future, timeout
        self.sent_at = 0.0
        self.written_at: float | None = None

    def next_look(self, read_at: float) -> float:
        return next_look(self.sent_at, self.written_at, read_at, self.timeout)

    def timed_out(self, now: float, read_at: float) -> bool:
        return timed_out(now, self.sent_at, self.written_at, read_at, self.timeout)


def _packed(connection: Connection, batch: list[_Queued]) -> tuple[list[bytes], list[_Queued]]:
    """The batch's bytes, and the commands in them: one that cannot be encoded (a key with a
    lone surrogate) gets its error, and the others go without it."""
    try:
        return connection.pack_commands([command.args for command in batch]), batch
    except Exception:  # find the ones at fault
        kept = []
        for command in batch:
            try:
                connection.pack_command(*command.args)
            except Exception as error:  # the caller's input: the flow sorts it
                command.future.set_result(error)
            else:
                kept.append(command)
        return (connection.pack_commands([command.args for command in kept]) if kept else []), kept


class _Multiplexer:
    """Every command of the async store on one connection, as the Rust client multiplexes
    one: the commands submitted in a turn of the event loop are written together (at most
    ``max_batch`` per write) without waiting for earlier replies, and one reader takes the
    replies in order.

    Timing (:mod:`redis_ratelimit_client.timing`): a command times out when the connection
    read nothing for a whole timeout since the command's bytes had all left (the transport
    holds none of them: a burst this process is slow to write is not the store's silence) or
    since the last reply, looked at after the reader had its turn at what the socket holds;
    the connection is dropped (and opened again for later commands) when its oldest
    unanswered command reaches the hard bound. Opening a connection: see :meth:`_open`."""

    def __init__(self, client: AsyncClient, max_batch: int = 512) -> None:
        self._pool: Pool = client.connection_pool
        self._max_batch = max_batch
        #: ``None`` until opened, and once dropped.
        self._connection: Connection = None
        self._pending: collections.deque[_Queued] = collections.deque()
        self._in_flight: collections.deque[_Queued] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watch: asyncio.Handle | None = None
        self._watch_at = math.inf
        #: When the connection last read a reply (monotonic seconds).
        self.read_at = 0.0

    def submit(self, args: tuple[str, ...], timeout: float) -> asyncio.Future[Reply]:
        """The command's reply, or the exception it raised (an error reply, the connection's,
        or ``StoreError("timeout")``)."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending.append(_Queued(args, future, timeout))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write())
        return future

    async def _write(self) -> None:
        while self._pending:
            if self._connection is None and not await self._open():
                return
            connection = self._connection
            batch: list[_Queued] = []
            while self._pending and len(batch) < self._max_batch:
                command = self._pending.popleft()
                if not command.future.done():
                    batch.append(command)
            if not batch:
                continue
            packed, batch = _packed(connection, batch)
            if not batch:
                continue
            sent = time.monotonic()
            for command in batch:
                command.sent_at = sent
            # In flight before the bytes leave: the reader may take their replies at once.
            self._in_flight.extend(batch)
            if self._reader is None or self._reader.done():
                self._reader = asyncio.ensure_future(self._read(connection))
            self._arm(min(command.next_look(self.read_at) for command in batch))
            try:
                # Returns once the transport holds none of the bytes (see _open).
                await connection.send_packed_command(packed, check_health=False)
            except Exception as error:  # the connection broke: what it carried has an unknown outcome
                if connection is self._connection:
                    self._drop(error)
                continue
            written = time.monotonic()
            for command in batch:
                command.written_at = written
            self._arm(min(command.next_look(self.read_at) for command in batch))

    async def _open(self) -> bool:
        """Opens the connection; on failure every pending command gets the error.

        Nothing can be read before it is open, and a burst that finds no connection keeps
        this process busy while the connection's handshake waits its turns, so opening is
        bounded by a timeout of this process's idle time: it looks every tenth of a timeout,
        and a look that runs on time (within half its interval) counts; one that runs late
        (this process was busy) does not. At most the hard bound in all."""
        timeout = min(command.timeout for command in self._pending)
        opening = asyncio.ensure_future(_take_connection(self._pool))
        hard = time.monotonic() + HARD_BOUND_TIMEOUTS * timeout
        interval, idle = timeout / 10, 0.0
        while not opening.done():
            due = time.monotonic() + interval
            await asyncio.wait({opening}, timeout=interval)
            now = time.monotonic()
            if now - due <= interval / 2:
                idle += interval
            if not opening.done() and (idle >= timeout or now >= hard):
                opening.cancel()
                await asyncio.wait({opening})
        try:
            connection = opening.result()
        except (Exception, asyncio.CancelledError) as error:
            failure = StoreError("timeout") if isinstance(error, asyncio.CancelledError) else error
            while self._pending:
                command = self._pending.popleft()
                if not command.future.done():
                    command.future.set_result(failure)
            return False
        # A write waits until the transport holds none of its bytes (redis-py's connection
        # keeps its stream writer as _writer): until then the command is not yet sent.
        writer = getattr(connection, "_writer", None)
        if writer is not None:
            writer.transport.set_write_buffer_limits(high=0)
        self._connection = connection
        self.read_at = time.monotonic()
        return True

    async def _read(self, connection: Connection) -> None:
        while self._in_flight and connection is self._connection:
            try:
                reply: Reply = await connection.read_response()
            except ResponseError as error:  # an error reply: the flow sorts it
                reply = error
            except asyncio.CancelledError:  # dropped: _drop answered the commands
                raise
            except Exception as error:  # the connection broke
                if connection is self._connection:
                    self._drop(error)
                return
            self.read_at = time.monotonic()
            command = self._in_flight.popleft()
            if not command.future.done():
                command.future.set_result(reply)

    def _drop(self, error: BaseException) -> None:
        """Gives up the connection: the commands it carries get ``error`` (their outcome is
        unknown, and they are never sent again); later ones go on a new connection."""
        connection, self._connection = self._connection, None
        while self._in_flight:
            command = self._in_flight.popleft()
            if not command.future.done():
                command.future.set_result(error)
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
        if connection is not None:
            task = asyncio.ensure_future(self._discard(connection))
            _BACKGROUND.add(task)
            task.add_done_callback(_BACKGROUND.discard)

    async def _discard(self, connection: Connection) -> None:
        with contextlib.suppress(Exception):
            await connection.disconnect()
        with contextlib.suppress(Exception):
            await self._pool.release(connection)

    def _arm(self, at: float) -> None:
        """Looks at the commands in flight at ``at`` (monotonic), or sooner if armed sooner."""
        if self._watch is not None and self._watch_at <= at:
            return
        if self._watch is not None:
            self._watch.cancel()
        self._watch_at = at
        self._watch = asyncio.get_running_loop().call_later(max(at - time.monotonic(), 0.0), self._look)

    def _look(self) -> None:
        # A timer runs after the I/O callbacks of its turn of the loop, and the reader they
        # woke runs before a callback scheduled now: judge once it read what had arrived.
        self._watch = asyncio.get_running_loop().call_soon(self._judge)

    def _judge(self) -> None:
        self._watch, self._watch_at = None, math.inf
        now = time.monotonic()
        waiting = [command for command in self._in_flight if not command.future.done()]
        for command in waiting:
            if command.timed_out(now, self.read_at):
                command.future.set_result(StoreError("timeout"))
        if self._in_flight:
            oldest = self._in_flight[0]
            hard = oldest.sent_at + HARD_BOUND_TIMEOUTS * oldest.timeout
            if now >= hard:  # stuck: later commands go on a new connection
                self._drop(StoreError("timeout"))
                return
            looks = [command.next_look(self.read_at) for command in waiting if not command.future.done()]
            self._arm(min([hard, *looks]))


#: Tasks run in the background (a task without a reference can be collected mid-flight).
_BACKGROUND: set[asyncio.Task[None]] = set()


class RedisStore(_BaseRedisStore):
    """The store on a ``redis.asyncio`` client: ``Redis`` (also a Sentinel ``master_for``)
    or ``RedisCluster``. Every call is bounded by the timeout it is given, by the rule of
    :mod:`redis_ratelimit_client.timing`."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        backend: Backend | str = Backend.AUTO,
        multi: bool | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(client, backend, multi, metrics)
        self._multiplexer = None if self.cluster else _Multiplexer(client)
        self._resolving: asyncio.Task[_Resolved] | None = None
        #: When a cluster call last read a reply (monotonic seconds).
        self._read_at = 0.0

    async def _command(self, command: Command, timeout: float) -> Reply:
        if self._multiplexer is not None:
            return await self._multiplexer.submit(command.args, timeout)
        return await self._cluster_command(command, timeout)

    async def _cluster_command(self, command: Command, timeout: float) -> Reply:
        """A command through the cluster client (which picks the node): timed out when no
        cluster call read a reply for a whole timeout since it was sent (or the hard bound)."""
        sent = time.monotonic()
        call = asyncio.ensure_future(self._execute(command))
        while True:
            delay = next_look(sent, sent, self._read_at, timeout) - time.monotonic()
            done, _ = await asyncio.wait({call}, timeout=max(delay, 0.0))
            # The wait's timer ran after its turn's I/O callbacks; the reader they woke ran first.
            if done:
                return call.result()
            if timed_out(time.monotonic(), sent, sent, self._read_at, timeout):
                call.cancel()
                return StoreError("timeout")

    async def _execute(self, command: Command) -> Reply:
        reply: Reply
        try:
            if command.everywhere or command.anywhere:
                nodes = self.client.get_primaries() if command.everywhere else [self.client.get_random_node()]
                reply = await self.client.execute_command(*command.args, target_nodes=nodes)
            elif command.key is None:
                reply = await self.client.execute_command(*command.args)
            else:  # a keyed command: to its key's node, never resent (.once)
                reply = await send_cluster_async(self.client, command.args, command.key)
        except ResponseError as error:  # an error reply: the flow sorts it
            reply = error
        except Exception as error:  # out of reach: the flow sorts it
            return error
        self._read_at = time.monotonic()
        return reply

    async def _run(self, flow: StoreFlow[T], timeout: float) -> T:
        reply: Reply = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if isinstance(step, list):
                reply = list(await asyncio.gather(*(self._command(command, timeout) for command in step)))
            else:
                reply = await self._command(step, timeout)

    async def connect(self, timeout: float = 1.0) -> str:
        """Resolves the backend now (else on the first check); returns its name."""
        return (await self._ready(timeout)).backend

    async def _ready(self, timeout: float) -> _Resolved:
        if self._resolved is not None:
            return self._resolved
        if self._resolving is None or self._resolving.done():
            self._resolving = asyncio.ensure_future(self._resolve(timeout))
        # Shielded: a check that gives up waiting must not cancel a resolution that takes longer.
        return await asyncio.shield(self._resolving)

    async def _resolve(self, timeout: float) -> _Resolved:
        if self.cluster:
            try:
                await self.client.initialize()
            except Exception as error:  # out of reach: the check falls back, the next resolves
                raise classify(error) from error
        resolved = await self._run(_resolution(self.wanted, self._multi_hint), timeout)
        self._published(resolved)
        return resolved

    async def acquire(self, request: Acquire, timeout: float) -> Grant:
        resolved = await self._ready(timeout)
        return await self._run(acquire_flow(request, resolved.backend, resolved.sha, resolved.multi), timeout)

    async def refund(self, request: Refund, timeout: float) -> None:
        resolved = await self._ready(timeout)
        await self._run(_refund_flow(request, resolved), timeout)

    async def call(self, *args: object, timeout: float = 1.0) -> RedisReply:
        """Runs a module command (``RL.PEEK key ...``) on the backend in use; its reply as
        redis-py reads it."""
        resolved = await self._ready(timeout)
        return await self._run(_call_flow([str(arg) for arg in args], resolved), timeout)

    async def _all(self, commands: Sequence[Command], timeout: float) -> list[Reply]:
        """``commands`` submitted in one turn of the loop: on the multiplexed connection,
        one write; each sent once."""
        return list(await asyncio.gather(*(self._command(command, timeout) for command in commands)))

    async def write_hashes(self, hashes: Sequence[HashWrite], timeout: float) -> None:
        """The top-keys reports (:class:`~redis_ratelimit_client.store_api.HashStore`)."""
        if hashes:
            _written(await self._all(_hash_commands(hashes), timeout))

    async def read_hashes(self, keys: Sequence[str], timeout: float) -> list[HashFields]:
        replies = await self._all([Command(("HGETALL", key), key=key) for key in keys], timeout)
        return [_hash_fields(reply) for reply in replies]


class SyncRedisStore(_BaseRedisStore):
    """The store on a sync client: ``redis.Redis`` (also a Sentinel ``master_for``) or
    ``redis.cluster.RedisCluster``. Calls run on the calling thread, at most ``connections``
    at once on connections of its own made like the client's (more threads wait their turn,
    up to the hard bound), each timed by the rule of
    :mod:`redis_ratelimit_client.timing` (see
    :class:`~redis_ratelimit_client.sync_connections.SyncConnections`). A reply that starts but
    stops half way, and every call on a Cluster, are bounded by the client's own
    ``socket_timeout``."""

    def __init__(
        self,
        client: SyncClient,
        *,
        backend: Backend | str = Backend.AUTO,
        multi: bool | None = None,
        metrics: Metrics | None = None,
        connections: int = 32,
    ) -> None:
        super().__init__(client, backend, multi, metrics)
        self._lock = threading.Lock()
        self._connections = None if self.cluster else SyncConnections(client.connection_pool, connections)

    def _command(self, command: Command, timeout: float | None) -> Reply:
        if self._connections is None:
            return self._cluster_command(command)
        return self._connections.call(command.args, timeout)

    def close(self) -> None:
        """Closes its connections."""
        if self._connections is not None:
            self._connections.close()

    def _cluster_command(self, command: Command) -> Reply:
        try:
            if command.everywhere or command.anywhere:
                nodes = self.client.get_primaries() if command.everywhere else [self.client.get_random_node()]
                return self.client.execute_command(*command.args, target_nodes=nodes)
            if command.key is None:
                return self.client.execute_command(*command.args)
            return send_cluster(self.client, command.args, command.key)
        except Exception as error:  # sorted by the flow: an error reply, or out of reach
            return error

    def _run(self, flow: StoreFlow[T], timeout: float | None) -> T:
        reply: Reply = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if isinstance(step, list):
                reply = [self._command(command, timeout) for command in step]
            else:
                reply = self._command(step, timeout)

    def connect(self, timeout: float = 1.0) -> str:
        """Resolves the backend now (else on the first check); returns its name."""
        return self._ready(timeout).backend

    def connect_blocking(self, timeout: float = 1.0) -> str:
        """:meth:`connect` (the name :class:`~redis_ratelimit_client.store_api.SyncStore` gives it)."""
        return self.connect(timeout)

    def _ready(self, timeout: float | None) -> _Resolved:
        if self._resolved is not None:
            return self._resolved
        with self._lock:
            if self._resolved is None:
                self._published(self._run(_resolution(self.wanted, self._multi_hint), timeout))
            assert self._resolved is not None
            return self._resolved

    def acquire_blocking(self, request: Acquire, timeout: float) -> Grant:
        resolved = self._ready(timeout)
        return self._run(acquire_flow(request, resolved.backend, resolved.sha, resolved.multi), timeout)

    def refund_blocking(self, request: Refund, timeout: float) -> None:
        self._run(_refund_flow(request, self._ready(timeout)), timeout)

    def call(self, *args: object, timeout: float | None = None) -> RedisReply:
        """Runs a module command (``RL.PEEK key ...``) on the backend in use (``timeout``:
        ``None`` waits as long as the client's socket timeout)."""
        return self._run(_call_flow([str(arg) for arg in args], self._ready(timeout)), timeout)

    def _all(self, commands: Sequence[Command], timeout: float) -> list[Reply]:
        """``commands`` in one write on one of its connections (on a Cluster, one after
        another to their key's node); each sent once."""
        if self._connections is None:
            return [self._cluster_command(command) for command in commands]
        return self._connections.pipeline([command.args for command in commands], timeout)

    def write_hashes_blocking(self, hashes: Sequence[HashWrite], timeout: float) -> None:
        """The top-keys reports (:class:`~redis_ratelimit_client.store_api.SyncHashStore`)."""
        if hashes:
            _written(self._all(_hash_commands(hashes), timeout))

    def read_hashes_blocking(self, keys: Sequence[str], timeout: float) -> list[HashFields]:
        replies = self._all([Command(("HGETALL", key), key=key) for key in keys], timeout)
        return [_hash_fields(reply) for reply in replies]


class MemoryStore:
    """An in-process store on the core's algorithms and this process's clock, for tests and
    single-process services. ``down`` makes every call fail as unreachable; ``cluster``
    reports hash slots so limits in different slots are called separately. ``clock``: a
    :class:`~redis_ratelimit_client.clock.Clock` (a ``FakeClock`` shared with the limiter in
    tests), or a function giving Unix µs."""

    backend: BackendName = "memory"

    def __init__(
        self, *, multi: bool = True, cluster: bool = False, clock: Clock | Callable[[], int] | None = None
    ) -> None:
        self.limits = LocalLimits(strict=True)
        #: Unix µs of the decisions (default: this process's clock).
        self.clock: Callable[[], int] = (
            clock if callable(clock) else LimiterClock(SYSTEM_CLOCK if clock is None else clock).unix_us
        )
        self._multi = multi
        self.cluster = cluster
        self.down = False
        self.delay = 0.0
        self.offset_us = 0
        self.calls = 0
        self._lock = threading.Lock()
        #: Hashes (the top-keys reports): fields, and the expiry in Unix ms on its clock.
        self._hashes: dict[str, tuple[dict[str, str], int]] = {}

    def capabilities(self) -> Capabilities:
        return BOTH if self._multi else NEITHER

    def slot(self, key: str) -> int | None:
        return key_slot(key) if self.cluster else None

    def _acquire(self, request: Acquire) -> Grant:
        self.calls += 1
        if self.down:
            raise StoreError("unavailable", "the memory store is down")
        quotas = []
        for call in request.calls:
            if call.algorithm.in_flight and request.holder is None:
                raise StoreError("config", "an in-flight limit needs a holder id")
            quotas.append(call.algorithm.shape().call_quota(max_wait_ms=call.max_wait_ms, holder=request.holder))
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
            quota = call.algorithm.shape().call_quota(holder=request.holder or "-")
            keys.append(call.key)
            quotas.append(quota.with_cost(request.units * call.weight))
        with self._lock:
            self.limits.refund(keys, quotas, self.clock() + self.offset_us)

    async def acquire(self, request: Acquire, timeout: float | None = None) -> Grant:
        """``timeout`` is not used: nothing here can fall silent (``delay`` is a slow store
        that answers, ``down`` one out of reach)."""
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._acquire(request)

    async def refund(self, request: Refund, timeout: float | None = None) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self._refund(request)

    async def connect(self, timeout: float = 1.0) -> str:
        return self.backend

    def connect_blocking(self, timeout: float = 1.0) -> str:
        return self.backend

    def acquire_blocking(self, request: Acquire, timeout: float | None = None) -> Grant:
        if self.delay:
            time.sleep(self.delay)
        return self._acquire(request)

    def refund_blocking(self, request: Refund, timeout: float | None = None) -> None:
        if self.delay:
            time.sleep(self.delay)
        self._refund(request)

    def _hashes_now_ms(self) -> int:
        """Now in ms for the hashes' expiries, unless the store is down (a hash call is not
        counted in ``calls``, which counts the limits' calls)."""
        if self.down:
            raise StoreError("unavailable", "the memory store is down")
        return (self.clock() + self.offset_us) // 1_000

    def write_hashes_blocking(self, hashes: Sequence[HashWrite], timeout: float | None = None) -> None:
        now_ms = self._hashes_now_ms()
        with self._lock:
            # Expired hashes go as Redis would drop them: every write looks.
            self._hashes = {key: kept for key, kept in self._hashes.items() if kept[1] > now_ms}
            for written in hashes:
                fields, _ = self._hashes.get(written.key, ({}, 0))
                fields.update(written.fields)
                self._hashes[written.key] = (fields, written.expire_at_ms)

    def read_hashes_blocking(self, keys: Sequence[str], timeout: float | None = None) -> list[HashFields]:
        now_ms = self._hashes_now_ms()
        with self._lock:
            found = [self._hashes.get(key) for key in keys]
        return [[] if kept is None or kept[1] <= now_ms else sorted(kept[0].items()) for kept in found]

    async def write_hashes(self, hashes: Sequence[HashWrite], timeout: float | None = None) -> None:
        self.write_hashes_blocking(hashes, timeout)

    async def read_hashes(self, keys: Sequence[str], timeout: float | None = None) -> list[HashFields]:
        return self.read_hashes_blocking(keys, timeout)
