"""Sends the limiter's keyed commands (charges, refunds, releases, lease claims, settles) to
Redis exactly once.

redis-py retries a command whose connection failed (8.x by default: 10 times, on a new
connection, ``TimeoutError`` included), so a command Redis ran whose reply was lost (a cut
connection, a server stopped past ``socket_timeout``) would run again: a refund given twice,
a check charged twice. The user's client keeps its retry for the user's own commands; the
limiter sends its keyed commands on a path without it:

- ``redis.Redis`` and ``redis.asyncio.Redis`` (also a Sentinel primary): a connection taken
  from the client's own pool, the command written and its reply read once (what one attempt
  of redis-py's ``execute_command`` does), the connection dropped on any error but an error
  reply (a reply may still be on its way).
- ``RedisCluster`` (sync and asyncio): the command sent with ``target_nodes`` set to the
  key's node, which redis-py never retries (its node clients have no retry either); a
  ``MOVED`` or ``ASK`` redirection is followed, as the node did not run the command.

A lost reply raises the connection's error: the outcome is unknown, and the limiter answers
the check with the policy's fallback. Commands without a key (probes, loading the library)
go through the client as they are: they change nothing or the same thing twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any


def is_cluster(client: Any) -> bool:
    return type(client).__name__ == "RedisCluster"


def _pool_arguments(pool: Any) -> tuple[str, ...]:
    """redis-py before 5.3 needs a command name to give a connection; later ones warn."""
    try:
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        return ()
    if parameter is not None and parameter.default is inspect.Parameter.empty:
        return ("_",)
    return ()


def _is_error_reply(error: BaseException) -> bool:
    """An error reply (``ResponseError``): the reply was read whole, the connection is fine."""
    return any(cls.__name__ == "ResponseError" for cls in type(error).__mro__)


def send(client: Any, args: Sequence[str], key: str) -> Any:
    """Sends ``args`` (about ``key``) once on a sync client; returns the parsed reply."""
    if is_cluster(client):
        return client.execute_command(*args, target_nodes=client.get_node_from_key(key))
    pool = client.connection_pool
    connection = pool.get_connection(*_pool_arguments(pool))
    try:
        connection.send_command(*args)
        return client.parse_response(connection, args[0])
    except BaseException as error:
        if not _is_error_reply(error):
            connection.disconnect()
        raise
    finally:
        pool.release(connection)


async def send_async(client: Any, args: Sequence[str], key: str) -> Any:
    """Sends ``args`` (about ``key``) once on an asyncio client; returns the parsed reply."""
    if is_cluster(client):
        return await client.execute_command(*args, target_nodes=client.get_node_from_key(key))
    replies = await send_batch_async(client, [args])
    reply = replies[0]
    if isinstance(reply, BaseException):
        raise reply
    return reply


async def send_batch_async(client: Any, batch: Sequence[Sequence[str]]) -> list[Any]:
    """Sends ``batch`` once as one pipeline on an asyncio ``Redis`` (no transaction): each
    command's reply, or its error reply as an exception object. A connection error raises."""
    pool = client.connection_pool
    connection = await pool.get_connection(*_pool_arguments(pool))
    try:
        # Packed one by one: a command that cannot be encoded fails alone, not the batch.
        replies: list[Any] = [None] * len(batch)
        packed: list[bytes] = []
        sent: list[int] = []
        for index, args in enumerate(batch):
            try:
                packed.extend(connection.pack_command(*args))
            except Exception as error:  # an argument that is not text (DataError, UnicodeEncodeError)
                replies[index] = error
                continue
            sent.append(index)
        if sent:
            await connection.send_packed_command(packed)
        for index in sent:
            try:
                replies[index] = await client.parse_response(connection, batch[index][0])
            except Exception as error:
                if not _is_error_reply(error):
                    raise
                replies[index] = error
        return replies
    except BaseException:
        # Cut, or cancelled by the check's timeout: a reply may still arrive on this socket.
        await connection.disconnect(nowait=True)
        raise
    finally:
        await pool.release(connection)
