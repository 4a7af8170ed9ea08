"""What this package holds of redis-py, named once: its clients, their connection pools and
connections, pub/sub, client options and replies handed back to a caller. They are ``Any``
here, and the package writes ``Any`` nowhere else but for the core's quota of any kind
(``core.quota.AnyQuota``): redis-py's calls the stores make are untyped (``execute_command(*args, **options)``) or typed
differently across the versions this package supports (5.0 and later: ``get_connection``
took a command name, then warned about one), so a precise type would be a guess. Replies
are ``object`` everywhere and read by checking what they are (:mod:`.protocol`)."""

from __future__ import annotations

from typing import Any, TypeAlias

#: A ``redis.asyncio.Redis`` (also a Sentinel's ``master_for``) or
#: ``redis.asyncio.RedisCluster``.
AsyncClient: TypeAlias = Any
#: A ``redis.Redis`` (also a Sentinel's ``master_for``) or ``redis.cluster.RedisCluster``.
SyncClient: TypeAlias = Any
#: A client's connection pool (``client.connection_pool``), async or sync.
Pool: TypeAlias = Any
#: One connection of a pool, async or sync.
Connection: TypeAlias = Any
#: A client's ``pubsub()``, async or sync.
PubSub: TypeAlias = Any
#: Keyword arguments for a redis-py client (``Redis.from_url(url, **options)``).
ClientOptions: TypeAlias = dict[str, Any]
#: A reply as redis-py reads it, handed to a caller who sent the command and knows its
#: shape (``RedisStore.call``); the package's own flows take replies as ``object``.
RedisReply: TypeAlias = Any
