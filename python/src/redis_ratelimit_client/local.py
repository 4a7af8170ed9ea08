"""Limits decided in process (the Rust client's ``local.rs``): the engine over a map of keys
with Redis's expiry semantics. It runs the local fallback and the in-memory store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._kinds import Kind
from .core import KINDS, MISSING, AnyQuota, Held, Verdict, acquire_many
from .core import refund as core_refund
from .core.decision import Commit, Evaluation
from .tables import KeyTable

#: Operations between two passes that drop expired states (each pass O(log n) a state due).
_PRUNE_EVERY = 1024


@dataclass(slots=True)
class _Stored:
    kind: Kind
    #: A state of ``kind``'s quota.
    state: object
    expires_at_ms: int


class LocalLimits:
    """Limiter states by key. ``strict`` refuses a key holding another kind (as the server
    does); otherwise such a state counts as missing and is replaced (the fallback's rule).

    Expired states are dropped every 1,024 operations. ``max_keys`` bounds the keys held (the
    fallback's; ``None`` for the in-memory store, which is a store, not a cache): past it,
    expired states go first, then the one written longest ago (that key starts over from a
    fresh share)."""

    def __init__(self, *, strict: bool = False, max_keys: int | None = None) -> None:
        self._states: KeyTable[_Stored] = KeyTable(max_keys)
        self._strict = strict
        self._operations = 0

    def _live(self, key: str, now_us: int) -> _Stored | None:
        stored = self._states.get(key)
        if stored is None or stored.expires_at_ms <= now_us // 1000:
            return None
        return stored

    def held(self, keys: Sequence[str], quotas: Sequence[AnyQuota], now_us: int) -> list[Held]:
        held = []
        for key, quota in zip(keys, quotas, strict=True):
            stored = self._live(key, now_us)
            if stored is None or (not self._strict and stored.kind != quota.kind):
                held.append(MISSING)
            else:
                held.append(Held(stored.kind, stored.state))
        return held

    def acquire(
        self,
        keys: Sequence[str],
        quotas: Sequence[AnyQuota],
        weights: Sequence[int],
        units: int,
        partial_min: int | None,
        now_us: int,
    ) -> Verdict:
        """``RL.MULTI`` in process: ``quotas`` each for one unit, ``units × weight`` each."""
        self._operations += 1
        if self._operations % _PRUNE_EVERY == 0:
            self._states.expire(now_us // 1000)
        held = self.held(keys, quotas, now_us)
        weights = [max(weight, 1) for weight in weights]
        verdict = acquire_many(held, quotas, weights, max(units, 1), partial_min, now_us)
        for key, quota, commit in zip(keys, quotas, verdict.commits, strict=True):
            if commit is not None:
                self._commit(key, quota.kind, commit, now_us)
        return verdict

    def refund(self, keys: Sequence[str], quotas: Sequence[AnyQuota], now_us: int) -> list[Evaluation[object]]:
        """Gives each quota's cost back to its key (an in-flight limit frees its holder)."""
        held = self.held(keys, quotas, now_us)
        evaluations = [core_refund(state, quota, now_us) for state, quota in zip(held, quotas, strict=True)]
        for key, quota, evaluation in zip(keys, quotas, evaluations, strict=True):
            if evaluation.commit is not None:
                self._commit(key, quota.kind, evaluation.commit, now_us)
        return evaluations

    def seed(self, key: str, unit: AnyQuota, quota_units: int, remaining: int, at_us: int) -> None:
        """Starts ``key`` over as a fresh limiter charged all but ``remaining`` at ``at_us``."""
        self._states.pop(key)
        used = max(quota_units - remaining, 0)
        if used:
            self.acquire([key], [unit], [1], used, 1, at_us)

    def _commit(self, key: str, kind: Kind, commit: Commit[object], now_us: int) -> None:
        stored = self._live(key, now_us)
        algorithm = KINDS[kind]
        if stored is None or stored.kind != kind:
            stored = _Stored(kind, algorithm.create(commit.change), commit.expires_at_ms)
        else:
            stored.state = algorithm.apply(stored.state, commit.change)
            stored.expires_at_ms = commit.expires_at_ms
            if algorithm.is_vacant(stored.state):
                self._states.pop(key)
                return
        self._states.put(key, stored, stored.expires_at_ms, now_us // 1000)

    def __len__(self) -> int:
        return len(self._states)

    def state(self, key: str) -> tuple[Kind, object, int] | None:
        """The stored (kind, state, expiry) of ``key``, expired or not (for tests)."""
        stored = self._states.get(key)
        return None if stored is None else (stored.kind, stored.state, stored.expires_at_ms)
