"""The caller's errors, raised by every part of a check (the limiter, its flows)."""

from __future__ import annotations


class CheckError(ValueError):
    """A check that cannot be made: a mistake of the caller (an unknown policy, a missing
    input, a key that is not text, a cost out of range, arguments the store refuses as
    invalid), never of the store: the adapters answer it 500, never with the fallback."""
