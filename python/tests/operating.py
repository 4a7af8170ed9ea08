"""Helpers of the operating tests (metrics, top keys): a registry's samples by name and
labels, a store that can be made unreachable for checks while its hashes stay in Redis, and
a server's calls of one command."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from redis_ratelimit_client import RedisStore, StoreError
from redis_ratelimit_client.protocol import Acquire, Grant, Refund
from redis_ratelimit_client.replies import BackendName
from redis_ratelimit_client.store_api import Capabilities, HashFields, HashWrite
from servers import Server


def samples(registry: CollectorRegistry) -> dict[str, float]:
    """Every sample, ``name{label=value,...}`` (labels in the metric's order) -> its value."""
    found = {}
    for metric in registry.collect():
        for sample in metric.samples:
            labels = ",".join(f"{name}={value}" for name, value in sample.labels.items())
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def command_calls(server: Server, command: str) -> int:
    """The server's calls of ``command`` so far (``INFO commandstats``)."""
    stats = server.client().info("commandstats")
    entry = stats.get(f"cmdstat_{command.lower()}")
    return 0 if entry is None else int(entry["calls"])


class Outage:
    """A Redis store whose checks fail as unreachable while ``down``: its hashes (the top-keys
    reports) still go to Redis, so a fallback's denials can be read back."""

    def __init__(self, store: RedisStore) -> None:
        self.inner = store
        self.down = False

    @property
    def backend(self) -> BackendName | None:
        return self.inner.backend

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def slot(self, key: str) -> int | None:
        return self.inner.slot(key)

    async def connect(self, timeout: float = 1.0) -> str:
        return await self.inner.connect(timeout)

    async def acquire(self, request: Acquire, timeout: float) -> Grant:
        if self.down:
            raise StoreError("unavailable", "cut by the test")
        return await self.inner.acquire(request, timeout)

    async def refund(self, request: Refund, timeout: float) -> None:
        if self.down:
            raise StoreError("unavailable", "cut by the test")
        await self.inner.refund(request, timeout)

    async def write_hashes(self, hashes: Sequence[HashWrite], timeout: float) -> None:
        await self.inner.write_hashes(hashes, timeout)

    async def read_hashes(self, keys: Sequence[str], timeout: float) -> list[HashFields]:
        return await self.inner.read_hashes(keys, timeout)
