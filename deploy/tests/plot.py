"""A picture of the dashboard: every panel's queries over the live test's run, as
Prometheus returns them, one plot per panel in the dashboard's order (docs/operating.md
shows it). Rates over 10 s here (the checks use 1 m) so the short run shows its changes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display
import matplotlib.pyplot as plt

import dashboard_queries
from prometheus_api import Prometheus, Series

COLUMNS = 4
PLOT_RATE_INTERVAL = "10s"
MOST_SERIES = 6


def legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for name, value in labels.items():
        text = text.replace("{{" + name + "}}", value)
    return text or ", ".join(f"{k}={v}" for k, v in labels.items() if k != "__name__")


def draw(
    prometheus: Prometheus,
    dashboard: dict[str, Any],
    path: Path,
    *,
    start_s: float,
    end_s: float,
    events: dict[str, float],
) -> None:
    values = dashboard_queries.resolve_variables(dashboard, prometheus, PLOT_RATE_INTERVAL)
    queries = dashboard_queries.queries(dashboard, values)
    titles = list(dict.fromkeys(query.panel_title for query in queries))
    panel_bounds = {
        panel["title"]: panel.get("fieldConfig", {}).get("defaults", {})
        for panel in dashboard_queries.panels(dashboard)
    }
    rows = -(-len(titles) // COLUMNS)
    figure, axes = plt.subplots(rows, COLUMNS, figsize=(5 * COLUMNS, 3.1 * rows), squeeze=False)
    for index, title in enumerate(titles):
        ax = axes[index // COLUMNS][index % COLUMNS]
        drawn: list[tuple[str, Series]] = []
        for query in (query for query in queries if query.panel_title == title):
            series = prometheus.query_range(query.expression, start_s, end_s, 1)
            series.sort(key=lambda one: -max((v for _, v in one.points if math.isfinite(v)), default=0))
            drawn += [(legend(query.legend, one.labels), one) for one in series[:MOST_SERIES]]
        for label, one in drawn:
            ax.plot([t - start_s for t, _ in one.points], [v for _, v in one.points], label=label[:40], linewidth=1)
        for name, at_s in events.items():
            ax.axvline(at_s - start_s, color="grey", linestyle=":", linewidth=1)
            ax.annotate(
                name, (at_s - start_s, 1), xycoords=("data", "axes fraction"), fontsize=6, rotation=90, va="top"
            )
        bounds = panel_bounds.get(title, {})
        if "min" in bounds or "max" in bounds:
            # A little over the top, so a line at the maximum (a share of 1) shows.
            top = bounds.get("max")
            ax.set_ylim(bounds.get("min"), None if top is None else top * 1.05)
        ax.set_xlim(0, end_s - start_s)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("s since the load began", fontsize=7)
        if drawn:
            ax.legend(fontsize=6, loc="upper left")
    for index in range(len(titles), rows * COLUMNS):
        axes[index // COLUMNS][index % COLUMNS].axis("off")
    figure.suptitle(
        "redis-ratelimit dashboard: each panel's queries over the live test "
        "(the service and 2 demo replicas; tenants Zipf(1.1), addresses uniform; a refused config; Redis stopped)",
        fontsize=11,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(path, dpi=80)
    plt.close(figure)
