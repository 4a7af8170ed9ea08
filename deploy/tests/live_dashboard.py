"""The dashboard and the rules against a real Prometheus (make ops-test runs it).

Starts, on loopback ports in a temporary directory: Redis with the module, the policy store
filled by rlctl, the rate-limit service (a config of two limits, one from the tenants'
plans), two replicas of the client library's demo service (limits from the plans), and
Prometheus scraping the three every second with deploy/prometheus/rules.yml. Then:

1. about 30 s of load, a config change the service accepts during it; then the article's
   diagnosis: the tenants' denials (Zipf(1.1) keys: a few tenants past their limits) must
   read as concentrated, the client addresses' (uniform: each a little past its limit) as
   spread, RateLimitDenialsSpread pending for that limit alone;
2. a config change the service refuses: RateLimitConfigReloadFailing must go pending
   (then the good config is put back);
3. Redis stopped, the load going on: RateLimitStoreUnreachable must go pending for every
   scraped process, and the fallback come to decide over 90 % of each policy's checks;
4. every query of every panel of deploy/grafana/dashboard.json, its variables resolved as
   Grafana would (label_values through Prometheus, every value selected), must return at
   least one finite value, and every recording rule must record and evaluate cleanly.

Every process is stopped by its pid when the run ends, however it ends; the directory is
removed. `--plot PNG` also draws every panel's queries over the run (needs matplotlib).
Nothing waits a fixed time but the load period itself: everything else is polled."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dashboard_queries
from load import Kind, Load, Target
from processes import (
    Fleet,
    HarnessError,
    Process,
    run_rlctl,
    start_demo,
    start_prometheus,
    start_redis,
    start_service,
    wait_for,
)
from prometheus_api import Prometheus

REPOSITORY = Path(__file__).resolve().parents[2]
RULES = REPOSITORY / "deploy" / "prometheus" / "rules.yml"
DASHBOARD = REPOSITORY / "deploy" / "grafana" / "dashboard.json"

# How long each polled condition may take once its cause is in place: a scrape (1 s), a rule
# evaluation (1 s), the service's config watch (0.1 s, twice), the breaker's three failed
# calls; generous for a loaded 2-core machine.
CONDITION_TIMEOUT_S = 60.0

SERVICE_CONFIG = """\
domain: api
descriptors:
  # Each tenant: 5 a second by default, its plan's limit if it has one (rlctl below).
  - key: tenant
    rate_limit:
      {{unit: second, requests_per_unit: {per_tenant}, name: per-tenant, algorithm: sliding_window, tenant_key: tenant}}
  # Each client address: 5 a minute (the load sends each of 60 addresses one a second,
  # so their denials are spread: the top 10 take about a sixth).
  - key: remote_address
    rate_limit: {{unit: minute, requests_per_unit: 5, name: per-ip, algorithm: sliding_window}}
"""

# Not YAML a config can be: the service refuses it and keeps the config it has.
REFUSED_CONFIG = "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: fortnight}\n"

PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: rls
    static_configs:
      - targets: ['{service}']
  - job_name: demo
    static_configs:
      - targets: [{demos}]
"""

TENANTS = [f"t{rank:02d}" for rank in range(40)]
ADDRESSES = [f"10.0.0.{host}" for host in range(1, 61)]
ZIPF_S = 1.1
# The two most active tenants are on the plan "pro" (20 a second on the service, 100 a
# minute on the demo); one more on "free". The rest have the defaults.
PLANS = {"pro": ["t00", "t01"], "free": ["t05"]}


def write_atomically(directory: Path, name: str, text: str) -> None:
    """As the service's README asks: written beside, then renamed over."""
    partial = directory / f".{name}.partial"
    partial.write_text(text)
    partial.rename(directory / name)


