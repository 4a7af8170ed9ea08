"""Replays the Rust core's golden vectors (``core/examples/golden.rs``) through the Python port
and lists every difference. ``python golden_replay.py FILE`` prints a summary; the test suite
calls :func:`replay`."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

from redis_ratelimit_client.core import (
    ConcurrencyParams,
    Decimal,
    FixedWindowParams,
    GcraParams,
    NumberParseError,
    Quota,
    SlidingLogParams,
    SlidingWindowParams,
    TokenBucketParams,
    cell_reply,
    emission_interval_ns,
)
from redis_ratelimit_client.core.concurrency import Concurrency
from redis_ratelimit_client.core.decision import Decision
from redis_ratelimit_client.core.engine import KindMismatch
from redis_ratelimit_client.core.gcra import Gcra, GcraParamError
from redis_ratelimit_client.core.numbers import I64_MAX
from redis_ratelimit_client.core.sliding_log import SlidingLog
from redis_ratelimit_client.core.token_bucket import TokenBucket
from redis_ratelimit_client.core.windows import FixedWindow, SlidingWindow
from redis_ratelimit_client.local import LocalLimits


def quota(spec: list[Any]) -> Quota:
    kind = spec[0]
    if kind == "token":
        params = TokenBucketParams.from_interval(spec[1], spec[2], spec[3])
        return params.with_max_wait_ns(spec[4]) if spec[4] else params
    if kind == "fixed":
        return FixedWindowParams.new(spec[1], spec[2], spec[3])
    if kind == "sliding":
        return SlidingWindowParams.new(spec[1], spec[2], spec[3])
    if kind == "log":
        return SlidingLogParams.new(spec[1], spec[2], spec[3])
    if kind == "gcra":
        return GcraParams.from_interval(spec[1], spec[2], spec[3])
    if kind != "concurrency":
        # A kind the Rust core generates vectors for and this client has no twin of yet.
        raise ValueError(f"golden vector of unknown kind {kind!r}: the Python client has no twin of it")
    params = ConcurrencyParams.new(spec[1], spec[2])
    if spec[3] is not None:
        params = params.with_holder(spec[3].encode())
    return params.with_cost(spec[4])


def decision(value: Decision) -> list[int]:
    fields = value.reply_fields()
    # The vectors print remaining and limit unsaturated (u64), retry as the reply does.
    return [fields[0], value.remaining, min(value.retry, I64_MAX), value.reset_after_ms, value.limit]


def digest(limits: LocalLimits, key: str) -> Any:
    stored = limits.state(key)
    if stored is None:
        return None
    _, state, expires = stored
    if isinstance(state, TokenBucket):
        body: list[Any] = ["token", state.empty_at_ns, state.interval_ns]
    elif isinstance(state, FixedWindow):
        body = ["fixed", state.window_start_us, state.count]
    elif isinstance(state, SlidingWindow):
        body = ["sliding", state.window_start_us, state.previous, state.current]
    elif isinstance(state, SlidingLog):
        entries = state.entries
        first = entries[0] if entries else -1
        last = entries[-1] if entries else -1
        body = ["log", state.as_of_us, len(entries), first, last, sum(entries)]
    elif isinstance(state, Gcra):
        body = ["gcra", state.tat_ns]
    elif isinstance(state, Concurrency):
        body = ["concurrency", [[expiry, holder.decode()] for expiry, holder in state.holders]]
    else:
        raise TypeError(f"unknown state {state!r}")
    return [body, expires]


def _decimal(text: str) -> Any:
    try:
        value = Decimal.parse_positive(text.encode())
    except NumberParseError as error:
        return error.kind.value
    return [value.ceil_reciprocal(1_000_000_000), value.ceil_times(1_000_000), value.exceeds_power_of_ten(9)]


def _gcra(case: dict[str, Any]) -> tuple[Any, Any]:
    try:
        interval: Any = emission_interval_ns(case["c"], case["p"])
    except GcraParamError as error:
        interval = str(error)
    try:
        params = GcraParams.new(case["b"], case["c"], case["p"])
        result: Any = [params.interval_ns, params.tolerance_ns()]
    except GcraParamError as error:
        result = str(error)
    return interval, result


def _acquire(limits: LocalLimits, case: dict[str, Any]) -> dict[str, Any]:
    quotas = [quota(spec) for spec in case["q"]]
    out: dict[str, Any] = {}
    try:
        verdict = limits.acquire(case["keys"], quotas, case["w"], case["c"], case["min"], case["now"])
    except KindMismatch as error:
        out["err"] = error.index
    else:
        out["units"] = verdict.units
        out["binding"] = verdict.binding
        out["d"] = decision(verdict.decision)
        out["per"] = [decision(d) for d in verdict.per_limit]
        out["exp"] = [None if c is None else c.expires_at_ms for c in verdict.commits]
    out["s"] = [digest(limits, key) for key in case["keys"]]
    return out


def _refund(limits: LocalLimits, case: dict[str, Any]) -> dict[str, Any]:
    quotas = [quota(spec) for spec in case["q"]]
    evaluations = limits.refund(case["keys"], quotas, case["now"])
    per = [[decision(e.decision), None if e.commit is None else e.commit.expires_at_ms] for e in evaluations]
    return {"per": per, "s": [digest(limits, key) for key in case["keys"]]}


def _grantable(limits: LocalLimits, case: dict[str, Any]) -> dict[str, Any]:
    unit = quota(case["q"][0])
    held = limits.held(case["keys"], [unit], case["now"])[0]
    state = held.state if held.kind == unit.kind else None
    return {"r": unit.grantable(state, case["up"], case["now"])}


def _throttle(limits: LocalLimits, case: dict[str, Any]) -> dict[str, Any]:
    params = quota(case["q"][0])
    assert isinstance(params, GcraParams)
    held = limits.held(case["keys"], [params], case["now"])[0]
    evaluation, cell = params.throttle(held.state if held.kind == params.kind else None, case["now"])
    if evaluation.commit is not None:
        limits._commit("k", params.kind, evaluation.commit, case["now"])
    return {
        "cell": cell_reply(cell),
        "d": decision(evaluation.decision),
        "exp": None if evaluation.commit is None else evaluation.commit.expires_at_ms,
        "s": [digest(limits, "k")],
    }


_OPERATIONS = {"acq": _acquire, "ref": _refund, "gra": _grantable, "thr": _throttle}
_INPUTS = {"t", "tr", "now", "keys", "q", "w", "c", "min", "up"}


def replay(lines: Iterator[str]) -> tuple[Counter[str], list[str]]:
    """Replays every case; returns the count of cases by kind and the differences found."""
    counts: Counter[str] = Counter()
    differences: list[str] = []
    trace = None
    limits = LocalLimits()
    for number, line in enumerate(lines, 1):
        case = json.loads(line)
        kind = case["t"]
        if kind == "dec":
            got: Any = _decimal(case["s"])
            expected: Any = case["r"]
            label = "decimal"
        elif kind == "gp":
            got = list(_gcra(case))
            expected = [case["i"], case["r"]]
            label = "gcra-parameters"
        else:
            if case["tr"] != trace:
                trace, limits = case["tr"], LocalLimits()
            got = _OPERATIONS[kind](limits, case)
            expected = {key: value for key, value in case.items() if key not in _INPUTS}
            kinds = {spec[0] for spec in case["q"]}
            label = "multi" if len(case["keys"]) > 1 or case["keys"][0] != "k" else kinds.pop()
        counts[label] += 1
        if got != expected:
            differences.append(f"line {number}: {line.strip()}\n  python: {json.dumps(got)}")
    return counts, differences


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as file:
        counts, differences = replay(iter(file))
    for difference in differences[:20]:
        print(difference)
    print(f"{sum(counts.values())} cases ({dict(counts)}), {len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
