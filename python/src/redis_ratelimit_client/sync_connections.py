"""The sync store's connections: its own, made like the client's pool makes them (same class
and settings: server, TLS, credentials, Sentinel), at most ``size`` at once; each call on the
calling thread, timed by the rule of :mod:`redis_ratelimit_client.timing`.

A call whose reply did not come in time leaves its connection *owing* that reply: the next call
on it reads and drops the replies owed before its own (commands on a connection are answered in
order), so a paused Redis costs no reconnection; a connection owing for the hard bound is
closed. A connection is opened on the calling thread with the socket's own timeouts (the
kernel's clock, not the thread's) at most the call's timeout, and without redis-py's retries
(a command is never sent twice: issue 36).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Sequence

from redis.backoff import NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry

from .protocol import Reply, StoreError
from .redis_boundary import Connection, Pool
from .timing import HARD_BOUND_TIMEOUTS


class _Held:
    __slots__ = ("connection", "owed", "owing_since")

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.owed = 0
        self.owing_since: float | None = None


class SyncConnections:
    def __init__(self, pool: Pool, size: int) -> None:
        self._pool = pool
        self._size = max(size, 1)
        self._free: list[_Held] = []
        self._count = 0
        self._changed = threading.Condition()
        #: When a call last read a reply (monotonic seconds).
        self.read_at = 0.0

    def call(self, args: tuple[str, ...], timeout: float | None) -> Reply:
        """The command's reply, or the exception it raised (an error reply, the connection's,
        or ``StoreError("timeout")``); ``timeout`` ``None``: as long as the client's own socket
        timeout lets it."""
        hard = math.inf if timeout is None else time.monotonic() + HARD_BOUND_TIMEOUTS * timeout
        taken = self._take(timeout, hard)
        if isinstance(taken, BaseException):
            return taken
        held: _Held | None = taken
        connection = taken.connection
        try:
            packed = connection.pack_command(*args)
        except Exception as error:  # the caller's input (a key that cannot be encoded)
            self._give_back(taken, timeout)
            return error
        try:
            # No health check: its PING's reply would come after the replies owed.
            connection.send_packed_command(packed, check_health=False)
            sent = time.monotonic()
            while taken.owed:  # replies to calls that gave up on this connection: dropped
                if not self._replied(connection, sent, timeout):
                    return self._gave_up(taken, sent)
                with contextlib.suppress(ResponseError):  # an error reply, dropped as well
                    connection.read_response()
                taken.owed -= 1
                self.read_at = time.monotonic()
            if not self._replied(connection, sent, timeout):
                return self._gave_up(taken, sent)
            reply: Reply
            try:
                reply = connection.read_response()
            except ResponseError as error:  # an error reply: the flow sorts it
                reply = error
            self.read_at = time.monotonic()
            taken.owing_since = None
            return reply
        except Exception as error:  # the connection broke
            self._close(taken)
            held = None
            return error
        finally:
            if held is not None:
                self._give_back(held, timeout)

    def pipeline(self, commands: Sequence[tuple[str, ...]], timeout: float | None) -> list[Reply]:
        """The replies of ``commands``, written together in one write and read in order
        (each its reply, or the exception it raised): a reply that does not come in time
        makes it and every later one ``StoreError("timeout")`` (the connection owes them)."""
        count = len(commands)
        if count == 0:
            return []
        hard = math.inf if timeout is None else time.monotonic() + HARD_BOUND_TIMEOUTS * timeout
        taken = self._take(timeout, hard)
        if isinstance(taken, BaseException):
            return [taken] * count
        held: _Held | None = taken
        connection = taken.connection
        replies: list[Reply] = []
        try:
            packed = connection.pack_commands(list(commands))
        except Exception as error:  # the caller's input (a key that cannot be encoded)
            self._give_back(taken, timeout)
            return [error] * count
        try:
            connection.send_packed_command(packed, check_health=False)
            sent = time.monotonic()
            while taken.owed:  # replies to calls that gave up on this connection: dropped
                if not self._replied(connection, sent, timeout):
                    return [self._gave_up(taken, sent, count)] * count
                with contextlib.suppress(ResponseError):
                    connection.read_response()
                taken.owed -= 1
                self.read_at = time.monotonic()
            for index in range(count):
                if not self._replied(connection, sent, timeout):
                    return replies + [self._gave_up(taken, sent, count - index)] * (count - index)
                reply: Reply
                try:
                    reply = connection.read_response()
                except ResponseError as error:  # an error reply: the caller sorts it
                    reply = error
                self.read_at = time.monotonic()
                replies.append(reply)
            taken.owing_since = None
            return replies
        except Exception as error:  # the connection broke
            self._close(taken)
            held = None
            return replies + [error] * (count - len(replies))
        finally:
            if held is not None:
                self._give_back(held, timeout)

    def _gave_up(self, held: _Held, sent: float, replies: int = 1) -> StoreError:
        held.owed += replies
        if held.owing_since is None:
            held.owing_since = sent
        return StoreError("timeout")

    def _replied(self, connection: Connection, sent: float, timeout: float | None) -> bool:
        """Waits (``poll``: the kernel's clock) for a reply to start arriving on a connection
        whose command was sent at ``sent``: it has timed out when nothing came for a whole
        timeout, no other call read a reply in that time (the server answers: this reply is
        queued behind others), and this thread was not kept from running itself (a poll that
        returns half a timeout late: the whole machine stalled). Up to the hard bound."""
        if timeout is None:
            return True
        hard = sent + HARD_BOUND_TIMEOUTS * timeout
        while True:
            due = time.monotonic() + timeout
            if connection.can_read(timeout):
                return True
            now = time.monotonic()
            if now >= hard:
                return False
            if now - max(self.read_at, sent) >= timeout and now - due < timeout / 2:
                return False

    def _take(self, timeout: float | None, hard: float) -> _Held | BaseException:
        with self._changed:
            while not self._free and self._count >= self._size:
                left = hard - time.monotonic()
                if left <= 0:
                    return StoreError("timeout")
                self._changed.wait(None if left == math.inf else left)
            if self._free:
                # The least owing first: a connection owing replies answers only after them.
                self._free.sort(key=lambda held: held.owed, reverse=True)
                return self._free.pop()
            self._count += 1
        try:
            return _Held(self._open(timeout))
        except Exception as error:  # out of reach: the flow sorts it
            self._forget()
            return error

    def _open(self, timeout: float | None) -> Connection:
        settings = dict(self._pool.connection_kwargs)
        if timeout is not None:
            for name in ("socket_timeout", "socket_connect_timeout"):
                settings[name] = min(settings.get(name) or timeout, timeout)
        settings["retry"] = Retry(NoBackoff(), 0)
        connection = self._pool.connection_class(**settings)
        connection.connect()
        return connection

    def _forget(self) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify()

    def _give_back(self, held: _Held, timeout: float | None) -> None:
        owing_for = 0.0 if held.owing_since is None else time.monotonic() - held.owing_since
        if timeout is not None and owing_for >= HARD_BOUND_TIMEOUTS * timeout:
            self._close(held)
            return
        with self._changed:
            self._free.append(held)
            self._changed.notify()

    def _close(self, held: _Held) -> None:
        try:
            held.connection.disconnect()
        finally:
            self._forget()

    def close(self) -> None:
        """Closes every idle connection."""
        with self._changed:
            free, self._free = self._free, []
        for held in free:
            self._close(held)