def fill_policy_store(rlctl: Path, redis_url: str) -> None:
    run_rlctl(
        rlctl, redis_url, "plan", "set", "pro", "--limit", "per-tenant=sliding:20/1s", "--limit", "per-key=token:100/1m"
    )
    run_rlctl(
        rlctl, redis_url, "plan", "set", "free", "--limit", "per-tenant=sliding:2/1s", "--limit", "per-key=token:10/1m"
    )
    for plan, tenants in PLANS.items():
        for tenant in tenants:
            run_rlctl(rlctl, redis_url, "tenant", "set", tenant, "--plan", plan)


def alert_states(prometheus: Prometheus, name: str, by: tuple[str, str]) -> dict[str, str]:
    """The alert's instances, named by the two labels `by` ("job/instance" say), and their
    states (pending, firing)."""
    return {
        "/".join(alert["labels"].get(label, "") for label in by): alert["state"]
        for alert in prometheus.alerts()
        if alert["labels"].get("alertname") == name
    }


def wait_for_alert(
    prometheus: Prometheus, name: str, instances: list[str], by: tuple[str, str] = ("job", "instance")
) -> dict[str, str]:
    """Polls until `name` is pending (or already firing) for each of `instances`."""
    states: dict[str, str] = {}

    def raised() -> bool:
        states.clear()
        states.update(alert_states(prometheus, name, by))
        return all(states.get(instance) in ("pending", "firing") for instance in instances)

    try:
        wait_for(f"alert {name} pending for {instances}", raised, CONDITION_TIMEOUT_S)
    except HarnessError as error:
        raise HarnessError(f"{error}; its states: {states or 'none'}") from None
    return dict(states)


def wait_for_fallback(prometheus: Prometheus, stopped_s: float) -> str:
    """With Redis stopped, the fallback must come to decide nearly every check of every
    policy (the dashboard's fallback panels then show the outage, not only its start)."""
    share = (
        'sum by (policy) (rate(ratelimit_decisions_total{source="fallback"}[5s]))'
        " / sum by (policy) (rate(ratelimit_decisions_total[5s]))"
    )
    seen: dict[str, float] = {}

    def fallback_decides() -> bool:
        seen.clear()
        seen.update({one.labels.get("policy", ""): one.points[-1][1] for one in prometheus.query(share)})
        return len(seen) == 2 and all(value > 0.9 for value in seen.values())

    try:
        wait_for("the fallback deciding over 90 % of each policy's checks", fallback_decides, CONDITION_TIMEOUT_S)
    except HarnessError as error:
        raise HarnessError(f"{error}; fallback shares: {seen}") from None
    shares = ", ".join(f"{policy} {value:.0%}" for policy, value in sorted(seen.items()))
    return f"Redis stopped: the fallback decides {shares} of the checks {time.time() - stopped_s:.1f} s after"


def check_panels(prometheus: Prometheus, dashboard: dict[str, Any]) -> list[str]:
    """Polls every panel query until each returns a finite value; fails naming those that
    never do. Returns one line per query: panel, refId, series count."""
    values = dashboard_queries.resolve_variables(dashboard, prometheus)
    queries = dashboard_queries.queries(dashboard, values)
    answered: dict[tuple[int, str], int] = {}
    missing: list[dashboard_queries.PanelQuery] = []

    def all_answer() -> bool:
        missing.clear()
        for query in queries:
            if (query.panel_id, query.ref_id) in answered:
                continue
            series = prometheus.query(query.expression)
            if any(one.finite() for one in series):
                answered[(query.panel_id, query.ref_id)] = len(series)
            else:
                missing.append(query)
        return not missing

    try:
        wait_for("every panel query returning data", all_answer, CONDITION_TIMEOUT_S)
    except HarnessError:
        lines = [f"  panel {q.panel_id} {q.panel_title!r} {q.ref_id}: {q.expression}" for q in missing]
        raise HarnessError("panel queries that returned no data:\n" + "\n".join(lines)) from None
    return [f"  {q.panel_title} [{q.ref_id}]: {answered[(q.panel_id, q.ref_id)]} series" for q in queries] + [
        f"  variables: {', '.join(f'${k}={v}' for k, v in values.items() if not k.startswith('__'))}"
    ]


