"""redis-ratelimit for Python: one exact rate limit for every replica of a service, decided in
Redis by the redis-ratelimit module or its Functions library, with leases, a bounded local
fallback, a circuit breaker, the IETF ``RateLimit`` header fields and metrics.

```python
from redis.asyncio import Redis
from redis_ratelimit_client import Limit, Policy, RateLimiter

limiter = RateLimiter(Redis(), [Policy("api", [Limit.token_bucket("per-key", 100, refill=60, key="rl:{{{key}}}")])])
decision = await limiter.check("api", key="alice")
```
"""

from ._kinds import Kind
from .algorithms import Algorithm, AlgorithmError, Rate
from .clock import Clock, FakeClock
from .config import ConfigError, from_file, from_toml
from .decision import Decision, InFlight, LimitStatus
from .errors import CheckError
from .limiter import RateLimiter, Reservation, SyncRateLimiter, SyncReservation
from .metrics import Metrics, PrometheusMetrics
from .policy import DEFAULT_TIMEOUT, Fallback, Lease, Limit, Policy, PolicyError
from .protocol import Backend, StoreError
from .replies import View
from .store import MemoryStore, RedisStore, SyncRedisStore
from .store_api import Store, SyncStore
from .top import TopDenied, TopError, TopKey, TopKeys, TopQuery

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TIMEOUT",
    "Algorithm",
    "AlgorithmError",
    "Backend",
    "CheckError",
    "Clock",
    "ConfigError",
    "Decision",
    "FakeClock",
    "Fallback",
    "InFlight",
    "Kind",
    "Lease",
    "Limit",
    "LimitStatus",
    "MemoryStore",
    "Metrics",
    "Policy",
    "PolicyError",
    "PrometheusMetrics",
    "Rate",
    "RateLimiter",
    "RedisStore",
    "Reservation",
    "Store",
    "StoreError",
    "SyncRateLimiter",
    "SyncRedisStore",
    "SyncReservation",
    "SyncStore",
    "TopDenied",
    "TopError",
    "TopKey",
    "TopKeys",
    "TopQuery",
    "View",
    "__version__",
    "from_file",
    "from_toml",
]
