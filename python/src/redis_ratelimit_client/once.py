"""Sends the limiter's keyed commands (charges, refunds, releases, lease claims, settles) to
Redis exactly once.

redis-py retries a command whose connection failed (8.x by default: 10 times, on a new
connection, ``TimeoutError`` included), so a command Redis ran whose reply was lost (a cut
connection, a server stopped past ``socket_timeout``) would run again: a refund given twice,
a check charged twice. The user's client keeps its retry for the user's own commands; the
limiter sends its keyed commands on paths without it:

- ``redis.Redis`` and ``redis.asyncio.Redis`` (also a Sentinel primary): the stores' own
  connections, taken from the client's pool (``store._Multiplexer`` for asyncio,
  :mod:`.sync_connections` for sync), each command written once and its reply read once.
- ``RedisCluster`` (sync and asyncio), here: the command sent with ``target_nodes`` set to the
  key's node, which redis-py never retries (its node clients have no retry either); a
  ``MOVED`` or ``ASK`` redirection is followed, as the node did not run the command.

A lost reply raises the connection's error: the outcome is unknown, and the limiter answers
the check with the policy's fallback. Commands without a key (probes, loading the library)
go through the client as they are: they change nothing or the same thing twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from .redis_boundary import AsyncClient, SyncClient


def is_cluster(client: AsyncClient | SyncClient) -> bool:
    return type(client).__name__ == "RedisCluster"


def send_cluster(client: SyncClient, args: Sequence[str], key: str) -> object:
    """Sends ``args`` (about ``key``) once on a sync ``RedisCluster``; returns the parsed reply."""
    reply: object = client.execute_command(*args, target_nodes=client.get_node_from_key(key))
    return reply


async def send_cluster_async(client: AsyncClient, args: Sequence[str], key: str) -> object:
    """Sends ``args`` (about ``key``) once on an asyncio ``RedisCluster``; returns the parsed reply."""
    reply: object = await client.execute_command(*args, target_nodes=client.get_node_from_key(key))
    return reply
