"""The module's commands as argument lists, their replies, and the three backends that run
them (the Rust client's ``store/reply.rs`` and ``store/backend.rs``). Pure: no I/O.

``backend="auto"`` probes once: the module if its commands exist (``COMMAND INFO
rl.tokenbucket``), else the Functions library (``functions/ratelimit.lua``, shipped in this
package, loaded with ``FUNCTION LOAD REPLACE`` if absent), else the same file as a script
(``SCRIPT LOAD``, then ``EVALSHA``, loaded again after ``NOSCRIPT``).
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal, TypeAlias

from ._kinds import COMMANDS, CONCURRENCY, GCRA
from .algorithms import Algorithm
from .replies import BackendName, View

LIBRARY_NAME = "ratelimit"

log = logging.getLogger("redis_ratelimit_client")


def library_source() -> str:
    """The Functions library shipped in the package (copied from ``functions/ratelimit.lua``
    when the package is built)."""
    return resources.files("redis_ratelimit_client").joinpath("ratelimit.lua").read_text(encoding="utf-8")


def script_source() -> str:
    """The library's script form: the file without its first line (``#!lua name=...``)."""
    return library_source().split("\n", 1)[1]


class Backend(str, enum.Enum):
    """The backend a store is asked to use (``auto``: the first this server can run)."""

    AUTO = "auto"
    MODULE = "module"
    FUNCTIONS = "functions"
    SCRIPTS = "scripts"


#: The most units (cost x weight) a call can take: the module's (an unsigned 64-bit
#: integer, ``wire/src/args``), and the Functions library's (Lua numbers are exact to 2^53).
MODULE_MAX_UNITS = 2**64 - 1
LIBRARY_MAX_UNITS = 2**53


def max_units(backend: BackendName | None) -> int:
    """The most units a call can take on ``backend`` (``None``: not resolved yet)."""
    return LIBRARY_MAX_UNITS if backend in ("functions", "scripts") else MODULE_MAX_UNITS


#: How a store call failed (see :class:`StoreError`).
StoreErrorKind: TypeAlias = Literal["timeout", "unavailable", "invalid", "server", "config"]


class StoreError(Exception):
    """A store call that failed: ``kind`` is ``timeout`` or ``unavailable`` (the store is out
    of reach: fall back, count for the breaker), ``invalid`` (the store refused the request's
    arguments, or they cannot be sent: the caller's error, raised as ``CheckError``) or
    ``server`` / ``config`` (it refused)."""

    def __init__(self, kind: StoreErrorKind, detail: str = "") -> None:
        # A refused command's text can quote its arguments (a whole script): keep the start.
        detail = detail if len(detail) <= 300 else detail[:300] + "..."
        super().__init__(detail or kind)
        self.kind: StoreErrorKind = kind
        self.detail = detail

    @property
    def unavailable(self) -> bool:
        return self.kind in ("timeout", "unavailable")

    def __str__(self) -> str:
        return {
            "timeout": "the store did not answer in time",
            "unavailable": f"the store is unavailable: {self.detail}",
            "server": f"the store refused the request: {self.detail}",
            "invalid": f"the store refused the request as invalid: {self.detail}",
            "config": f"bad store configuration: {self.detail}",
        }.get(self.kind, self.detail)


#: redis-py's exceptions that mean "out of reach", by class name (imported lazily).
_UNAVAILABLE = {
    "ConnectionError",
    "TimeoutError",
    "BusyLoadingError",
    "ReadOnlyError",
    "ClusterDownError",
    "TryAgainError",
    "MasterDownError",
    "MaxConnectionsError",
    "MasterNotFoundError",
    "SlaveNotFoundError",
    "ClusterError",
}
_UNAVAILABLE_CODES = ("LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN")


#: An argument error of the module or the library: ``ERR cost must be greater than 0 (got
#: '0')``, ``ERR cost * weight is too large``, ``ERR limit 2: limit must be at most 10000 (the
#: ratelimit.max-log-entries setting)`` (``wire/src/error.rs``, the library's ``arg_error``;
#: redis-py drops the ``ERR``).
_ARGUMENT_ERROR = re.compile(r"(?:ERR )?[^\n]*? (?:must|is too large)\b")


