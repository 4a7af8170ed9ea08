#!/usr/bin/env python3
"""Draws target/bench/chart.png from results.json: CPU per call, and bytes per
call's limiters (one limiter, or the 3 keys of the multi-key rows).

Run by server_bench.py with the venv's python (matplotlib); kept apart so the benchmark
itself needs only the standard library and the report never depends on the chart.
Usage: chart.py results.json chart.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

SCENARIOS = {"hot": "hot key", "random": "random keys", "denied": "hot key, denied"}


def main(results_path: str, chart_path: str) -> None:
    data = json.load(open(results_path))
    summary = data["summary"]
    names = [a["approach"] for a in summary["approaches"]]
    series = sorted({(r["scenario"], r["pipeline"]) for r in summary["rows"]},
                    key=lambda s: (list(SCENARIOS).index(s[0]), s[1]))
    cpu = {(r["scenario"], r["pipeline"], r["approach"]): r["cpu_us"] for r in summary["rows"]}

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 0.55 * len(names) + 2.5),
                                      gridspec_kw={"width_ratios": [3, 2]})
    height = 0.8 / len(series)
    for i, (scenario, pipeline) in enumerate(series):
        y = [n + i * height for n in range(len(names))]
        left.barh(y, [cpu[(scenario, pipeline, name)] for name in names], height,
                  label=f"{SCENARIOS[scenario]}, -P {pipeline}")
    left.set_yticks([n + 0.4 - height / 2 for n in range(len(names))], names)
    left.invert_yaxis()
    left.set_xlabel("server main-thread CPU per call (µs, median of rounds)")
    left.set_title("CPU per call")
    left.legend(fontsize="small")
    left.grid(axis="x", alpha=0.3)

    memory = [a["bytes_per_limiter"] for a in summary["approaches"]]
    bars = right.barh(range(len(names)), memory, color="tab:gray")
    right.bar_label(bars, fmt="%.0f", padding=3, fontsize="small")
    right.set_yticks(range(len(names)), names)
    right.invert_yaxis()
    keys = data["meta"]["keys"]
    right.set_xlabel(f"bytes per call: used_memory growth over {keys:,} calls")
    right.set_title("Memory per call's limiters")
    right.grid(axis="x", alpha=0.3)

    meta = data["meta"]
    fig.suptitle(f"redis-ratelimit server benchmark · {meta['date']} · {meta['commit']} · "
                 f"{meta['rounds']} round(s)", fontsize="medium")
    fig.tight_layout()
    fig.savefig(chart_path, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
