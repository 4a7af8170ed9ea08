"""Prometheus's HTTP API, as much as the live test reads: instant and range queries, label
values, alerts and targets. Standard library only."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from processes import HarnessError

QUERY_TIMEOUT_S = 10


@dataclass(frozen=True)
class Series:
    """One series of a query's answer: its labels and its values (one for an instant query)."""

    labels: dict[str, str]
    points: list[tuple[float, float]]

    def finite(self) -> bool:
        return any(math.isfinite(value) for _, value in self.points)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str, parameters: list[tuple[str, str]]) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(parameters)}"
        try:
            with urllib.request.urlopen(address, timeout=QUERY_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            raise HarnessError(f"Prometheus refused {path} {parameters}: {error.code} {detail}") from None
        if answer.get("status") != "success":
            raise HarnessError(f"Prometheus answered {path} {parameters} with {answer}")
        return answer["data"]

    def query(self, expression: str) -> list[Series]:
        """`expression` evaluated now; a scalar answer is one series without labels."""
        data = self._get("/api/v1/query", [("query", expression)])
        if data["resultType"] in ("scalar", "string"):
            return [Series({}, [(float(data["result"][0]), float(data["result"][1]))])]
        return [Series(item["metric"], [(float(item["value"][0]), float(item["value"][1]))]) for item in data["result"]]

    def query_range(self, expression: str, start_s: float, end_s: float, step_s: float) -> list[Series]:
        data = self._get(
            "/api/v1/query_range",
            [("query", expression), ("start", f"{start_s:.3f}"), ("end", f"{end_s:.3f}"), ("step", f"{step_s:g}")],
        )
        return [
            Series(item["metric"], [(float(time), float(value)) for time, value in item["values"]])
            for item in data["result"]
        ]

    def label_values(self, label: str, selector: str) -> list[str]:
        values: list[str] = self._get(f"/api/v1/label/{label}/values", [("match[]", selector)])
        return values

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self._get("/api/v1/alerts", [])["alerts"]
        return alerts

    def targets_up(self) -> dict[str, str]:
        """Each active target's scrape URL and its health (up, down, unknown)."""
        targets = self._get("/api/v1/targets", [("state", "active")])["activeTargets"]
        return {target["scrapeUrl"]: target["health"] for target in targets}

    def rule_health(self) -> dict[str, str]:
        """Each rule's name and its last evaluation's health (ok, err, unknown)."""
        groups = self._get("/api/v1/rules", [])["groups"]
        return {rule["name"]: rule["health"] for group in groups for rule in group["rules"]}