def classify(error: BaseException) -> StoreError:
    """Sorts a client error into out of reach (fall back), invalid (the caller's error) and
    refused (report it)."""
    if isinstance(error, StoreError):
        return error
    names = {cls.__name__ for cls in type(error).__mro__}
    text = str(error)
    if isinstance(error, UnicodeError) or "DataError" in names:
        return StoreError("invalid", f"cannot be sent: {text or type(error).__name__}")
    if names & _UNAVAILABLE or isinstance(error, OSError) or text.startswith(_UNAVAILABLE_CODES):
        return StoreError("unavailable", text or type(error).__name__)
    if _ARGUMENT_ERROR.match(text):
        return StoreError("invalid", text)
    return StoreError("server", text or type(error).__name__)


#: Each command's Functions library function and whether its keys come counted (``numkeys
#: key ...``), from the generated table of commands (``_kinds.py``).
_FUNCTIONS = {
    command.name: (command.function, command.counts_keys, command.leading_keys)
    for command in COMMANDS
    if command.function is not None
}


def translate(backend: BackendName, sha: str, args: Sequence[str]) -> list[str]:
    """The command running the module command ``args`` on ``backend``: itself on the module,
    ``FCALL function numkeys key... arg...`` on the library, ``EVALSHA sha numkeys key...
    function arg...`` as a script."""
    if backend in ("module", "memory") or not args:
        return list(args)
    found = _FUNCTIONS.get(args[0].upper())
    if found is None:
        return list(args)
    function, counted, leading = found
    rest = list(args[1:])
    if counted:
        count = int(rest[0])
        keys, after = rest[1 : count + 1], rest[count + 1 :]
    else:
        keys, after = rest[:leading], rest[leading:]
    if backend == "scripts":
        return ["EVALSHA", sha, str(len(keys)), *keys, function, *after]
    return ["FCALL", function, str(len(keys)), *keys, *after]


def lost(backend: BackendName, error: BaseException) -> bool:
    """Whether an error reply says the server lost the backend's code (``NOSCRIPT`` for the
    script; ``Function not found`` for the library)."""
    text = str(error)
    if backend == "scripts":
        return text.startswith("NOSCRIPT") or type(error).__name__ == "NoScriptError"
    if backend == "functions":
        return "Function not found" in text
    return False


#: A command the store flow asks the driver to run: its arguments, and whether it goes to
#: every primary of a cluster (loading code) rather than the node of its key.
@dataclass(frozen=True, slots=True)
class Command:
    args: tuple[str, ...]
    everywhere: bool = False
    #: No key: on a cluster, any node answers.
    anywhere: bool = False
    #: The key a module command is about: set, the command is sent exactly once (never
    #: retried by the client library, see :mod:`redis_ratelimit_client.once`).
    key: str | None = None


def keyed(backend: BackendName, sha: str, args: Sequence[str]) -> Command:
    """The module command ``args`` on ``backend``, to be sent exactly once: its first key is
    ``RL.MULTI``'s third argument, every other command's second."""
    index = 2 if args and args[0].upper() == "RL.MULTI" else 1
    key = args[index] if len(args) > index else None
    return Command(tuple(translate(backend, sha, args)), key=key)


def has_command(name: str) -> Generator[Command, Reply, bool]:
    """Whether the server knows command ``name``: called without arguments, a known command
    answers ``wrong number of arguments``, an unknown one ``unknown command`` (no side
    effect, and no reply format to parse)."""
    reply = yield Command((name,), anywhere=True)
    if isinstance(reply, BaseException):
        text = str(reply).lower()
        if "unknown command" in text:
            return False
        if "wrong number of arguments" in text:
            return True
        raise classify(reply)
    return True


#: What a store flow receives for a command: redis-py's reply (read by checking what it is),
#: or the exception it raised.
Reply: TypeAlias = object


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def resolve(wanted: Backend) -> Generator[Command, Reply, tuple[BackendName, str]]:
    """Picks and prepares the backend ``wanted`` stands for: ``(backend, sha)``. Raises a
    ``StoreError`` saying why when none can work on this server."""
    if wanted == Backend.MODULE:
        yield from check_acl()
        return "module", ""
    if wanted == Backend.FUNCTIONS:
        try:
            yield from _load_library()
        except StoreError as error:
            raise _lua_named(error, "functions") from None
        return "functions", ""
    if wanted == Backend.SCRIPTS:
        try:
            sha = yield from _load_script()
        except StoreError as error:
            raise _lua_named(error, "scripts") from None
        return "scripts", sha
    if (yield from has_command("RL.TOKENBUCKET")):
        yield from check_acl()
        return "module", ""
    try:
        yield from _load_library()
        return "functions", ""
    except StoreError as functions:
        if functions.unavailable:
            raise
        try:
            sha = yield from _load_script()
        except StoreError as scripts:
            if scripts.unavailable:
                raise
            if _no_lua_engine(functions) and _no_lua_engine(scripts):
                raise StoreError("server", NO_MODULE_NO_LUA) from None
            raise StoreError(
                "server",
                "no rate-limit backend on this server: no module commands; the Functions library: "
                f"{functions.detail}; scripts: {scripts.detail}",
            ) from None
        return "scripts", sha


