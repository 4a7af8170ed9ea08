"""Behind Redis Sentinel: the limiters take the primary a Sentinel names (redis-py's
``Sentinel.master_for``, which asks the sentinels again after a failure) and decide there."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

import redis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import Sentinel

from polling import wait_for
from redis_ratelimit_client import Limit, Policy, RateLimiter, SyncRateLimiter
from servers import SERVER, Server, free_port

POLICY = Policy("api", [Limit.token_bucket("per-key", 3, refill=60, key="s:{key}")], timeout=1)


def test_the_primary_a_sentinel_names(module_server: Server) -> None:
    directory = Path(tempfile.mkdtemp(prefix="rl-py-sentinel-"))
    port = free_port()
    config = directory / "sentinel.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
        f"sentinel monitor primary 127.0.0.1 {module_server.port} 1\n"
        "sentinel down-after-milliseconds primary 1000\n"
    )
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    process = subprocess.Popen([SERVER, str(config), "--sentinel"], **quiet)  # type: ignore[call-overload]
    try:

        def answers() -> bool:
            try:
                return bool(redis.Redis(port=port).ping())
            except redis.RedisError:
                return False

        wait_for(answers, "the sentinel to answer")
        sync = SyncRateLimiter(Sentinel([("127.0.0.1", port)]).master_for("primary"), [POLICY])
        assert [sync.check("api", key="a").allowed for _ in range(4)] == [True, True, True, False]
        assert sync.backend == "module"
        sync.close()

        async def asynchronous() -> list[bool]:
            limiter = RateLimiter(AsyncSentinel([("127.0.0.1", port)]).master_for("primary"), [POLICY])
            return [(await limiter.check("api", key="b")).allowed for _ in range(4)]

        assert asyncio.run(asynchronous()) == [True, True, True, False]
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)
