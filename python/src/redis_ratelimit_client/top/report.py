"""The top-keys storage format, version 1 (``docs/operating.md``, "Storage format"): what a
replica writes into Redis and any reader (any client language, ``rlctl``, the service) reads
back; the Rust client's ``top/report.rs``. Pure: no I/O.

- key: ``rl:top:{rl-top}:v1:<bucket>``, one hash per minute (``<bucket>`` its start in Unix
  seconds);
- field: ``<replica>:<policy_len>:<policy>:<limit>``, only to keep writers apart;
- value: a JSON object, one replica's summary of one policy and limit in that minute.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..core.numbers import U64_MAX

#: The width of a bucket, in seconds.
BUCKET_SECONDS = 60
#: The format's version (the ``v`` member and the key's ``v1``).
VERSION = 1
#: What every bucket's key starts with (the hash tag keeps every bucket in one slot).
KEY_PREFIX = "rl:top:{rl-top}:v1:"
#: The ``client`` member this package writes.
CLIENT = "python"
_U32_MAX = 2**32 - 1


def bucket_of(unix_s: int) -> int:
    """The start of the bucket holding ``unix_s``."""
    return unix_s - unix_s % BUCKET_SECONDS


def key(bucket: int) -> str:
    """The key of the bucket starting at ``bucket`` (Unix seconds)."""
    return f"{KEY_PREFIX}{bucket}"


def window_keys(now_unix_s: int, minutes: int) -> list[str]:
    """The keys of the ``minutes`` buckets ending with the one holding ``now_unix_s``, newest
    first (at least one; none before the epoch)."""
    newest = bucket_of(now_unix_s)
    return [key(newest - back * BUCKET_SECONDS) for back in range(max(minutes, 1)) if newest >= back * BUCKET_SECONDS]


def field_of(replica: str, policy: str, limit: str) -> str:
    """The field of ``replica``'s summary of ``policy`` and ``limit`` (the policy's length in
    UTF-8 bytes keeps ``a:b`` + ``c`` apart from ``a`` + ``b:c``)."""
    return f"{replica}:{len(policy.encode('utf-8'))}:{policy}:{limit}"


class ReportError(ValueError):
    """A stored value that is not read: not a report, another version, or numbers that break
    the format's rules."""


@dataclass(frozen=True, slots=True)
class Report:
    """One replica's summary of one policy and limit in one minute, as stored."""

    policy: str
    limit: str
    replica: str
    #: The client language: ``rust``, ``python``, ``node`` (empty when not given).
    client: str
    #: The summary's size.
    capacity: int
    #: Every denial the replica counted for this policy and limit in this minute.
    denials: int
    #: 0 while the summary holds fewer than ``capacity`` keys (every denied key listed,
    #: exactly); else its least count: a key not listed was denied at most this often.
    floor: int
    #: ``(key, count, error)``, most denied first: the key's true denials are in
    #: ``count - error ..= count``.
    keys: tuple[tuple[str, int, int], ...] = field(default=())
    v: int = VERSION

    def encode(self) -> str:
        """The value stored: compact JSON, members in the Rust client's order."""
        return json.dumps(
            {
                "v": self.v,
                "policy": self.policy,
                "limit": self.limit,
                "replica": self.replica,
                "client": self.client,
                "capacity": self.capacity,
                "denials": self.denials,
                "floor": self.floor,
                "keys": [list(entry) for entry in self.keys],
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @staticmethod
    def decode(value: str | bytes) -> Report:
        """A stored value, checked as the Rust reader checks it: the version, at most
        ``capacity`` keys, each error within its count (members it does not know are
        ignored); raises :class:`ReportError` naming what is wrong."""
        try:
            decoded = json.loads(value)
        except (ValueError, UnicodeDecodeError) as error:
            raise ReportError(f"not a top-keys report: {error}") from None
        if not isinstance(decoded, dict):
            raise ReportError("not a top-keys report: not a JSON object")
        version = _number(decoded, "v", _U32_MAX)
        if version != VERSION:
            raise ReportError(f"top-keys report version {version}, this reader reads version {VERSION}")
        policy, limit = _text(decoded, "policy"), _text(decoded, "limit")
        replica = _text(decoded, "replica")
        client = _text(decoded, "client") if "client" in decoded else ""
        capacity, denials = _number(decoded, "capacity"), _number(decoded, "denials")
        floor = _number(decoded, "floor")
        listed = decoded.get("keys")
        if not isinstance(listed, list):
            raise ReportError("not a top-keys report: 'keys' is not a list")
        keys = tuple(_entry(entry) for entry in listed)
        if len(keys) > capacity:
            raise ReportError(
                f"top-keys report of '{policy}'/'{limit}' is inconsistent: {len(keys)} keys in a summary of {capacity}"
            )
        for name, count, over in keys:
            if over > count:
                raise ReportError(
                    f"top-keys report of '{policy}'/'{limit}' is inconsistent: "
                    f"key '{name}' has an error {over} above its count {count}"
                )
        return Report(policy, limit, replica, client, capacity, denials, floor, keys)


def _is_number(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def _number(decoded: dict[str, object], name: str, most: int = U64_MAX) -> int:
    value = decoded.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise ReportError(f"not a top-keys report: '{name}' is not a whole number from 0 to {most} ({value!r})")
    return value


def _text(decoded: dict[str, object], name: str) -> str:
    value = decoded.get(name)
    if not isinstance(value, str):
        raise ReportError(f"not a top-keys report: '{name}' is not a string ({value!r})")
    return value


def _entry(entry: object) -> tuple[str, int, int]:
    if (
        isinstance(entry, list)
        and len(entry) == 3
        and isinstance(entry[0], str)
        and _is_number(entry[1], U64_MAX)
        and _is_number(entry[2], U64_MAX)
    ):
        return entry[0], entry[1], entry[2]
    raise ReportError(f"not a top-keys report: a key is not [key, count, error] ({entry!r})")
