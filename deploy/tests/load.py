"""The live test's load: paced HTTP checks on the service (`POST /v1/check`, by tenant or by
client address) and the demo service (`GET /`, by tenant). Keys are drawn from a Zipf law
(a few tenants run past their limits: concentrated denials) or uniformly (many addresses
each a little past theirs: spread denials). Each worker is bounded in requests and in time,
and stops when told."""

from __future__ import annotations

import http.client
import itertools
import json
import random
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

# The hardest bound on one worker, whatever the caller asks.
MAX_REQUESTS_PER_WORKER = 100_000


class Kind(Enum):
    """What a check carries: the service's `tenant` or `remote_address` descriptor, or the
    demo's `x-tenant` header."""

    SERVICE_TENANT = "service tenant"
    SERVICE_ADDRESS = "service address"
    DEMO = "demo"


@dataclass(frozen=True)
class Target:
    """Where a worker sends its checks, with which keys, how skewed and how fast."""

    kind: Kind
    base_url: str
    keys: list[str]
    per_second: float
    # The Zipf exponent of the keys' popularity (the first key the most popular); 0: uniform.
    skew: float


@dataclass
class Tally:
    """Answers seen, by target kind and what they said (allowed, denied, or the failure)."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str) -> None:
        with self.lock:
            self.counts[outcome] += 1


def _service_check(connection: http.client.HTTPConnection, key: str, descriptor: str) -> str:
    body = json.dumps({"domain": "api", "descriptors": [{"entries": [{"key": descriptor, "value": key}]}]})
    connection.request("POST", "/v1/check", body, {"content-type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read() or b"{}")
    if "allowed" not in answer:
        return f"http {response.status}"
    return "allowed" if answer["allowed"] else "denied"


def _demo_check(connection: http.client.HTTPConnection, tenant: str) -> str:
    # With --plans the demo limits by the tenant's plan, keyed by the tenant.
    connection.request("GET", "/", headers={"x-api-key": tenant, "x-tenant": tenant})
    response = connection.getresponse()
    response.read()
    return {200: "allowed", 429: "denied"}.get(response.status, f"http {response.status}")


def _check(connection: http.client.HTTPConnection, kind: Kind, key: str) -> str:
    if kind is Kind.SERVICE_TENANT:
        return _service_check(connection, key, "tenant")
    if kind is Kind.SERVICE_ADDRESS:
        return _service_check(connection, key, "remote_address")
    return _demo_check(connection, key)


def _worker(target: Target, seed: int, stop: threading.Event, deadline: float, tally: Tally) -> None:
    chooser = random.Random(seed)
    weights = list(itertools.accumulate(1 / rank**target.skew for rank in range(1, len(target.keys) + 1)))
    host = urllib.parse.urlsplit(target.base_url)
    connection = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=5)
    period_s = 1 / target.per_second
    next_at = time.monotonic()
    for _ in range(MAX_REQUESTS_PER_WORKER):
        if stop.is_set() or time.monotonic() >= deadline:
            break
        key = chooser.choices(target.keys, cum_weights=weights)[0]
        try:
            outcome = _check(connection, target.kind, key)
        except (OSError, http.client.HTTPException, ValueError) as error:
            outcome = type(error).__name__
            connection.close()
        tally.add(f"{target.kind.value} {outcome}")
        # Pacing, not waiting for a condition: the next check's slot in the target rate.
        next_at += period_s
        stop.wait(max(0.0, next_at - time.monotonic()))
    connection.close()


class Load:
    """Workers sending paced checks until `stop()` or `longest_s`."""

    def __init__(self, targets: list[Target], workers_per_target: int, longest_s: float) -> None:
        self.stop_event = threading.Event()
        self.tally = Tally()
        deadline = time.monotonic() + longest_s
        self.threads = [
            threading.Thread(
                target=_worker,
                args=(
                    Target(
                        target.kind,
                        target.base_url,
                        target.keys,
                        target.per_second / workers_per_target,
                        target.skew,
                    ),
                    index * 1_000 + worker,
                    self.stop_event,
                    deadline,
                    self.tally,
                ),
                name=f"load-{target.kind.name}-{index}-{worker}",
                daemon=True,
            )
            for index, target in enumerate(targets)
            for worker in range(workers_per_target)
        ]
        for thread in self.threads:
            thread.start()

    def stop(self) -> dict[str, int]:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=10)
        return dict(sorted(self.tally.counts.items()))
