"""The fleet's top denied keys without a server: the Space-Saving summary, the storage format
v1 and the merge give what the Rust client's code gives (``tests/vectors/top_merge_v1.json``,
written by client/src/top/{summary,report,merge}.rs), and a replica's recorder writes what
changed, in its minute's hash."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
from pathlib import Path
from typing import Any

import pytest

from redis_ratelimit_client import Limit, MemoryStore, Policy, RateLimiter, SyncRateLimiter, TopError, TopKeys, TopQuery
from redis_ratelimit_client.metric_labels import MAX_CLASS_LABELS, OTHER, Given, PolicyLabels, near
from redis_ratelimit_client.top.merge import merge
from redis_ratelimit_client.top.recorder import Recorder
from redis_ratelimit_client.top.report import Report, ReportError, bucket_of, field_of, key, window_keys
from redis_ratelimit_client.top.reporter import decode_all
from redis_ratelimit_client.top.summary import MAX_KEY_BYTES, SpaceSaving, bounded

POLICIES = [Policy("api", [Limit.fixed_window("per-key", 1, 3600, key="k:{key}")])]
VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "top_merge_v1.json"


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    if not VECTORS.is_file():
        pytest.fail(f"{VECTORS} is missing: the top-keys vectors the Rust code wrote")
    loaded: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return loaded


def test_the_summary_counts_a_stream_as_the_rust_one(vectors: dict[str, Any]) -> None:
    case = vectors["summary"]
    summary = SpaceSaving(case["capacity"])
    for streamed in case["stream"]:
        summary.add(streamed)
    assert (summary.total, summary.floor()) == (case["total"], case["floor"])
    assert [[c.key, c.count, c.error] for c in summary.counted()] == case["counted"]
    # Its guarantees, against the stream's true counts (keys cut as the summary cuts them).
    truth: dict[str, int] = {}
    for streamed in case["stream"]:
        truth[bounded(streamed)] = truth.get(bounded(streamed), 0) + 1
    floor = summary.floor()
    assert 0 < floor <= summary.total // summary.capacity
    held = {c.key: c for c in summary.counted()}
    for name, true_count in truth.items():
        counted = held.get(name)
        if counted is None:
            assert true_count <= floor, name
        else:
            assert counted.count - counted.error <= true_count <= counted.count, name
            assert counted.error <= floor


def test_the_merge_gives_what_the_rust_merge_gives(vectors: dict[str, Any]) -> None:
    assert len(vectors["merges"]) >= 6
    for case in vectors["merges"]:
        stored = vectors["stored"][case["stored"]]
        reports, unreadable = decode_all([[(f"field{index}", value) for index, value in enumerate(stored)]])
        assert unreadable == case["unreadable"], case["name"]
        query = case["query"]
        merged = merge(reports, query["policy"], query["limit"], query["count"])
        assert [dataclasses.asdict(top) | {"keys": [dataclasses.asdict(k) for k in top.keys]} for top in merged] == (
            case["expected"]
        ), case["name"]
        for top in merged:
            assert top.bound <= top.bound_limit
            for listed in top.keys:
                assert listed.count - listed.lower <= top.bound


def test_a_report_is_stored_byte_for_byte_as_the_rust_client_stores_it(vectors: dict[str, Any]) -> None:
    written_by_rust = [value for value in vectors["stored"]["fleet"] if '"client":"rust"' in value]
    assert len(written_by_rust) >= 12
    for value in [*written_by_rust, *vectors["stored"]["unit"]]:
        assert Report.decode(value).encode() == value


def test_keys_and_fields_are_as_documented() -> None:
    assert bucket_of(1_700_000_059) == 1_700_000_040
    assert key(1_700_000_040) == "rl:top:{rl-top}:v1:1700000040"
    assert window_keys(1_700_000_059, 2) == ["rl:top:{rl-top}:v1:1700000040", "rl:top:{rl-top}:v1:1699999980"]
    assert window_keys(59, 3) == ["rl:top:{rl-top}:v1:0"], "none before the epoch"
    # The policy's length in bytes keeps "a:b" + "c" apart from "a" + "b:c".
    assert field_of("r", "a:b", "c") != field_of("r", "a", "b:c")
    assert field_of("ab12", "api", "per-minute") == "ab12:3:api:per-minute"
    assert field_of("ab12", "é", "x") == "ab12:2:é:x"


def test_bad_values_are_refused_with_their_reason() -> None:
    newer = (
        '{"v":1,"policy":"p","limit":"l","replica":"r","capacity":1,"denials":1,"floor":0,'
        '"keys":[["k",1,0]],"extra":true}'
    )
    assert Report.decode(newer).client == "", "a member it does not know is ignored; no client is empty"
    head = '{"v":1,"policy":"p","limit":"l","replica":"r","capacity":1,'
    for value, reason in [
        ('{"v":2}', "version 2"),
        ("not json", "not a top-keys report"),
        ("[1]", "not a JSON object"),
        (head + '"denials":2,"floor":1,"keys":[["a",1,0],["b",1,0]]}', "2 keys in a summary of 1"),
        (head + '"denials":2,"floor":1,"keys":[["a",1,2]]}', "error 2 above its count 1"),
        (head + '"denials":-1,"floor":0,"keys":[]}', "'denials'"),
        (head + '"denials":1,"floor":0,"keys":[["a",1]]}', "[key, count, error]"),
    ]:
        with pytest.raises(ReportError, match=reason.replace("[", r"\[").replace("]", r"\]")):
            Report.decode(value)


def test_long_keys_are_cut_at_a_character_boundary() -> None:
    long = "é" * 200
    cut = bounded(long)
    assert MAX_KEY_BYTES - 1 <= len(cut.encode()) <= MAX_KEY_BYTES
    assert long.startswith(cut)
    assert bounded("short") == "short"


def test_a_report_writes_what_changed_in_its_minute() -> None:
    recorder = Recorder(TopKeys(capacity=2, max_summaries=2, retention=600))
    start = 1_800_000_000  # a minute's start
    for denied in ["a", "a", "b", "c"]:
        recorder.denied("api", "per-minute", denied, start + 5)
    writes = recorder.report(start + 6)
    assert len(writes) == 1
    write = writes[0]
    assert write.key == f"rl:top:{{rl-top}}:v1:{start}"
    assert write.expire_at_ms == (start + 60 + 600) * 1000
    assert len(write.fields) == 1
    field, value = write.fields[0]
    assert field == f"{recorder.replica}:3:api:per-minute" and len(recorder.replica) == 32
    stored = Report.decode(value)
    assert (stored.denials, stored.capacity, stored.floor, stored.client) == (4, 2, 2, "python")
    assert stored.keys[0] == ("a", 2, 0)
    assert recorder.report(start + 7) == [], "nothing changed: nothing written"
    # A denial past the minute's end: written in the old minute, then the summary starts
    # the new one (and goes, empty).
    recorder.denied("api", "per-minute", "a", start + 60)
    assert recorder.report(start + 61)[0].key == f"rl:top:{{rl-top}}:v1:{start}"
    assert recorder.report(start + 62) == []
    recorder.denied("api", "per-minute", "d", start + 63)
    assert recorder.report(start + 64)[0].key == f"rl:top:{{rl-top}}:v1:{start + 60}"


def test_past_max_summaries_denials_are_dropped_and_counted() -> None:
    recorder = Recorder(TopKeys(capacity=2, max_summaries=2))
    for limit in ["a", "b", "c"]:
        recorder.denied("api", limit, "k", 1_800_000_000)
    assert recorder.dropped == 1
    assert len(recorder.report(1_800_000_001)[0].fields) == 2
    recorder.unwritten()
    assert len(recorder.report(1_800_000_002)[0].fields) == 2, "a failed write: written whole again"


def test_queries_and_options_out_of_bounds_are_refused() -> None:
    assert TopQuery("api") == TopQuery("api", None, 5, 10)
    for bad, reason in [
        (lambda: TopQuery(""), "the policy is empty"),
        (lambda: TopQuery("api", minutes=0), "minutes must be a whole number from 1 to 1440"),
        (lambda: TopQuery("api", count=1001), "count must be a whole number from 1 to 1000"),
        (lambda: TopKeys(capacity=0), "capacity"),
        (lambda: TopKeys(report_every=0), "report_every"),
    ]:
        with pytest.raises(TopError, match=reason):
            bad()


def test_labels_past_their_bound_are_other() -> None:
    given = Given(2)
    assert [given.label(f"l{index}") for index in range(3)] == ["l0", "l1", OTHER]
    assert given.label("l0") == "l0" and len(given) == 2
    labels = PolicyLabels()
    classes = [labels.of("per-minute", f"plan{index}")[1] for index in range(MAX_CLASS_LABELS + 2)]
    assert classes[MAX_CLASS_LABELS - 1] == f"plan{MAX_CLASS_LABELS - 1}"
    assert classes[MAX_CLASS_LABELS:] == [OTHER, OTHER]
    assert labels.of("_none", "plan0") == ("_none", "plan0")


def test_a_limit_is_near_under_its_share() -> None:
    assert near(1, 10, 0.2)
    assert not near(2, 10, 0.2)
    assert not near(0, 0, 0.2)
    assert near(0, 10, 0.01)
    assert not near(0, 10, 0.0)


def test_a_reporter_stops_once_its_limiter_is_gone() -> None:
    """As the Rust reporter holds its recorder weakly: a limiter dropped without ``close``
    leaves no thread (nor task) reporting forever."""
    limiter = SyncRateLimiter(MemoryStore(), POLICIES, top_keys=TopKeys(report_every=0.01))
    assert limiter.check("api", key="a").allowed
    reporter = limiter._reporter
    assert reporter is not None and reporter._thread is not None
    thread = reporter._thread
    assert thread.is_alive()
    del limiter
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()

    async def scenario() -> asyncio.Task[None]:
        limiter = RateLimiter(MemoryStore(), POLICIES, top_keys=TopKeys(report_every=0.01))
        await limiter.check("api", key="a")
        assert limiter._reporter is not None and limiter._reporter._task is not None
        task = limiter._reporter._task
        del limiter
        gc.collect()
        await asyncio.wait_for(task, timeout=5)
        return task

    assert asyncio.run(scenario()).done()
