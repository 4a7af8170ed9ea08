"""Policies from the Rust client's TOML format, read unchanged (``client/src/config.rs``):
``[[policy]]`` with ``name``, ``fallback``, ``timeout_ms``, ``deny_cache``, ``lease = { units,
max_units, lifetime_ms }``, ``from_store``, and ``[[policy.limit]]`` with ``name``, ``key``,
``algorithm`` and exactly that algorithm's parameters. Unknown fields and another
algorithm's parameters are refused, naming the policy and the limit."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from ._kinds import BY_CONFIG_NAME, GCRA, KINDS, TOKEN_BUCKET, Param
from .algorithms import Algorithm, AlgorithmError, or_list
from .policy import Lease, Limit, Policy, PolicyError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names what is wrong."""


_POLICY_FIELDS = {"name", "fallback", "timeout_ms", "deny_cache", "lease", "from_store", "limit"}
_LEASE_FIELDS = {"units", "max_units", "lifetime_ms"}
_LIMIT_FIELDS = {"name", "key", "algorithm", "weight"}

T = TypeVar("T")


def _fields(param: Param) -> tuple[str, ...]:
    """The fields a parameter may be given as (``client/src/config.rs``'s ``fields``): its
    name, or for a duration its name in seconds or in milliseconds, and a rate as the time
    its tokens take to refill instead."""
    if param.cls == "rate":
        return (param.name, "refill_s", "refill_ms")
    if param.cls == "seconds":
        return (f"{param.name}_s", f"{param.name}_ms")
    if param.cls == "whole_seconds":
        return (f"{param.name}_s",)
    return (param.name,)


#: Each kind's fields, by short name (from the generated table, ``_kinds.py``).
_PARAMETERS = {
    kind.name: tuple(field for param in kind.params for field in _fields(param))
    + (("max_wait_ms",) if kind.paced else ())
    for kind in KINDS
}
_ALL_PARAMETERS = {name for names in _PARAMETERS.values() for name in names}


def from_file(path: str | Path) -> list[Policy]:
    """Reads policies from a TOML file; every error is a ``ConfigError`` naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the configuration file {path}: {error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"the configuration file {path} is not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start}"
        ) from None
    try:
        return from_toml(text)
    except ConfigError as error:
        raise ConfigError(f"the configuration file {path}: {error}") from None


def from_toml(text: str) -> list[Policy]:
    """Reads policies from TOML text."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"bad configuration: {error}") from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively.
        raise ConfigError("bad configuration: arrays or inline tables nested too deeply") from None
    unknown = set(document) - {"policy"}
    if unknown:
        raise ConfigError(f"bad configuration: unknown field '{sorted(unknown)[0]}', expected 'policy'")
    policies = document.get("policy", [])
    if not isinstance(policies, list) or not policies:
        raise ConfigError(
            "bad configuration: no policy: add at least one [[policy]] with a [[policy.limit]] "
            "(without one, every check is refused as naming an unknown policy)"
        )
    return [_policy(entry) for entry in policies]


def _check_fields(table: Mapping[str, object], allowed: set[str], where: str) -> None:
    for name in table:
        if name not in allowed:
            raise ConfigError(f"bad configuration: {where}: unknown field '{name}'")


def _typed(table: Mapping[str, object], name: str, kind: type[T], where: str) -> T | None:
    value = table.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"bad configuration: {where}: '{name}' must be {kind.__name__}, got {value!r}")
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"bad configuration: {where}: '{name}' must be at least 0, got {value}")
    return value


def _ms_text(ms: int) -> str:
    """Milliseconds as exact seconds (``1500`` -> ``1.500``)."""
    return f"{ms // 1000}.{ms % 1000:03d}"


