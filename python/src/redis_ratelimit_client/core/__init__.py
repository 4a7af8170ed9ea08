"""A port of the Rust core (``redis-ratelimit-core``): the algorithms as pure functions of
(state, parameters, now), integer arithmetic with the Rust core's rounding and saturation.

It decides the local fallback and the in-memory store. The golden vectors written by the Rust
core (``core/examples/golden.rs``) are replayed by the tests with zero differences.
"""

from .concurrency import Concurrency, ConcurrencyChange, ConcurrencyParams
from .decision import NEVER, NOW, Commit, Decision, Evaluation
from .engine import MISSING, Held, KindMismatch, Verdict, acquire_many, bind, refund
from .gcra import CellOutcome, Gcra, GcraParams, cell_reply, emission_interval_ns
from .numbers import Decimal, NumberError, NumberParseError
from .quota import AnyQuota, Quota
from .sliding_log import SlidingLog, SlidingLogChange, SlidingLogParams
from .token_bucket import TokenBucket, TokenBucketParams
from .windows import FixedWindow, FixedWindowParams, SlidingWindow, SlidingWindowParams

#: Each kind's quota class, by kind (its ``kind``: the generated ``_kinds.py``'s ``Kind``,
#: which looks up by short name too); the tests check that every kind of the table has one.
KINDS: dict[str, type[AnyQuota]] = {
    quota.kind: quota
    for quota in (
        TokenBucketParams,
        FixedWindowParams,
        SlidingWindowParams,
        SlidingLogParams,
        GcraParams,
        ConcurrencyParams,
    )
}

__all__ = [
    "KINDS",
    "MISSING",
    "AnyQuota",
    "NEVER",
    "NOW",
    "CellOutcome",
    "Commit",
    "Concurrency",
    "ConcurrencyChange",
    "ConcurrencyParams",
    "Decimal",
    "Decision",
    "Evaluation",
    "FixedWindow",
    "FixedWindowParams",
    "Gcra",
    "GcraParams",
    "Held",
    "KindMismatch",
    "NumberError",
    "NumberParseError",
    "Quota",
    "SlidingLog",
    "SlidingLogChange",
    "SlidingLogParams",
    "SlidingWindow",
    "SlidingWindowParams",
    "TokenBucket",
    "TokenBucketParams",
    "Verdict",
    "acquire_many",
    "bind",
    "cell_reply",
    "emission_interval_ns",
    "refund",
]
