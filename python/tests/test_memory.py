"""Memory per distinct key is bounded: every table of per-key-set state (the store's last
answers, remembered denials, leases, the fallback's local states) stays at the limiter's
``max_keys`` with more distinct keys than that, and evicts in the stated order: expired
entries first, then the one answered longest ago (an evicted key set's fallback starts from
a fresh share). On the in-process store: no server needed."""

from __future__ import annotations

import time

from redis_ratelimit_client import Lease, Limit, MemoryStore, Policy, SyncRateLimiter
from redis_ratelimit_client.tables import KeyTable

CAP = 1_000
KEYS = 5_000
# 1 a day: a key's second check is denied by the store (and remembered), none refills.
DAILY = [Limit.fixed_window("per-day", 1, 86_400, key="k:{key}")]
# A store call late on a busy machine is not what these tests are about.
TIMEOUT_S = 10


def test_every_per_key_table_stays_at_the_cap() -> None:
    store = MemoryStore()
    limiter = SyncRateLimiter(store, [Policy("api", DAILY, timeout=TIMEOUT_S)], max_keys=CAP)
    state = limiter._states["api"]
    for n in range(KEYS):
        assert limiter.check("api", key=f"u{n}").source == "store"
        assert limiter.check("api", key=f"u{n}").outcome == "denied"
    assert len(state.answers) == CAP, "the store's last answers"
    assert len(state.deny) == CAP, "remembered denials"
    store.down = True
    for n in range(KEYS, 2 * KEYS):
        assert limiter.check("api", key=f"u{n}").source == "fallback"
    assert len(limiter._engine.local) == CAP, "the fallback's local states"
    assert len(state.answers) == CAP, "fallback admissions owed to the store"
    limiter.close()


def test_leases_stop_at_the_cap_and_the_rest_ask_the_store() -> None:
    policy = Policy(
        "api",
        [Limit.token_bucket("per-key", 100, refill=60, key="k:{key}")],
        lease=Lease(10, lifetime=60),
        timeout=TIMEOUT_S,
    )
    limiter = SyncRateLimiter(MemoryStore(), [policy], max_keys=CAP)
    seconds = []
    for n in range(KEYS):
        limiter.check("api", key=f"u{n}")  # claims a lease, while there is room
        seconds.append(limiter.check("api", key=f"u{n}").source)
    assert len(limiter._states["api"].leases) == CAP
    assert seconds.count("lease") == CAP and seconds.count("store") == KEYS - CAP
    limiter.close()


def test_the_eviction_order_is_expired_first_then_answered_longest_ago() -> None:
    table: KeyTable[str] = KeyTable(3)
    table.put("a", "a", 100, 0)
    table.put("b", "b", 100, 0)
    table.put("c", "c", 5, 0)
    table.put("d", "d", 100, 6)
    assert list(table.keys()) == ["a", "b", "d"], "c had expired: it goes before a, written first"
    table.put("a", "a again", 100, 6)
    table.put("e", "e", 100, 6)
    assert list(table.keys()) == ["d", "a", "e"], "b, answered longest ago (a was answered again)"
    assert table.get("a") == "a again" and table.get("b") is None


def test_a_table_expiring_in_write_order_drops_its_oldest_first() -> None:
    table: KeyTable[str] = KeyTable(3, expiry_in_write_order=True)
    for key, expires in (("a", 10), ("b", 20), ("c", 30)):
        table.put(key, key, expires, 0)
    assert table.expire(20) == 2 and list(table.keys()) == ["c"]
    table.put("x", "x", 5, 20)
    assert table.expires("x") == 30, "never before an entry written earlier"
    assert table.expire(29) == 0 and table.expire(30) == 2 and len(table) == 0


def test_an_evicted_key_set_falls_back_from_a_fresh_share() -> None:
    store = MemoryStore()
    limiter = SyncRateLimiter(store, [Policy("api", DAILY, timeout=TIMEOUT_S)], max_keys=CAP)
    for n in range(CAP + 1):
        limiter.check("api", key=f"u{n}")
        limiter.check("api", key=f"u{n}")
    store.down = True
    # u0 was answered longest ago: evicted, its fallback starts from a fresh share (1 of 1).
    # u1's exhausted answer is kept: its fallback continues from it and denies.
    assert limiter.check("api", key="u0").allowed
    assert not limiter.check("api", key="u1").allowed
    limiter.close()


def test_the_cap_is_checked() -> None:
    for wrong in (0, -1, 1.5, True):
        try:
            SyncRateLimiter(MemoryStore(), [Policy("api", DAILY, timeout=TIMEOUT_S)], max_keys=wrong)  # type: ignore[arg-type]
        except ValueError as error:
            assert "max_keys" in str(error)
        else:
            raise AssertionError(f"max_keys={wrong!r} was taken")


def test_a_table_at_its_cap_takes_a_new_key_in_log_time() -> None:
    """At 100,000 keys, the old deny cache rebuilt its whole table for each new denial
    (24-54 ms each); here 200 new key sets past the cap take well under a millisecond each."""
    table: KeyTable[int] = KeyTable(100_000)
    for n in range(100_000):
        table.put(f"k{n}", n, 1e9, 0)
    started = time.perf_counter()
    for n in range(200):
        table.put(f"new{n}", n, 1e9, 1)
    elapsed = time.perf_counter() - started
    assert len(table) == 100_000 and "k199" not in table and "k200" in table
    assert elapsed < 0.5, f"200 keys past the cap took {elapsed:.3f} s"
