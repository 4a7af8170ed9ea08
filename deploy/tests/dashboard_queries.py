"""The Grafana dashboard's queries as Grafana would send them: its template variables
resolved through Prometheus (`label_values(...)`, each after the variables it names), every
value selected (a regex of them, as Grafana writes a multi-value variable), and Grafana's
own interval variables. Also checks the JSON's structure Grafana relies on (unique panel
ids and query refIds, a datasource and a grid position on each panel)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processes import HarnessError
from prometheus_api import Prometheus

# What Grafana gives $__rate_interval for a scrape interval of 15 s (4 scrapes), and the
# window the live test's ~30 s of load plus the outage fill.
RATE_INTERVAL = "1m"

LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\)$")
VARIABLE = re.compile(r"\$\{(?P<braced>[a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$(?P<bare>[a-zA-Z_][a-zA-Z0-9_]*)")


@dataclass(frozen=True)
class PanelQuery:
    """One query of one panel, variables substituted."""

    panel_id: int
    panel_title: str
    ref_id: str
    expression: str
    legend: str


def load(path: Path) -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(path.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel but the rows, in the order shown, including those inside collapsed rows."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def check_structure(dashboard: dict[str, Any]) -> None:
    """What Grafana needs of each panel: distinct ids, a grid position inside 24 columns,
    a datasource, and targets with distinct refIds and an expression (text panels none)."""
    problems: list[str] = []
    ids = [panel["id"] for panel in dashboard["panels"]] + [
        inner["id"] for panel in dashboard["panels"] for inner in panel.get("panels", [])
    ]
    if len(ids) != len(set(ids)):
        problems.append(f"panel ids repeat: {sorted(ids)}")
    for panel in panels(dashboard):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(key), int) for key in ("x", "y", "w", "h")) or grid["x"] + grid["w"] > 24:
            problems.append(f"{where}: gridPos {grid} is not within 24 columns")
        if panel["type"] == "text":
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{where}: datasource is not the dashboard's ${{datasource}} variable")
        refs = [target.get("refId") for target in panel.get("targets", [])]
        if not refs or len(refs) != len(set(refs)):
            problems.append(f"{where}: targets' refIds {refs} are missing or repeat")
        for target in panel.get("targets", []):
            if not target.get("expr", "").strip():
                problems.append(f"{where}: target {target.get('refId')} has no expression")
    variables = [variable["name"] for variable in dashboard["templating"]["list"]]
    for wanted in ("datasource", "policy", "limit"):
        if wanted not in variables:
            problems.append(f"the dashboard has no ${wanted} variable")
    if problems:
        raise HarnessError("the dashboard JSON is not what Grafana needs:\n  " + "\n  ".join(problems))


def substitute(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        if name not in values:
            raise HarnessError(f"{text!r} names ${name}, which the dashboard does not define")
        return values[name]

    return VARIABLE.sub(one, text)


def regex_of(values: list[str]) -> str:
    """A multi-value variable as Grafana writes it in a regex matcher: (a|b), escaped."""
    return "(" + "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", value) for value in values) + ")"


def resolve_variables(
    dashboard: dict[str, Any], prometheus: Prometheus, rate_interval: str = RATE_INTERVAL
) -> dict[str, str]:
    """Each query variable's values (all selected), in the dashboard's order, so a variable
    may name those before it; fails naming one whose query finds nothing."""
    values = {"__rate_interval": rate_interval, "__interval": "15s", "datasource": "prometheus"}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = LABEL_VALUES.match(substitute(query, values).strip())
        if match is None:
            raise HarnessError(f"variable ${variable['name']}: {query!r} is not label_values(...)")
        selector = match.group("selector") or "{__name__=~'.+'}"
        found = sorted(prometheus.label_values(match.group("label"), selector))
        if not found:
            raise HarnessError(f"variable ${variable['name']}: {query!r} found no values")
        values[variable["name"]] = regex_of(found)
    return values


def queries(dashboard: dict[str, Any], values: dict[str, str]) -> list[PanelQuery]:
    found = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            found.append(
                PanelQuery(
                    panel["id"],
                    panel["title"],
                    target["refId"],
                    substitute(target["expr"], values),
                    target.get("legendFormat", ""),
                )
            )
    return found