def _policy(entry: object) -> Policy:
    if not isinstance(entry, dict):
        raise ConfigError("bad configuration: each [[policy]] is a table")
    name = entry.get("name")
    if not isinstance(name, str):
        raise ConfigError("bad configuration: a [[policy]] needs a name")
    where = f"policy '{name}'"
    _check_fields(entry, _POLICY_FIELDS, where)
    lease = None
    if "lease" in entry:
        table = entry["lease"]
        if not isinstance(table, dict):
            raise ConfigError(f"bad configuration: {where}: lease is a table")
        _check_fields(table, _LEASE_FIELDS, f"{where}, lease")
        units = _typed(table, "units", int, f"{where}, lease")
        if units is None:
            raise ConfigError(f"bad configuration: {where}, lease: missing field 'units'")
        lifetime = _typed(table, "lifetime_ms", int, f"{where}, lease")
        lease = Lease(
            units, _typed(table, "max_units", int, f"{where}, lease"), 1.0 if lifetime is None else lifetime / 1000
        )
    limits = [_limit(name, limit) for limit in entry.get("limit", [])]
    fallback = _typed(entry, "fallback", str, where)
    timeout_ms = _typed(entry, "timeout_ms", int, where)
    deny_cache = _typed(entry, "deny_cache", bool, where)
    try:
        return Policy(
            name,
            limits,
            lease=lease,
            fallback=fallback or "local",
            timeout=0.05 if timeout_ms is None else timeout_ms / 1000,
            deny_cache=True if deny_cache is None else deny_cache,
            tenant_input=_typed(entry, "from_store", str, where),
        )
    except PolicyError as error:
        text = str(error)
        prefix = "" if text.startswith(f"policy '{name}'") else f"policy '{name}': "
        raise ConfigError(f"bad configuration: {prefix}{text}") from None


def _limit(policy: str, table: object) -> Limit:
    if not isinstance(table, dict):
        raise ConfigError(f"bad configuration: policy '{policy}': each [[policy.limit]] is a table")
    name = table.get("name")
    where = f"policy '{policy}', limit '{name}'"
    _check_fields(table, _LIMIT_FIELDS | _ALL_PARAMETERS, where)
    for field in ("name", "key", "algorithm"):
        if not isinstance(table.get(field), str):
            raise ConfigError(f"bad configuration: {where}: missing field '{field}'")
    algorithm_name = table["algorithm"]
    kind = BY_CONFIG_NAME.get(algorithm_name)
    if kind is None:
        raise ConfigError(
            f"bad configuration: {where}: algorithm is {or_list(k.config_name for k in KINDS)} (got '{algorithm_name}')"
        )
    allowed = _PARAMETERS[kind.name]
    for parameter in sorted(set(table) & _ALL_PARAMETERS, key=list(_ALL_PARAMETERS).index):
        if parameter not in allowed:
            raise ConfigError(f"bad configuration: {where}: '{parameter}' is not a parameter of {algorithm_name}")
    # Every parameter is a whole number but a token bucket's rate (a decimal, as text).
    rate = _typed(table, "rate", str, where) if "rate" in allowed else None
    numbers = {p: _typed(table, p, int, where) for p in allowed if p != "rate"}

    def need(parameter: str) -> int:
        value = numbers.get(parameter)
        if value is None:
            raise ConfigError(f"bad configuration: {where}: '{parameter}' is missing")
        return value

    def duration(name: str) -> str:
        """A duration given in seconds (``name_s``) or in milliseconds (``name_ms``)."""
        seconds, millis = numbers.get(f"{name}_s"), numbers.get(f"{name}_ms")
        if seconds is not None and millis is None:
            return str(seconds)
        if millis is not None and seconds is None:
            return _ms_text(millis)
        raise ConfigError(f"bad configuration: {where}: give exactly one of '{name}_s' and '{name}_ms'")

    try:
        if kind.name == TOKEN_BUCKET:
            capacity = need("capacity")
            if rate is not None and (numbers.get("refill_s") is not None or numbers.get("refill_ms") is not None):
                raise ConfigError(f"bad configuration: {where}: give either 'rate' or a refill time, not both")
            if rate is not None:
                algorithm = Algorithm.token_bucket(capacity, rate)
            else:
                algorithm = Algorithm.token_bucket(capacity, refill=duration("refill"))
        elif kind.name == GCRA:
            algorithm = Algorithm.gcra(need("max_burst"), need("count"), need("period_s"))
        else:
            # A count, then a duration (in seconds or milliseconds), or whole milliseconds.
            words = [duration(param.name) if param.cls == "seconds" else str(need(param.name)) for param in kind.params]
            algorithm = Algorithm.from_params(kind.name, words)
    except AlgorithmError as error:
        raise ConfigError(f"bad configuration: {where}: {error}") from None
    weight = _typed(table, "weight", int, where)
    max_wait_ms = numbers.get("max_wait_ms")
    try:
        return Limit.of(
            str(name),
            algorithm,
            key=str(table["key"]),
            weight=1 if weight is None else max(weight, 1),
            max_wait=None if max_wait_ms is None else _ms_text(max_wait_ms),
        )
    except PolicyError as error:
        raise ConfigError(f"bad configuration: policy '{policy}': {error}") from None
