"""The commands this client sends equal the Rust client's: the golden encodings written by
``wire/examples/generate.rs`` (``make generate``; ``make lint`` fails while the file is stale)
from ``wire::encode`` replay through ``protocol.py`` with zero differences. Pure: no server."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from redis_ratelimit_client import _kinds, protocol
from redis_ratelimit_client.algorithms import Algorithm
from redis_ratelimit_client.core import KINDS
from redis_ratelimit_client.protocol import Acquire, Call, Refund, StoreError, acquire_command, refund_commands

VECTORS = Path(__file__).parent / "vectors" / "encodings.json"
#: The operations this client sends, and those it does not (other clients' commands: peeks,
#: a region's admission and lease). An operation in neither fails the replay.
SENT = {"group", "refund"}
NOT_SENT = {"peek", "regional", "region_lease"}
#: What a case the Rust encoder refuses is compared as (the texts differ by language).
REFUSED = "refused"


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]
    return cases


def _calls(case: dict[str, Any]) -> tuple[Call, ...]:
    return tuple(
        Call(limit["key"], Algorithm.from_params(limit["kind"], limit["params"]), limit["weight"], limit["max_wait_ms"])
        for limit in case["limits"]
    )


def _encode(case: dict[str, Any]) -> list[str] | str:
    try:
        if case["op"] == "group":
            request = Acquire(_calls(case), case["cost"], case["partial_min"], case["holder"])
            return acquire_command(request, case["multi"])[1]
        commands = refund_commands(Refund(_calls(case), case["cost"], case["holder"]))
        assert len(commands) == 1
        return commands[0]
    except StoreError:
        return REFUSED


def replay() -> tuple[Counter[str], list[str]]:
    counts: Counter[str] = Counter()
    differences = []
    for case in _cases():
        op = case["op"]
        if op in NOT_SENT:
            continue
        assert op in SENT, f"an operation this replay does not know: {op!r}"
        counts[op] += 1
        for limit in case["limits"]:
            counts[f"{op}:{limit['kind']}"] += 1
        want = case.get("command", REFUSED)
        got = _encode(case)
        if got != want:
            differences.append(f"{json.dumps(case)}\n  python: {got}")
    return counts, differences


def test_every_encoding_replays_with_zero_differences() -> None:
    counts, differences = replay()
    assert not differences, f"{len(differences)} differences, the first:\n" + "\n".join(differences[:5])
    assert counts["group"] >= 100 and counts["refund"] >= 12, dict(counts)
    for kind in _kinds.BY_NAME:
        assert counts[f"group:{kind}"] >= 8 and counts[f"refund:{kind}"] >= 2, f"{kind}: {dict(counts)}"


def test_a_lone_limit_of_a_kind_without_a_command_goes_through_multi() -> None:
    """As ``wire::encode::group``: a GCRA limit alone on a server with ``RL.MULTI``."""
    gcra = Algorithm.gcra(4, 10, 60)
    assert gcra.command is None
    shape, args = acquire_command(Acquire((Call("k", gcra),), 1), multi=True)
    assert (shape, args[:3]) == ("multi", ["RL.MULTI", "1", "k"])


def test_a_planted_routing_bug_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay is a checker that fails: every kind sent alone as ``RL.<ALGORITHM>`` (the
    routing this client had before the generated table)."""
    monkeypatch.setattr(Algorithm, "command", property(lambda self: f"RL.{self.wire_name}"))
    _, differences = replay()
    assert differences, "a lone GCRA sent as RL.GCRA went unnoticed"


def test_every_kind_has_its_python_twin_and_every_function_is_known() -> None:
    assert set(KINDS) == set(_kinds.BY_NAME)
    functions = {name: found[0] for name, found in protocol._FUNCTIONS.items()}
    assert functions["RL.REGIONAL"] == "rl_regional"
    assert protocol.translate("functions", "", ["RL.REGIONAL", "f", "l", "FIXED", "1", "1", "1"]) == [
        "FCALL",
        "rl_regional",
        "2",
        "f",
        "l",
        "FIXED",
        "1",
        "1",
        "1",
    ]
