"""A replica's side of the fleet's top denied keys (the Rust client's ``top/recorder.rs``):
every denial counted in a Space-Saving summary per policy and limit and per minute (in
memory, nothing sent), and once a report period the summaries that changed written whole, in
one pipelined write, into the minute's hash (:mod:`.report`'s format). Safe from several
threads: one lock, taken by a denial (never by an admitted check) and by a report."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

from ..store_api import HashWrite
from .options import TopKeys
from .report import BUCKET_SECONDS, CLIENT, Report, bucket_of, field_of, key
from .summary import SpaceSaving


@dataclass(slots=True)
class _Local:
    """One policy and limit's summary of the current minute."""

    #: The minute it counts (its start, Unix seconds).
    bucket: int
    summary: SpaceSaving
    #: Counted since it was last written.
    changed: bool = False


class Recorder:
    """The replica's summaries, and who it is."""

    def __init__(self, options: TopKeys, replica: str | None = None) -> None:
        self.options = options
        #: This replica's id in the fields it writes: 32 hex digits, random.
        self.replica = secrets.token_hex(16) if replica is None else replica
        self._summaries: dict[tuple[str, str], _Local] = {}
        self._lock = threading.Lock()
        #: Denials not counted: their policy and limit came past ``max_summaries``.
        self.dropped = 0

    def denied(self, policy: str, limit: str, key: str, now_unix_s: int) -> None:
        """Counts a denial of ``key`` under ``policy``'s ``limit`` at ``now_unix_s``."""
        pair = (policy, limit)
        with self._lock:
            local = self._summaries.get(pair)
            if local is None:
                if len(self._summaries) >= self.options.max_summaries:
                    self.dropped += 1
                    return
                local = self._summaries[pair] = _Local(bucket_of(now_unix_s), SpaceSaving(self.options.capacity))
            local.summary.add(key)
            local.changed = True

    def report(self, now_unix_s: int) -> list[HashWrite]:
        """The writes of one report at ``now_unix_s``: every summary that changed since the
        last, whole, in its minute's hash (each hash expiring ``retention`` after its minute
        ends). A summary of a minute now over is written a last time and starts the new
        minute empty (and is forgotten if nothing comes)."""
        bucket = bucket_of(now_unix_s)
        fields: dict[int, list[tuple[str, str]]] = {}
        with self._lock:
            turned = False
            for (policy, limit), local in self._summaries.items():
                if local.changed:
                    value = self._encode(policy, limit, local.summary)
                    fields.setdefault(local.bucket, []).append((field_of(self.replica, policy, limit), value))
                    local.changed = False
                if local.bucket != bucket:
                    local.bucket = bucket
                    local.summary = SpaceSaving(self.options.capacity)
                    turned = True
            if turned:
                kept = self._summaries.items()
                self._summaries = {pair: local for pair, local in kept if not local.summary.is_empty()}
        retention_s = int(self.options.retention)
        return [
            HashWrite(key(minute), tuple(written), (minute + BUCKET_SECONDS + retention_s) * 1_000)
            for minute, written in sorted(fields.items())
        ]

    def unwritten(self) -> None:
        """A report failed: every summary is written again at the next (whole, so twice is
        harmless; a minute over whose last write failed is lost)."""
        with self._lock:
            for local in self._summaries.values():
                if not local.summary.is_empty():
                    local.changed = True

    def _encode(self, policy: str, limit: str, summary: SpaceSaving) -> str:
        return Report(
            policy=policy,
            limit=limit,
            replica=self.replica,
            client=CLIENT,
            capacity=summary.capacity,
            denials=summary.total,
            floor=summary.floor(),
            keys=tuple((counted.key, counted.count, counted.error) for counted in summary.counted()),
        ).encode()
