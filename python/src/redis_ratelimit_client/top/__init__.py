"""Who is throttled, fleet-wide: the most denied keys of each policy and limit, counted in
every replica of every service in every client language, merged in Redis, with a stated
bound on every count (``docs/operating.md``, "Top denied keys"; the Rust client's ``top``).

Each replica counts every denial (decided by the store, the deny cache, a lease or the
fallback) under its policy, its binding limit and that limit's rendered key, in a
Space-Saving summary (:mod:`.summary`) of at most ``capacity`` keys per policy and limit and
per minute: in memory, nothing on the admitted path, nothing per key in Prometheus. Once a
``report_every`` (a second) the summaries that changed are written whole in one pipelined
write into the minute's Redis hash (:mod:`.report`: the format every client language writes,
``client: "python"``), which expires ``retention`` after the minute ends. Any reader merges
every replica's summaries of the minutes asked (:mod:`.merge`):
``RateLimiter.top_denied``, ``rlctl top``, the service's ``GET /v1/top``.

```python
limiter = RateLimiter(redis, [policy], top_keys=TopKeys())
...
for top in await limiter.top_denied("api"):
    print(top.limit, top.bound, [(key.key, key.lower, key.count) for key in top.keys])
```
"""

from .merge import CONCENTRATION_KEYS, TopDenied, TopKey
from .options import MAX_QUERY_COUNT, MAX_QUERY_MINUTES, TopError, TopKeys, TopQuery
from .report import Report, ReportError

__all__ = [
    "CONCENTRATION_KEYS",
    "MAX_QUERY_COUNT",
    "MAX_QUERY_MINUTES",
    "Report",
    "ReportError",
    "TopDenied",
    "TopError",
    "TopKey",
    "TopKeys",
    "TopQuery",
]
