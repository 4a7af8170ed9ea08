"""What the store answers about one call, as every backend replies it: each limit's
:class:`View` (the module's five reply fields) and the backend that answered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

#: The backend a store resolved to and answers with (``memory``: the in-process store).
BackendName: TypeAlias = Literal["module", "functions", "scripts", "memory"]


@dataclass(frozen=True, slots=True)
class View:
    """One limit's view after a call, as the module replies it (``retry_after_ms`` ``None``:
    never, the cost exceeds the limit)."""

    allowed: bool
    remaining: int
    retry_after_ms: int | None
    reset_after_ms: int
    limit: int

    @staticmethod
    def from_fields(fields: Sequence[int]) -> View:
        """From ``[allowed, remaining, retry_after_ms, reset_after_ms, limit]``."""
        allowed, remaining, retry, reset, limit = fields
        return View(allowed != 0, max(remaining, 0), None if retry < 0 else retry, max(reset, 0), max(limit, 0))
