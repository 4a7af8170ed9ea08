"""The live test's load: paced HTTP checks on the service (`POST /v1/check`) and the demo
service (`GET /`), their keys drawn from a Zipf(1.1) law, so a few tenants run past their
limits (concentrated denials) while the rest stay within them. Each worker is bounded in
requests and in time, and stops when told."""

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

ZIPF_S = 1.1
# The hardest bound on one worker, whatever the caller asks.
MAX_REQUESTS_PER_WORKER = 100_000


def zipf_weights(count: int) -> list[float]:
    return [1 / (rank**ZIPF_S) for rank in range(1, count + 1)]


@dataclass
class Tally:
    """Answers seen, by what they said (allowed, denied, or the failure)."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str) -> None:
        with self.lock:
            self.counts[outcome] += 1


@dataclass(frozen=True)
class Target:
    """Where a worker sends its checks and how it builds one from a key."""

    name: str
    base_url: str
    keys: list[str]
    per_second: float


def _service_check(connection: http.client.HTTPConnection, tenant: str, address: str) -> str:
    body = json.dumps(
        {
            "domain": "api",
            "descriptors": [
                {"entries": [{"key": "tenant", "value": tenant}]},
                {"entries": [{"key": "remote_address", "value": address}]},
            ],
        }
    )
    connection.request("POST", "/v1/check", body, {"content-type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read() or b"{}")
    if response.status != 200 and "allowed" not in answer:
        return f"http {response.status}"
    return "allowed" if answer.get("allowed") else "denied"


def _demo_check(connection: http.client.HTTPConnection, tenant: str) -> str:
    # With --plans the demo limits by the tenant's plan, keyed by the tenant.
    connection.request("GET", "/", headers={"x-api-key": tenant, "x-tenant": tenant})
    response = connection.getresponse()
    response.read()
    return {200: "allowed", 429: "denied"}.get(response.status, f"http {response.status}")


def _worker(target: Target, seed: int, stop: threading.Event, deadline: float, tally: Tally) -> None:
    chooser = random.Random(seed)
    weights = list(itertools.accumulate(zipf_weights(len(target.keys))))
    host = urllib.parse.urlsplit(target.base_url)
    connection = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=5)
    period_s = 1 / target.per_second
    next_at = time.monotonic()
    for _ in range(MAX_REQUESTS_PER_WORKER):
        if stop.is_set() or time.monotonic() >= deadline:
            break
        key = chooser.choices(target.keys, cum_weights=weights)[0]
        try:
            if target.name == "service":
                outcome = _service_check(connection, key, f"10.0.0.{chooser.randrange(16)}")
            else:
                outcome = _demo_check(connection, key)
        except (OSError, http.client.HTTPException, ValueError) as error:
            outcome = type(error).__name__
            connection.close()
        tally.add(f"{target.name} {outcome}")
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
                    Target(target.name, target.base_url, target.keys, target.per_second / workers_per_target),
                    index * 1_000 + worker,
                    self.stop_event,
                    deadline,
                    self.tally,
                ),
                name=f"load-{target.name}-{worker}",
                daemon=True,
            )
            for index, target in enumerate(targets)
            for worker in range(workers_per_target)
        ]
        for thread in self.threads:
            thread.start()

    def stop(self) -> Counter[str]:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=10)
        return self.tally.counts