#: A call of each module command the limiter sends, with as many arguments as it takes and
#: values it refuses (nothing is written): Redis checks a call's argument count before its
#: ACL, so only such a call answers ``NOPERM`` when an ACL refuses the command.
_PROBE_KEY = "rl-acl-probe:{0}"
_ACL_PROBES: tuple[tuple[str, ...], ...] = (
    ("RL.TOKENBUCKET", _PROBE_KEY, "x", "x"),
    ("RL.SLIDING", _PROBE_KEY, "x", "x"),
    ("RL.FIXED", _PROBE_KEY, "x", "x"),
    ("RL.SLIDINGLOG", _PROBE_KEY, "x", "x"),
    ("CL.THROTTLE", _PROBE_KEY, "x", "x", "x"),
    ("RL.MULTI", "1", _PROBE_KEY, "x", "x", "x"),
    ("RL.ACQUIRE", _PROBE_KEY, "x", "x", "x"),
    ("RL.PEEK", _PROBE_KEY, "x", "x"),
    ("RL.REFUND", _PROBE_KEY, "x", "x", "x"),
)


def _refused_by_acl(reply: BaseException) -> bool:
    """``NOPERM ... no permissions to run the 'rl.fixed' command`` (not a key's refusal:
    the probe's key is not the user's)."""
    text = str(reply)
    names = {cls.__name__ for cls in type(reply).__mro__}
    return ("NoPermissionError" in names or text.startswith("NOPERM")) and "to run" in text


def check_acl() -> Generator[Command, Reply, None]:
    """Raises ``StoreError("config")`` naming them when the server's ACL refuses this user
    every module command; logs the ones it refuses when only some are."""
    refused = []
    for probe in _ACL_PROBES:
        reply = yield Command(probe, anywhere=True)
        if isinstance(reply, BaseException):
            if _refused_by_acl(reply):
                refused.append(probe[0])
            elif classify(reply).unavailable:
                raise classify(reply)
    if len(refused) == len(_ACL_PROBES):
        raise StoreError(
            "config",
            "the server has the redis-ratelimit module, but its ACL refuses this user every one of its "
            f"commands ({', '.join(refused)}): grant them by name (ACL SETUSER <user> +rl.tokenbucket ...)",
        )
    if refused:
        log.warning(
            "redis-ratelimit: the server's ACL refuses this user %s: checks needing them get the fallback",
            ", ".join(refused),
        )


#: With the automatic choice: no module, and no Lua engine to run the library or the script
#: (Valkey 9.1 runs Lua as a module an operator may leave out or unload). One line, as the
#: Rust client says it.
NO_MODULE_NO_LUA = (
    "no rate-limit backend on this server: the ratelimit module is not loaded and the server has no "
    "Lua engine (a Valkey without its lua module), so neither the Functions library nor the script "
    "can run; load the module (loadmodule /path/to/libredis_ratelimit.so) or give the server its Lua engine"
)


def _no_lua_engine(error: StoreError) -> bool:
    """Whether the server refused the library or the script for want of a Lua engine: Valkey 9.1
    answers ``FUNCTION LOAD`` with ``Engine 'lua' not found`` and ``SCRIPT LOAD`` with ``Could not
    find scripting engine 'lua'`` when its lua module is not loaded."""
    text = error.detail.lower()
    return "engine 'lua' not found" in text or "could not find scripting engine" in text


def _lua_named(error: StoreError, name: str) -> StoreError:
    """The backend ``name``'s error, said plainly when the server has no Lua engine."""
    if not _no_lua_engine(error):
        return error
    return StoreError(
        "server",
        f"the {name} backend runs Lua and this server has no Lua engine (a Valkey without its lua "
        "module): load the ratelimit module and use the module backend, or give the server its Lua engine",
    )