def check_recording_rules(prometheus: Prometheus) -> list[str]:
    """Every recording rule has recorded a series and every rule evaluates without error."""
    names = [
        line.split(":", 1)[1].strip() for line in RULES.read_text().splitlines() if line.strip().startswith("- record:")
    ]
    recorded: dict[str, int] = {}

    def all_recorded() -> bool:
        for name in names:
            if name not in recorded and prometheus.query(name):
                recorded[name] = len(prometheus.query(name))
        return len(recorded) == len(names)

    try:
        wait_for("every recording rule recording", all_recorded, CONDITION_TIMEOUT_S)
    except HarnessError:
        raise HarnessError(f"recording rules that recorded nothing: {sorted(set(names) - set(recorded))}") from None
    broken = {name: health for name, health in prometheus.rule_health().items() if health == "err"}
    if broken:
        raise HarnessError(f"rules whose evaluation fails: {broken}")
    return [f"  {name}: {count} series" for name, count in recorded.items()]


def check_spread(prometheus: Prometheus) -> list[str]:
    """The article's diagnosis on the load's two shapes (the dashboard's first panel): the
    tenants' denials (Zipf) concentrated, the top 10 taking most; the addresses' (uniform
    over 60) spread, RateLimitDenialsSpread pending for api/per-ip and for no other limit."""
    states = wait_for_alert(prometheus, "RateLimitDenialsSpread", ["api/per-ip"], by=("policy", "limit"))
    if set(states) != {"api/per-ip"}:
        raise HarnessError(f"RateLimitDenialsSpread raised for a limit whose denials are concentrated: {states}")
    shares = {
        f"{one.labels['policy']}/{one.labels['limit']}": one.points[-1][1]
        for one in prometheus.query("max by (policy, limit) (ratelimit_denied_top10_share)")
    }
    denials = {
        f"{one.labels['policy']}/{one.labels['limit']}": one.points[-1][1]
        for one in prometheus.query("max by (policy, limit) (ratelimit_denied_window)")
    }
    if not shares.get("api/per-tenant", 0) > 0.5:
        raise HarnessError(f"api/per-tenant: the top 10 keys' share of the denials is not most: {shares}")
    return [f"concentration: RateLimitDenialsSpread {states}"] + [
        f"  {limit}: top 10 keys took {share:.0%} of {denials.get(limit, 0):.0f} denials"
        for limit, share in sorted(shares.items())
    ]


