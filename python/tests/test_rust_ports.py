"""The Rust client's fixes, ported: the deny cache takes a new denial in O(log n) at its
100,000 key sets (it rebuilt its whole table for each, 24-54 ms); a tenant value the store
would refuse (``acme per-minute``) gets no plan and no exact override (it got acme's
override of per-minute); a long tenant value costs no more than a short one in the plans
lookup (a 10,000-character value cost len² × overrides, 316-466 ms a check). Pure: no
server needed."""

from __future__ import annotations

import time

from redis_ratelimit_client.decision import Decision, LimitStatus
from redis_ratelimit_client.plans import LimitSpec, Override, Snapshot
from redis_ratelimit_client.state import DenyCache

FULL = 100_000


def denial() -> Decision:
    limit = LimitStatus("per-key", 10, 10, 60_000_000_000, False, False, 0, 60_000, 60_000, 60_000_000_000)
    return Decision(False, "api", "store", "module", "denied", 60_000, [limit])


def test_the_deny_cache_takes_a_new_denial_quickly_at_its_capacity() -> None:
    cache, decision = DenyCache(), denial()
    now = time.monotonic()
    for n in range(FULL):
        cache.insert(f"k{n}", 1, decision, now)
    started = time.perf_counter()
    for n in range(50):
        cache.insert(f"new{n}", 1, decision, now)
    elapsed = time.perf_counter() - started
    # About 50 µs here; the table rebuilt for each took 1.2-2.7 s.
    assert elapsed < 0.25, f"50 new denials at capacity took {elapsed:.3f} s"
    assert cache.get("new49", 1, now) is not None, "the newest denial is remembered"
    assert cache.get("k0", 1, now) is None, "the one remembered longest ago made room"


def spec(text: str) -> LimitSpec:
    return LimitSpec.parse(text)


def store(overrides: dict[str, str]) -> Snapshot:
    return Snapshot.decode(
        3,
        {"pro": "per-minute=sliding:1000/60s per-day=fixed:100000/1d"},
        {"acme": "pro", "acme per-minute": "pro"},
        overrides,
    )


DEFAULTS = (spec("per-minute=sliding:10/60s"),)


def test_a_value_the_store_refuses_as_a_tenant_gets_no_exact_override() -> None:
    snapshot = store({"acme per-minute": "per-minute=sliding:5000/60s", "* per-day": "per-day=fixed:5/1d"})
    assert [str(s) for s in snapshot.resolve("acme", DEFAULTS, 0)] == [
        "per-minute=sliding:5000/1m",
        "per-day=fixed:5/1d",
    ]
    # Not acme's override, not a plan (not even one written by hand for it): the defaults,
    # with the wildcard that covers every value.
    assert [str(s) for s in snapshot.resolve("acme per-minute", DEFAULTS, 0)] == [
        "per-minute=sliding:10/1m",
        "per-day=fixed:5/1d",
    ]
    for refused in ("a{b}", "x*", "", "t" * 257, "caf\u00e9", "tab\there"):
        assert snapshot.resolve(refused, DEFAULTS, 0) == (*DEFAULTS, spec("per-day=fixed:5/1d")), refused


def test_a_long_tenant_value_costs_what_a_short_one_does() -> None:
    overrides = {f"tenant-{n} per-minute": "per-minute=sliding:7/60s" for n in range(300)}
    overrides.update({f"team-{n}-* per-minute": "per-minute=sliding:8/60s" for n in range(300)})
    snapshot = store(overrides)
    tenant = "team-7-" + "x" * 10_000
    started = time.perf_counter()
    for _ in range(20):
        resolved = snapshot.resolve(tenant, DEFAULTS, 0)
    elapsed = time.perf_counter() - started
    assert resolved == (spec("per-minute=sliding:8/60s"),), "the wildcard still applies to it"
    # About 0.1 ms a lookup here; len^2 x overrides took seconds.
    assert elapsed < 0.5, f"20 lookups of a 10,007-character value took {elapsed:.3f} s"


def test_precedence_is_unchanged() -> None:
    snapshot = store(
        {
            "acme-* per-minute": "per-minute=sliding:2000/60s",
            "acme-e* per-minute": "per-minute=sliding:3000/60s",
            "* per-day": "per-day=fixed:5/1d",
            "acme-eu per-day": "per-day=fixed:7/1d",
            "expired*": "expires=1 per-minute=sliding:1/60s",
            "gone": "per-minute=sliding:1/60s",
        }
    )
    resolve = lambda tenant: [str(s) for s in snapshot.resolve(tenant, DEFAULTS, 1_000)]  # noqa: E731
    assert resolve("acme-eu") == ["per-minute=sliding:3000/1m", "per-day=fixed:7/1d"]
    assert resolve("acme") == ["per-minute=sliding:1000/1m", "per-day=fixed:5/1d"]
    assert resolve("acme-us") == ["per-minute=sliding:2000/1m"], "only the longest wildcard applies"
    assert resolve("expired-1") == ["per-minute=sliding:10/1m", "per-day=fixed:5/1d"], "an expired override"
    assert resolve("gone") == ["per-minute=sliding:1/1m"], "a whole-set override replaces the wildcard's too"
    assert isinstance(snapshot.overrides["gone"], Override)