def _load_library() -> Generator[Command, Reply, None]:
    listed = yield Command(("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME), everywhere=True)
    if isinstance(listed, BaseException):
        raise classify(listed)
    if isinstance(listed, dict):
        present = bool(listed) and all(bool(value) for value in listed.values())
    else:
        present = bool(listed)
    if not present:
        yield from reload_library()


def reload_library() -> Generator[Command, Reply, None]:
    loaded = yield Command(("FUNCTION", "LOAD", "REPLACE", library_source()), everywhere=True)
    if isinstance(loaded, BaseException):
        raise classify(loaded)


def _load_script() -> Generator[Command, Reply, str]:
    loaded = yield Command(("SCRIPT", "LOAD", script_source()), everywhere=True)
    if isinstance(loaded, BaseException):
        raise classify(loaded)
    if isinstance(loaded, dict):
        loaded = next(iter(loaded.values()))
    if isinstance(loaded, (list, tuple)):
        loaded = loaded[0]
    return _text(loaded)


def reload(backend: BackendName) -> Generator[Command, Reply, str]:
    """Gives the server the backend's code again; returns the script's SHA (or "")."""
    if backend == "scripts":
        return (yield from _load_script())
    if backend == "functions":
        yield from reload_library()
    return ""


# Requests and replies.


@dataclass(frozen=True, slots=True)
class Call:
    """One limit of a group as the store is asked about it."""

    key: str
    algorithm: Algorithm
    weight: int = 1
    max_wait_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Acquire:
    """Take ``units`` (× weight) from every limit of a group, all or nothing; with
    ``partial_min`` as many as every limit has, at least that (``PARTIAL MIN``)."""

    calls: tuple[Call, ...]
    units: int
    partial_min: int | None = None
    holder: str | None = None


@dataclass(frozen=True, slots=True)
class Refund:
    """Give ``units`` (× weight) back to every limit of a group (in-flight: the holder)."""

    calls: tuple[Call, ...]
    units: int
    holder: str | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """What a group answered: the units granted (0: denied, nothing taken), the binding
    limit's index in the request, every limit's view, the backend that answered."""

    granted: int
    binding: int
    views: tuple[View, ...]
    backend: BackendName


#: How an acquire's reply reads: ``single`` (five integers), ``throttle`` (redis-cell's
#: reply), ``multi`` (``RL.MULTI``'s seven fields).
ReplyShape: TypeAlias = Literal["single", "throttle", "multi"]


def acquire_command(request: Acquire, multi: bool) -> tuple[ReplyShape, list[str]]:
    """``(shape, args)``: ``single`` (five integers), ``throttle`` (redis-cell's reply) or
    ``multi`` (``RL.MULTI``'s seven fields), routed as the Rust client's ``wire::encode::group``
    routes a call (the golden encodings, ``tests/vectors/encodings.json``, check it): one limit
    of a kind with a command of its own goes as that command; one in-flight limit taken whole
    as ``RL.ACQUIRE``; one GCRA limit taken whole on a server without ``RL.MULTI`` as
    ``CL.THROTTLE``; anything else as ``RL.MULTI``. Raises ``StoreError("config")`` when the
    request needs a command the server lacks."""
    calls = request.calls
    if not calls:
        raise StoreError("config", "a group has at least one limit")

    def partial(args: list[str]) -> None:
        if request.partial_min is not None:
            args += ["PARTIAL", "MIN", str(max(request.partial_min, 1))]

    if len(calls) == 1:
        call = calls[0]
        units = str(request.units * max(call.weight, 1))
        whole = request.partial_min is None
        command = call.algorithm.command
        if command is not None:
            args = [command, call.key, *call.algorithm.wire_args(), units]
            partial(args)
            if call.max_wait_ms is not None:
                if not whole:
                    raise StoreError("config", "pacing (MAXWAIT) cannot be combined with a partial grant")
                args += ["MAXWAIT", str(call.max_wait_ms)]
            return "single", args
        if call.algorithm.kind == CONCURRENCY and whole:
            if request.holder is None:
                raise StoreError("config", "an in-flight limit needs a holder id")
            return "single", [
                "RL.ACQUIRE",
                call.key,
                str(call.algorithm.quota),
                request.holder,
                str(call.algorithm.ttl_ms),
            ]
        if call.algorithm.kind == GCRA and whole and not multi:
            return "throttle", ["CL.THROTTLE", call.key, *call.algorithm.wire_args(), units]
        if not multi:
            raise StoreError("config", "this algorithm has no command of its own: it needs RL.MULTI")
    if not multi:
        raise StoreError("config", "several limits in one call need RL.MULTI")
    if any(call.max_wait_ms is not None for call in calls):
        raise StoreError("config", "a paced limit (MAXWAIT) needs a call of its own")
    holder = None
    if any(call.algorithm.kind == CONCURRENCY for call in calls):
        if request.holder is None:
            raise StoreError("config", "an in-flight limit needs a holder id")
        holder = request.holder
    args = ["RL.MULTI", str(len(calls)), *(call.key for call in calls)]
    for call in calls:
        args += [call.algorithm.wire_name, *call.algorithm.wire_args()]
    args += ["COST", str(request.units)]
    if any(call.weight != 1 for call in calls):
        args += ["WEIGHTS", *(str(max(call.weight, 1)) for call in calls)]
    if holder is not None:
        args += ["HOLDER", holder]
    partial(args)
    return "multi", args


def refund_commands(request: Refund) -> list[list[str]]:
    """One command per limit giving its units back (as ``wire::encode::refund`` writes it).
    Raises ``StoreError("config")`` for an in-flight limit without its holder id."""
    commands = []
    for call in request.calls:
        units = request.units * max(call.weight, 1)
        if call.algorithm.kind == CONCURRENCY:
            if request.holder is None:
                raise StoreError("config", "an in-flight limit needs a holder id")
            commands.append(["RL.RELEASE", call.key, request.holder])
        elif call.algorithm.kind == GCRA:
            commands.append(["CL.THROTTLE", call.key, *call.algorithm.wire_args(), f"-{units}"])
        else:
            commands.append(["RL.REFUND", call.key, call.algorithm.wire_name, *call.algorithm.wire_args(), str(units)])
    return commands


def _integer(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, str)):
        return int(value)
    raise ValueError(f"not an integer: {value!r}")


def _five(value: object) -> list[int]:
    if not isinstance(value, (list, tuple)) or len(value) != 5:
        raise ValueError(f"expected 5 integers, got {value!r}")
    return [_integer(item) for item in value]


def parse_acquire(shape: ReplyShape, request: Acquire, reply: Reply, backend: BackendName) -> Grant:
    """Reads the reply of an acquire sent as ``shape``."""
    partial = request.partial_min is not None
    if shape == "single":
        fields = _five(reply)
        view = View.from_fields(fields)
        if partial:
            granted = max(fields[0], 0)
        else:
            granted = request.units if view.allowed else 0
        view = View(granted > 0, view.remaining, view.retry_after_ms, view.reset_after_ms, view.limit)
        return Grant(granted, 0, (view,), backend)
    if shape == "throttle":
        limited, limit, remaining, retry_s, reset_s = _five(reply)
        allowed = limited == 0
        retry_ms: int | None
        if allowed:
            retry_ms = 0
        elif retry_s < 0:
            retry_ms = None
        else:
            retry_ms = retry_s * 1000
        view = View(allowed, max(remaining, 0), retry_ms, max(reset_s, 0) * 1000, max(limit, 0))
        return Grant(request.units if allowed else 0, 0, (view,), backend)
    if not isinstance(reply, (list, tuple)) or len(reply) != 7:
        raise ValueError(f"RL.MULTI: expected 7 fields, got {reply!r}")
    first = _integer(reply[0])
    views = tuple(View.from_fields(_five(item)) for item in reply[6])
    if len(views) != len(request.calls):
        raise ValueError(f"RL.MULTI: {len(views)} views for {len(request.calls)} limits")
    if partial:
        granted = max(first, 0)
    else:
        granted = request.units if first != 0 else 0
    binding = max(_integer(reply[5]), 0)
    return Grant(granted, min(binding, len(views) - 1), views, backend)


def acquire_flow(request: Acquire, backend: BackendName, sha: str, multi: bool) -> Generator[Command, Reply, Grant]:
    """One group acquire on ``backend``: the command, and once more after reloading code the
    server lost. Raises ``StoreError``."""
    shape, args = acquire_command(request, multi)
    for attempt in range(2):
        reply = yield keyed(backend, sha, args)
        if isinstance(reply, BaseException):
            if attempt == 0 and lost(backend, reply):
                sha = (yield from reload(backend)) or sha
                continue
            raise classify(reply)
        try:
            return parse_acquire(shape, request, reply, backend)
        except (ValueError, TypeError, IndexError) as error:
            raise StoreError("server", f"unexpected reply: {error}") from None
    raise StoreError("server", "the server lost the backend's code twice")