def run(args: argparse.Namespace, directory: Path) -> None:
    dashboard = dashboard_queries.load(args.dashboard)
    dashboard_queries.check_structure(dashboard)
    report: list[str] = []
    with Fleet(directory) as fleet:
        redis, redis_port = start_redis(fleet, args.module)
        redis_url = f"redis://127.0.0.1:{redis_port}/"
        fill_policy_store(args.rlctl, redis_url)
        config = directory / "config"
        config.mkdir()
        write_atomically(config, "api.yaml", SERVICE_CONFIG.format(per_tenant=5))
        _, service_url = start_service(fleet, args.server, redis_url, config)
        demos = [start_demo(fleet, args.demo, f"demo-{index}", redis_url, 2) for index in range(2)]
        prometheus_config = directory / "prometheus.yml"
        hosts = [url.removeprefix("http://") for url in [service_url] + [url for _, url in demos]]
        prometheus_config.write_text(
            PROMETHEUS_CONFIG.format(rules=args.rules, service=hosts[0], demos=", ".join(f"'{h}'" for h in hosts[1:]))
        )
        _, prometheus_url = start_prometheus(fleet, prometheus_config)
        prometheus = Prometheus(prometheus_url)
        wait_for(
            "Prometheus scraping the service and both demo replicas",
            lambda: list(prometheus.targets_up().values()).count("up") == 3,
            CONDITION_TIMEOUT_S,
        )
        started_s = time.time()
        load = Load(
            [
                Target(Kind.SERVICE_TENANT, service_url, TENANTS, per_second=100, skew=ZIPF_S),
                Target(Kind.SERVICE_ADDRESS, service_url, ADDRESSES, per_second=60, skew=0),
                Target(Kind.DEMO, demos[0][1], TENANTS, per_second=40, skew=ZIPF_S),
                Target(Kind.DEMO, demos[1][1], TENANTS, per_second=40, skew=ZIPF_S),
            ],
            workers_per_target=2,
            longest_s=args.load_seconds + 6 * CONDITION_TIMEOUT_S,
        )
        try:
            # A change the service takes (the default per-tenant limit 5 -> 6 a second).
            write_atomically(config, "api.yaml", SERVICE_CONFIG.format(per_tenant=6))
            # The load period: the one fixed wait of the test (the dashboard's rates and the
            # concentration gauges need this much traffic behind them).
            time.sleep(args.load_seconds)
            report.extend(check_spread(prometheus))

            refused_s = time.time()
            write_atomically(config, "api.yaml", REFUSED_CONFIG)
            states = wait_for_alert(prometheus, "RateLimitConfigReloadFailing", [f"rls/{hosts[0]}"])
            report.append(f"config refused: RateLimitConfigReloadFailing {states}")
            write_atomically(config, "api.yaml", SERVICE_CONFIG.format(per_tenant=6))
            wait_for(
                "the service back on a valid config",
                lambda: any(s.points[-1][1] == 1 for s in prometheus.query('ratelimit_config_valid{job="rls"}')),
                CONDITION_TIMEOUT_S,
            )

            stopped_s = time.time()
            stop_redis(redis)
            instances = [f"rls/{hosts[0]}"] + [f"demo/{host}" for host in hosts[1:]]
            states = wait_for_alert(prometheus, "RateLimitStoreUnreachable", instances)
            report.append(f"Redis stopped: RateLimitStoreUnreachable {states} {time.time() - stopped_s:.1f} s after")
            report.append(wait_for_fallback(prometheus, stopped_s))
            report.append("panels (each query returned data):")
            report.extend(check_panels(prometheus, dashboard))
            report.append("recording rules:")
            report.extend(check_recording_rules(prometheus))
        finally:
            tally = load.stop()
        report.append(f"load: {tally}")
        if args.plot is not None:
            import plot  # matplotlib only when a picture is asked for

            plot.draw(
                prometheus,
                dashboard,
                args.plot,
                start_s=started_s,
                end_s=time.time(),
                events={"config refused": refused_s, "Redis stopped": stopped_s},
            )
            report.append(f"plot: {args.plot}")
    print("\n".join(report))


def stop_redis(redis: Process) -> None:
    redis.stop()
    if redis.running():
        raise HarnessError("redis-server did not stop")


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", type=Path, required=True, help="redis-ratelimit-server")
    parser.add_argument("--demo", type=Path, required=True, help="the client's demo-service example")
    parser.add_argument("--rlctl", type=Path, required=True)
    parser.add_argument("--module", type=Path, required=True, help="libredis_ratelimit.so")
    parser.add_argument("--rules", type=Path, default=RULES)
    parser.add_argument("--dashboard", type=Path, default=DASHBOARD)
    parser.add_argument("--load-seconds", type=float, default=30.0)
    parser.add_argument("--plot", type=Path, help="also draw every panel's queries over the run into this PNG")
    args = parser.parse_args(argv)
    for name in ("server", "demo", "rlctl", "module", "rules", "dashboard"):
        setattr(args, name, getattr(args, name).resolve())  # the processes run elsewhere
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    needed = [args.server, args.demo, args.rlctl, args.module, args.rules, args.dashboard]
    missing = [str(path) for path in needed if not path.is_file()]
    missing += [tool for tool in ("prometheus", "redis-server") if shutil.which(tool) is None]
    if missing:
        print(
            f"live dashboard test: missing {', '.join(missing)} (make ops-test builds them; "
            "scripts/prereqs.sh installs prometheus)",
            file=sys.stderr,
        )
        return 1
    directory = Path(tempfile.mkdtemp(prefix="rl-ops-live-"))
    began = time.monotonic()
    try:
        run(args, directory)
    except HarnessError as error:
        print(f"live dashboard test FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"live dashboard test passed in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
