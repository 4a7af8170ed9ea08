"""Merging the stored summaries of every replica (and minute) of a policy and limit into the
fleet's top denied keys, with the bound on each count: the Rust client's ``top/merge.rs``
(the same stored values give the same result, ``tests/vectors/top_merge_v1.json``). Pure: no
I/O.

For a key listed by some summary: ``count`` adds its count where listed and the summary's
floor where not (a key not listed was denied at most ``floor`` times there), ``lower`` adds
``count - error`` where listed. The key's true denials are in ``lower ..= count``. The stated
bound is the sum of the summaries' floors (each at most its denials / capacity): no count is
over the truth by more, and a key denied more often than it is listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..core.numbers import U64_MAX
from .report import Report

#: How many keys the concentration counts.
CONCENTRATION_KEYS = 10


@dataclass(frozen=True, slots=True)
class TopKey:
    """One of the most denied keys of a limit across the fleet: its denials are at most
    ``count`` (an over-estimate by at most its limit's ``bound``) and at least ``lower``."""

    key: str
    count: int
    lower: int


@dataclass(frozen=True, slots=True)
class TopDenied:
    """The most denied keys of one policy and limit over a window, across the fleet."""

    policy: str
    limit: str
    #: Every denial counted, by every replica, over the window.
    denials: int
    #: No key's ``count`` is over its true denials by more than this, and a key denied more
    #: often is listed (the sum of the summaries' floors).
    bound: int
    #: The a-priori bound the summaries' sizes give: the sum of each summary's denials over
    #: its capacity (``bound`` never exceeds it).
    bound_limit: int
    #: How many summaries (replicas x minutes) were merged.
    summaries: int
    #: The share of ``denials`` taken by the top :data:`CONCENTRATION_KEYS` keys, counted by
    #: their ``lower`` (so at most the true share): near 1, a few keys are throttled; low while
    #: denials are many, they are spread over many keys.
    top10_share: float
    #: The most denied keys, most first (by ``count``, ties by key).
    keys: tuple[TopKey, ...] = field(default=())


def _sum(values: Iterable[int]) -> int:
    """A sum saturating at ``u64::MAX`` as the Rust merge's (every term is at least 0)."""
    return min(sum(values), U64_MAX)


def merge(reports: Sequence[Report], policy: str, limit: str | None, count: int) -> list[TopDenied]:
    """The fleet's top ``count`` denied keys of each limit of ``policy`` in ``reports`` (of
    ``limit`` only when given), limits in name order."""
    by_limit: dict[str, list[Report]] = {}
    for report in reports:
        if report.policy == policy and (limit is None or report.limit == limit):
            by_limit.setdefault(report.limit, []).append(report)
    return [_merge_limit(policy, name, by_limit[name], count) for name in sorted(by_limit)]


def limits_of(reports: Sequence[Report]) -> list[tuple[str, str]]:
    """The policies and limits ``reports`` hold (each once, in order)."""
    return sorted({(report.policy, report.limit) for report in reports})


def _merge_limit(policy: str, limit: str, reports: Sequence[Report], count: int) -> TopDenied:
    floors = _sum(report.floor for report in reports)
    denials = _sum(report.denials for report in reports)
    bound_limit = _sum(report.denials // report.capacity for report in reports if report.capacity > 0)
    # key -> [its counts where listed, its lower bounds, the floors of the summaries listing it]
    sums: dict[str, list[int]] = {}
    for report in reports:
        for key, listed, error in report.keys:
            kept = sums.get(key)
            if kept is None:
                kept = sums[key] = [0, 0, 0]
            kept[0] = min(kept[0] + listed, U64_MAX)
            kept[1] = min(kept[1] + max(listed - error, 0), U64_MAX)
            kept[2] = min(kept[2] + report.floor, U64_MAX)
    keys = [
        # Where not listed, the summary's floor.
        TopKey(key, min(listed + max(floors - listed_floors, 0), U64_MAX), lower)
        for key, (listed, lower, listed_floors) in sums.items()
    ]
    keys.sort(key=lambda top: (-top.count, top.key))
    top = _sum(key.lower for key in keys[:CONCENTRATION_KEYS])
    # As the Rust merge divides: each sum as a float first.
    top10_share = 0.0 if denials == 0 else min(float(top) / float(denials), 1.0)
    return TopDenied(
        policy=policy,
        limit=limit,
        denials=denials,
        bound=floors,
        bound_limit=bound_limit,
        summaries=len(reports),
        top10_share=top10_share,
        keys=tuple(keys[:count]),
    )
