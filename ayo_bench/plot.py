"""Plots of ``ayo compare`` results: latency bars and one query's timeline, stock above Ayo.

    python -m ayo_bench.plot benchmarks/results/advanced_rag.json   # writes advanced_rag.png
    python -m benchmarks.plot benchmarks/results/advanced_rag.json  # the same, from a checkout
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on the benchmark machines
import matplotlib.pyplot as plt  # noqa: E402

STAGE_COLORS = {"llm": "#4c72b0", "embed": "#dd8452", "search": "#55a868", "rerank": "#c44e52",
                "tool": "#8172b3", "other": "#999999"}


def _lanes(spans: list[dict[str, Any]]) -> list[int]:
    """Greedy lane per span so concurrent spans stack instead of hiding each other."""
    ends: list[float] = []
    lanes = []
    for s in spans:
        for i, end in enumerate(ends):
            if s["start"] >= end:
                ends[i] = s["end"]
                lanes.append(i)
                break
        else:
            ends.append(s["end"])
            lanes.append(len(ends) - 1)
    return lanes


def _draw_timeline(ax: Any, rows: list[tuple[str, list[dict[str, Any]], float | None]]) -> None:
    y, ticks, labels = 0.0, [], []
    for title, spans, total in rows:
        spans = sorted(spans, key=lambda s: s["start"])
        lanes = _lanes(spans)
        depth = max(lanes, default=0) + 1
        for s, lane in zip(spans, lanes, strict=True):
            ax.broken_barh([(s["start"], max(s["end"] - s["start"], 1e-3))], (y + lane * 0.8, 0.7),
                           facecolors=STAGE_COLORS.get(s["stage"], STAGE_COLORS["other"]), edgecolor="white", lw=0.3)
        if total is not None:  # end-to-end latency of this row's query, as the caller measured it
            ax.plot([total, total], [y - 0.1, y + depth * 0.8], color="black", lw=1)
            ax.text(total, y + depth * 0.4, f" {total:.2f} s", fontsize=8, va="center")
        ticks.append(y + depth * 0.4)
        labels.append(title)
        y += depth * 0.8 + 1.0
    ax.set_yticks(ticks, labels)
    ax.invert_yaxis()  # stock on top
    ax.set_xlabel("seconds since the query started")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STAGE_COLORS.values()]
    ax.legend(handles, list(STAGE_COLORS), fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.2))


def _draw_bars(ax: Any, s: dict[str, Any]) -> None:
    names, med, p95 = ["stock"], [s["stock_median_s"]], [s["stock_p95_s"]]
    if "ayo_median_s" in s:
        names.append("Ayo")
        med.append(s["ayo_median_s"])
        p95.append(s["ayo_p95_s"])
    ax.bar(names, med, color=["#999999", "#4c72b0"][: len(names)], label="median")
    ax.scatter(names, p95, color="black", marker="_", s=400, label="p95", zorder=3)
    ax.set_ylabel("latency (s)")
    title = f"median ratio {s['median_ratio']:.2f}x" if "median_ratio" in s else "stock only"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def _draw_load_bars(ax: Any, load: dict[str, Any]) -> None:
    sides = [k for k in ("stock", "ayo") if k in load]
    x = range(len(sides))
    p50 = [load[k]["summary"]["p50_s"] for k in sides]
    p95 = [load[k]["summary"]["p95_s"] for k in sides]
    ax.bar([i - 0.2 for i in x], p50, width=0.4, label="p50", color="#4c72b0")
    ax.bar([i + 0.2 for i in x], p95, width=0.4, label="p95", color="#c44e52")
    ax.set_xticks(list(x), [f"{k}\n{load[k]['summary']['throughput_qps']:.2f} q/s" for k in sides])
    ax.set_ylabel("latency (s)")
    ax.set_title(f"open-loop Poisson, {load['rate_qps']} q/s", fontsize=9)
    ax.legend(fontsize=7)


def plot_result(path: str | Path) -> Path:
    """Render ``APP.json`` (or ``APP-load.json``) to a PNG beside it; return its path."""
    path = Path(path)
    data = json.loads(path.read_text())
    out = path.with_suffix(".png")
    if "load" in data:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        _draw_load_bars(ax, data["load"])
    else:
        fig, (bars, line) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 4]})
        _draw_bars(bars, data["summary"])
        tl = data.get("timeline", {})
        rows = [("stock", tl.get("stock", []), tl.get("stock_s"))]
        if "ayo" in tl:
            rows.append(("Ayo", tl["ayo"], tl.get("ayo_s")))
        _draw_timeline(line, rows)
        line.set_title(f"one query ({tl.get('question', '?')}): stock above Ayo", fontsize=9)
    fig.suptitle(f"{data['app']} — {data['model']}, {data['machine']['cores']} cores, {data['date'][:10]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(plot_result(arg))
