"""What every limiter decides (``core/src/decision.rs``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from .numbers import I64_MAX

#: ``Retry::Now``: admitted without waiting.
NOW = 0
#: ``Retry::Never``: no amount of waiting helps (the cost exceeds the limit).
NEVER = -1
# Every other value n >= 1 is ``Retry::AfterMs(n)``.


def wait_rank(retry: int) -> tuple[bool, int]:
    """Orders waits: ``NEVER`` is the longest."""
    return (True, 0) if retry == NEVER else (False, retry)


@dataclass(slots=True)
class Decision:
    """The outcome of one call: the module's five reply fields (``retry``: see ``NOW``)."""

    allowed: bool
    remaining: int
    retry: int
    reset_after_ms: int
    limit: int

    def reply_fields(self) -> list[int]:
        """``[allowed, remaining, retry_after_ms, reset_after_ms, limit]`` as the module replies."""
        return [
            int(self.allowed),
            min(self.remaining, I64_MAX),
            min(self.retry, I64_MAX),
            min(self.reset_after_ms, I64_MAX),
            min(self.limit, I64_MAX),
        ]


C = TypeVar("C")


@dataclass(slots=True)
class Commit(Generic[C]):
    """What to store after an admitted call, and the key's expiry (Unix ms)."""

    change: C
    expires_at_ms: int


@dataclass(slots=True)
class Evaluation(Generic[C]):
    """A decision and the write that records it (``None`` when nothing changes)."""

    decision: Decision
    commit: Commit[C] | None
