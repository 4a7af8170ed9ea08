"""The bounds on the metrics' labels (``docs/operating.md``, "Cardinality"), as the Rust
client's ``metrics.rs`` keeps them: per policy, at most :data:`MAX_LIMIT_LABELS` ``limit``
values and :data:`MAX_CLASS_LABELS` ``key_class`` values, every later one labelled
:data:`OTHER`. Pure: no exporter here."""

from __future__ import annotations

import threading

#: The ``limit`` label of a decision no limit was consulted for (a blanket fallback).
NO_LIMIT = "_none"
#: The ``limit`` or ``key_class`` label of every value past a policy's bound.
OTHER = "_other"
#: Distinct ``limit`` labels per policy.
MAX_LIMIT_LABELS = 256
#: Distinct ``key_class`` labels per policy (plans, and the classes policies name).
MAX_CLASS_LABELS = 64
#: The default near-limit share: a limit left with less than 20 % of its quota (the
#: reference's ``NEAR_LIMIT_RATIO`` of 0.8 seen from the other side).
DEFAULT_NEAR_LIMIT_SHARE = 0.2


def near(remaining: int, quota: int, share: float) -> bool:
    """Whether a limit with ``remaining`` of ``quota`` units left is under ``share`` of it."""
    return quota > 0 and remaining < share * quota


def near_limit_share(share: float) -> float:
    """``share`` as a near-limit share: a number from 0 to 1, refused otherwise."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise ValueError(f"near_limit_share: the share of a quota left, a number from 0 to 1 (got {share!r})")
    return float(share)


class Given:
    """The values of one label given out for one policy: at most ``most``, then
    :data:`OTHER`. Safe from several threads (a value is given out under a lock)."""

    __slots__ = ("_given", "_lock", "_most")

    def __init__(self, most: int) -> None:
        self._given: set[str] = set()
        self._most = most
        self._lock = threading.Lock()

    def label(self, value: str) -> str:
        """``value`` as a label: itself once given out, :data:`OTHER` past the bound."""
        if value in self._given:
            return value
        with self._lock:
            if value in self._given:
                return value
            if len(self._given) >= self._most:
                return OTHER
            self._given.add(value)
            return value

    def __len__(self) -> int:
        return len(self._given)


class PolicyLabels:
    """One policy's bounded ``limit`` and ``key_class`` labels."""

    __slots__ = ("classes", "limits")

    def __init__(self) -> None:
        self.limits = Given(MAX_LIMIT_LABELS)
        self.classes = Given(MAX_CLASS_LABELS)

    def of(self, limit: str, key_class: str) -> tuple[str, str]:
        """The labels of ``limit`` and ``key_class`` (``limit`` :data:`NO_LIMIT` is never
        counted against the bound: every policy may have it)."""
        limit_label = limit if limit == NO_LIMIT else self.limits.label(limit)
        return limit_label, self.classes.label(key_class)
