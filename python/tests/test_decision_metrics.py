"""The decision metrics on a real server, with the Rust client's names, labels and meanings
(``docs/operating.md``): decisions and units by the binding limit and the class of its keys,
the near-limit count, each limit's quota and window, the fallback in use, the store latency
in the service's buckets; a store-backed policy's class is the tenant's plan, ``override`` or
``default``."""

from __future__ import annotations

import asyncio
import gc

import redis.asyncio as aredis
from prometheus_client import CollectorRegistry

from operating import Outage, samples
from redis_ratelimit_client import Limit, Policy, PrometheusMetrics, RateLimiter, RedisStore
from redis_ratelimit_client.metrics import STORE_LATENCY_BUCKETS
from redis_ratelimit_client.plans import PlanSource
from servers import Server
from test_plans import rlctl


def test_metrics_name_the_limit_its_key_class_and_its_quota(module_server: Server) -> None:
    registry = CollectorRegistry()

    async def scenario() -> None:
        store = Outage(RedisStore(aredis.Redis(port=module_server.port)))
        api = Policy(
            "api",
            [
                Limit.fixed_window("per-minute", 5, 60, key="m:{user}"),
                Limit.fixed_window("per-hour", 100, 3600, key="h:{user}"),
            ],
            key_class="user",
            timeout=5,
        )
        per_user = Limit.fixed_window("per-user", 10, 60, key="c:{user}")
        closed = Policy("closed", [per_user], fallback="closed", timeout=5)
        limiter = RateLimiter(store, [api, closed], metrics=PrometheusMetrics(registry))
        decisions = [await limiter.check("api", user="ann") for _ in range(7)]
        assert [(d.allowed, d.source) for d in decisions] == [(True, "store")] * 5 + [
            (False, "store"),
            (False, "cache"),
        ]
        store.down = True
        denied = await limiter.check("closed", user="bob")
        assert not denied.allowed and not denied.limits

    asyncio.run(scenario())
    seen = samples(registry)

    def get(name: str) -> float:
        return seen.get(name, -1.0)

    of = "policy=api,limit={},key_class=user"
    minute, hour = of.format("per-minute"), of.format("per-hour")
    # Admitted: bound by the limit closest to running out; the 6th denied by per-minute, the
    # 7th from the deny cache.
    assert get(f"ratelimit_decisions_total{{{minute},outcome=allowed,source=store,backend=module}}") == 5
    assert get(f"ratelimit_decisions_total{{{minute},outcome=denied,source=store,backend=module}}") == 1
    assert get(f"ratelimit_decisions_total{{{minute},outcome=denied,source=cache,backend=module}}") == 1
    assert get(f"ratelimit_decision_units_total{{{minute},outcome=allowed,source=store}}") == 5
    assert get(f"ratelimit_decision_units_total{{{minute},outcome=denied,source=cache}}") == 1
    # Under 20 % of 5 left (0 units) once; per-hour never near.
    assert get(f"ratelimit_near_limit_total{{{minute}}}") == 1
    assert get(f"ratelimit_near_limit_total{{{hour}}}") == -1
    assert get(f"ratelimit_limit_quota{{{minute}}}") == 5
    assert get(f"ratelimit_limit_window_seconds{{{minute}}}") == 60
    assert get(f"ratelimit_limit_quota{{{hour}}}") == 100
    assert get(f"ratelimit_limit_window_seconds{{{hour}}}") == 3600
    assert get("ratelimit_fallback_mode{policy=api,mode=local}") == 1
    assert get("ratelimit_fallback_mode{policy=api,mode=open}") == 0
    assert get("ratelimit_fallback_mode{policy=closed,mode=closed}") == 1
    # A blanket fallback consulted no limit.
    assert (
        get(
            "ratelimit_decisions_total{policy=closed,limit=_none,key_class=default,"
            "outcome=fallback_denied,source=fallback,backend=none}"
        )
        == 1
    )
    # The store latency in the service's buckets, so quantiles aggregate across languages.
    buckets = sorted(
        float(name.split("le=")[1].rstrip("}"))
        for name in seen
        if name.startswith("ratelimit_store_latency_seconds_bucket{policy=api,op=acquire,")
    )
    assert buckets == [*STORE_LATENCY_BUCKETS, float("inf")]
    # Six checks called the store (the first, before the backend was known, once per limit).
    assert get("ratelimit_store_latency_seconds_count{policy=api,op=acquire}") == 7
    assert STORE_LATENCY_BUCKETS == (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
    # Nothing is labelled by a key.
    assert not [name for name in seen if "ann" in name or "bob" in name]


def test_a_store_backed_policy_labels_its_keys_by_the_tenants_plan(module_server: Server) -> None:
    rlctl(module_server, "plan", "set", "pro", "--limit", "per-minute=sliding:5/60s")
    rlctl(module_server, "tenant", "set", "acme", "--plan", "pro")
    rlctl(module_server, "override", "set", "vip", "per-minute=sliding:50/60s")
    registry = CollectorRegistry()

    async def scenario() -> None:
        client = aredis.Redis(port=module_server.port)
        metrics = PrometheusMetrics(registry)
        plans = await PlanSource(client, metrics=metrics).start()
        policy = Policy.from_store(
            "api", tenant="tenant", defaults=[Limit.sliding_window("per-minute", 100, 60, key="-")], timeout=5
        )
        limiter = RateLimiter(client, [policy], plans=plans, metrics=metrics)
        for tenant in ("acme", "vip", "nobody"):
            assert (await limiter.check("api", tenant=tenant)).allowed
        await plans.aclose()

    asyncio.run(scenario())
    seen = samples(registry)
    for key_class in ("pro", "override", "default"):
        name = (
            f"ratelimit_decisions_total{{policy=api,limit=per-minute,key_class={key_class},"
            "outcome=allowed,source=store,backend=module}"
        )
        assert seen.get(name) == 1, (key_class, sorted(n for n in seen if n.startswith("ratelimit_decisions")))
    assert seen.get("ratelimit_limit_quota{policy=api,limit=per-minute,key_class=pro}") == 5
    assert seen.get("ratelimit_limit_quota{policy=api,limit=per-minute,key_class=default}") == 100
    # An override's quota is one tenant's: no gauge of it.
    assert "ratelimit_limit_quota{policy=api,limit=per-minute,key_class=override}" not in seen
    assert not [name for name in seen if "acme" in name or "vip" in name or "nobody" in name]


def test_each_registry_gets_its_own_metrics_after_another_was_collected() -> None:
    # A registry made after another was garbage-collected often takes its id(): the metrics
    # must still be counted into the new registry (CI once saw an empty one).
    for attempt in range(50):
        registry = CollectorRegistry()
        PrometheusMetrics(registry).circuit_opened()
        assert samples(registry).get("ratelimit_circuit_opened_total{}") == 1, attempt
        del registry
        gc.collect()
