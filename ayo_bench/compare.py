"""``ayo compare APP``: the stock app and the Ayo-optimized app, on the same engines, side by side.

    ayo compare advanced_rag -n 10            # or python -m ayo_bench.compare (python -m benchmarks.compare in a checkout)
    ayo compare search_augmented --mode load --rate 0.5 -n 16
    ayo compare all
    ayo compare advanced_rag --deployment a100-llama2-7b   # on an emulated deployment (ayo_bench.deployment)

How numbers are made (docs/benchmarking.md): the engines start once (the vLLM
server at ``$AYO_LLM_URL``, else one started by ``ayo_core.serve_llm``; the loopback
search service as a subprocess), both apps warm up, then both run on each question, who
goes first balanced over the pairs and in a seeded random order (``--seed``;
:func:`ayo_bench.stats.first_sides` says why not a strict alternation): both apps send the
*same* prompts to one server and whoever runs second would find them in the prefix cache
(emptied before each run where the server allows), and drift hits both sides alike.
Stock runs at its best settings (async paths: ``ainvoke``; LlamaIndex ``use_async=True``).

Latency mode prints median of each, the median per-pair ratio (stock / Ayo), p95,
whether every answer was identical, and per call: a lower bound that holds for any schedule
of the call's work (:mod:`ayo_bench.lower_bound`: max of the critical path at zero-load service
times and the busiest engine's least work) with Ayo's latency / bound, Ayo's busiest engine's
in-flight time as a share of its latency (:mod:`ayo_bench.bound`: a utilization, not a bound)
and what the rest is made of, and Ayo's overhead (its own accounting, and the wall time of the
call in which no engine of the query worked). Both apps reach the LLM server through a recording pass-through
(:mod:`ayo_bench.recorder`, ``--no-record`` to go direct) that times every model request.
Load mode (``--mode load --rate R``) sends an open-loop Poisson stream of R queries/s
to each app and prints throughput and p50/p95 latency. Each run writes ``APP.json``
(``APP-load.json``) with its provenance (:mod:`ayo_bench.provenance`: commit, server
version and flags, dtype, model, machine, date), a PNG plot and, for latency, a Perfetto
trace of one optimized query (``APP.trace.json``) into ``$AYO_HOME/results`` (``--out`` to
choose: the committed results are written on purpose with ``--out benchmarks/results``).
The apps are the installed ``ayo_examples`` package (the repository's ``examples/`` folder).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from ayo_core.caller_code import running_caller_code
from ayo_core.models import ayo_home
from ayo_core.trace import collect_traces, save_chrome_trace
from ayo_examples.common import APPS, EnginesConfig, load_questions

from . import bound, provenance, stats, timeline
from .lower_bound import call_lower_bound, summarize_lower_bounds
from .provenance import machine  # noqa: F401 - kept importable from here
from .service_model import MeasuredServiceModel

log = logging.getLogger("ayo.compare")
LLM_DTYPE = "float32"  # the one mode greedy answers are compared in (docs/configuration.md: fp32 and bf16 differ)
# The checkout this package was imported from, when it was (an editable install); None when installed.
_CHECKOUT = Path(__file__).resolve().parent.parent
CHECKOUT: Path | None = _CHECKOUT if (_CHECKOUT / "benchmarks" / "results").is_dir() else None


def default_results_dir() -> Path:
    """``$AYO_HOME/results``: a user's runs never touch the repository's tracked results
    (those are written on purpose, ``--out benchmarks/results``)."""
    return ayo_home() / "results"


for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("ANONYMIZED_TELEMETRY", "False"),
                      ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_name, _value)


# ---- statistics ------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def first_difference(a: str, b: str) -> int:
    """Index of the first differing character (len of the shorter if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _shown(path: Path) -> str:
    """A path as the user should see it: relative to the checkout when inside it."""
    inside = CHECKOUT is not None and path.resolve().is_relative_to(CHECKOUT)
    # outside: no machine's folder in a results file (provenance.shown_path: $AYO_HOME/..., ~/..., .../NAME)
    return str(path.resolve().relative_to(CHECKOUT)) if inside else provenance.shown_path(path)


# ---- one app ---------------------------------------------------------------------------
class AppPair:
    """The stock app and (when its adapter imports) the optimized one, built on one config."""

    cache_reset_url: str | None = None  # set when the server lets us empty its prefix cache
    recorder: Any = None  # an LLMRequestRecorder both apps' LLM requests pass through, when recording
    search_log: Any = None  # (lo, hi) -> the search service's requests in that window, when it keeps a log
    last_window: tuple[float, float] = (0.0, 0.0)  # the last timed call, time.monotonic() (the trace's clock)

    def __init__(self, name: str, cfg: EnginesConfig) -> None:
        self.name = name
        self.module = importlib.import_module(f"ayo_examples.{name}")
        self.stock = self.module.build_stock(cfg)
        self.ayo: Any = None
        self.ayo_missing = ""
        try:
            self.ayo = self.module.build_optimized(cfg)
        except ImportError as exc:  # the adapters are built alongside; run stock alone until they land
            self.ayo_missing = f"{exc}"
            log.warning("%s: optimized app unavailable (%s); measuring stock only", name, exc)

    async def cold_cache(self) -> None:
        """Empty the server's prefix cache so neither side inherits the other's prompts."""
        if self.cache_reset_url:
            async with httpx.AsyncClient(timeout=30) as client:
                (await client.post(self.cache_reset_url)).raise_for_status()

    async def timed(self, which: str, item: dict[str, Any]) -> tuple[float, str, list[Any]]:
        """Seconds, answer, and the traces of every query Ayo ran for the call (none for stock):
        a chat conversation's turns, an agent's steps, a doc-QA function's query."""
        app = self.stock if which == "stock" else self.ayo
        # the call is the user's code but where it enters Ayo (caller_code): what stock runs too
        with collect_traces() as traces, running_caller_code():
            start, mono = time.perf_counter(), time.monotonic()
            answer = await self.module.arun(app, item)
            elapsed = time.perf_counter() - start
        self.last_window = (mono, time.monotonic())
        return elapsed, answer, (traces if which == "ayo" else [])  # the sink: its caller_code too


async def warm_up(pair: AppPair, sides: list[str], items: list[dict[str, Any]]) -> None:
    """Untimed runs: load weights, fill caches, open connections (a failure here is logged, not fatal)."""
    for item in items:
        for side in sides:
            try:
                await pair.timed(side, item)
            except Exception as exc:
                log.error("%s %s failed during warm-up: %r", pair.name, side, exc)


async def run_latency(pair: AppPair, questions: list[dict[str, Any]], warmup: int, seed: int = 0) -> dict[str, Any]:
    """Warm up, then run stock and Ayo on each question, who goes first balanced and in a seeded
    random order (``stats.first_sides``: a strict alternation can alias with the machine)."""
    from tqdm import tqdm

    sides = ["stock"] + (["ayo"] if pair.ayo is not None else [])
    await warm_up(pair, sides, questions[:warmup])
    rows = []
    firsts = stats.first_sides(len(questions), ("stock", "ayo"), seed)
    bar = tqdm(questions, desc=f"{pair.name} latency", unit="q", file=sys.stderr)
    for i, item in enumerate(bar):
        order = sides if firsts[i] == sides[0] else sides[::-1]
        row: dict[str, Any] = {"id": item["id"], "question": item["question"], "first": order[0]}
        calls: dict[str, tuple[tuple[float, float], list[Any]]] = {}
        for side in order:
            try:
                await pair.cold_cache()
                elapsed, answer, traces = await pair.timed(side, item)
            except Exception as exc:  # reported in the results, not hidden, and the run goes on
                log.error("%s %s failed on %s: %r", pair.name, side, item["id"], exc)
                row[f"{side}_error"] = repr(exc)
                continue
            row[f"{side}_s"], row[f"{side}_answer"] = elapsed, answer
            calls[side] = (pair.last_window, traces)
        if "ayo" in calls and (calls["ayo"][1] or pair.recorder is not None):
            row.update(call_figures(pair, calls))
        if "ayo_s" in row and "stock_s" in row:
            row["ratio"] = row["stock_s"] / row["ayo_s"]
            row["identical"] = row["stock_answer"] == row["ayo_answer"]
            if not row["identical"]:
                row["first_difference"] = first_difference(row["stock_answer"], row["ayo_answer"])
            bar.set_postfix(ratio=f"{row['ratio']:.2f}", same=row["identical"])
        rows.append(row)
    return {"pairs": rows, "summary": summarize_latency(rows)}


def balanced_ratio(rows: list[dict[str, Any]]) -> float:
    firsts = [median([r["ratio"] for r in rows if r["first"] == side]) for side in ("stock", "ayo")]
    present = [f for f in firsts if f == f]
    return math.prod(present) ** (1 / len(present)) if present else float("nan")


def call_figures(pair: AppPair, calls: dict[str, tuple[tuple[float, float], list[Any]]]) -> dict[str, Any]:
    """Per call: the lower bound that holds for any schedule (:mod:`ayo_bench.lower_bound`), Ayo's
    busiest engine's in-flight time and the gap to it (a utilization of Ayo's schedule, not a
    bound), and Ayo's own overhead accounting. Service times: ``pair.service_model`` (an emulated
    run's profile) when set, else the rest of the run's LLM requests, this call's own left out
    (``MeasuredServiceModel``); with
    neither a model nor a recorder, no lower bound. A call that ran no query on Ayo's
    runtime (an agent called with ``ainvoke``) still has the LLM server's own view (the recorder):
    its figures are given, its overhead is not (none of it ran on Ayo).
    """
    window, traces = calls["ayo"]
    recorded = pair.recorder.between(*window) if pair.recorder is not None else None
    report = bound.busiest_engine_bound(bound.work_from_traces(traces, window, recorded))
    out: dict[str, Any] = {"ayo_utilization": report.as_dict()}
    service = getattr(pair, "service_model", None)
    if service is None and pair.recorder is not None:
        service = MeasuredServiceModel(getattr(pair.recorder, "records", None) or recorded or [], exclude=window)
    if service is not None:
        out["lower_bound"] = call_lower_bound(traces, window, recorded, service, searches_in(pair, window)).as_dict()
    if not traces:
        out["ayo_trace"] = {"queries": 0}
    else:
        out.update(trace_overhead(traces, report))
    return out


def searches_in(pair: AppPair, window: tuple[float, float]) -> list[dict[str, Any]] | None:
    """The search service's requests inside ``window`` (None without a log: searches then count 0 in the bound)."""
    search_log = getattr(pair, "search_log", None)  # call_figures takes any pair-like object
    if search_log is None:
        return None
    try:
        return search_log(*window)
    except (OSError, ValueError, KeyError) as exc:  # a figure, not the run: the bound is only looser
        log.warning("could not read the search service's log: %s", exc)
        return None


def trace_overhead(traces: list[Any], report: bound.BoundReport) -> dict[str, Any]:
    """Ayo's overhead in a call: what its traces recorded, and the time on the critical path with
    nothing of the query working (see below)."""
    out: dict[str, Any] = {}
    try:
        kinds: dict[str, float] = {}
        for trace in traces:
            for k, v in trace.overhead.items():
                kinds[k] = kinds.get(k, 0.0) + float(v)
        out["ayo_trace"] = {"queries": len(traces), "trace_latency_s": sum(float(t.latency) for t in traces),
                            "overhead_kinds_s": kinds, "overhead_s": sum(kinds.values())}
    except (AttributeError, TypeError, ValueError) as exc:  # a half-built trace must not sink the benchmark
        log.warning("could not read Ayo's trace overhead: %s", exc)
    # Ayo on the critical path: the call's time with no engine of the query working and nothing
    # queued (loop hops, capture and lowering, scheduling). The user's own code outside Ayo
    # (ayo_core.caller_code: a doc-QA function's splitting and collections, a chat engine's memory,
    # making the engine), which stock runs too, is left out; the upper bound keeps it.
    out["ayo_overhead_s"] = report.outside_graph_s - report.caller_code_s + report.runtime_s
    out["ayo_overhead_upper_s"] = report.outside_graph_s + report.runtime_s
    return out


def summarize_latency(all_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the pairs where both sides answered; failures are counted, never dropped silently."""
    errors = {side: sum(f"{side}_error" in r for r in all_rows) for side in ("stock", "ayo")}
    stock = [r["stock_s"] for r in all_rows if "stock_s" in r]
    out: dict[str, Any] = {"n": len(all_rows), "stock_median_s": median(stock), "stock_p95_s": percentile(stock, 95),
                           "stock_errors": errors["stock"], "ayo_errors": errors["ayo"]}
    rows = [r for r in all_rows if "ratio" in r]
    ayo = [r["ayo_s"] for r in rows]
    if not ayo:
        return out
    ratios = [r["ratio"] for r in rows]
    interval = stats.ratio_interval(ratios)
    out.update({
        "ayo_median_s": median(ayo), "ayo_p95_s": percentile(ayo, 95),
        "median_ratio": median(ratios),
        "median_ratio_stock_first": median([r["ratio"] for r in rows if r["first"] == "stock"]),
        "median_ratio_ayo_first": median([r["ratio"] for r in rows if r["first"] == "ayo"]),
        # Whoever runs second finds the pair's prompts cached; the geometric mean of the two
        # orders' medians cancels that advantage (equal to median_ratio when there is none).
        "balanced_ratio": balanced_ratio(rows),
        # how sure: geometric mean of the pairs' ratios with its 95 % interval (ayo_bench.stats)
        "ratio_interval": None if interval is None else interval.as_dict(),
        "pairs_compared": len(rows), "identical_answers": sum(r["identical"] for r in rows),
        "all_identical": all(r["identical"] for r in rows) and len(rows) == len(all_rows),
    })
    out.update(summarize_bounds(rows))
    return out


def summarize_bounds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the pairs of the lower bound, Ayo's busiest-engine utilization and its gap, the overhead."""
    out: dict[str, Any] = summarize_lower_bounds(rows)
    rows = [r for r in rows if r.get("ayo_utilization") or r.get("ayo_bound")]  # ayo_bound: files before the bound
    if not rows:
        return out
    reports = [r.get("ayo_utilization") or r["ayo_bound"] for r in rows]
    engines = [b["busiest_engine"] for b in reports]
    out.update({
        "utilization_engine": max(set(engines), key=engines.count),
        "utilization_busy_median_s": median([b["busy_s"] for b in reports]),
        "utilization_median": median([b["efficiency"] for b in reports]),
        "utilization_min": min(b["efficiency"] for b in reports),
        "gap_median_s": {part: median([b.get(f"{part}_s", 0.0) for b in reports]) for part in _gap_parts(reports)},
    })
    overhead = [r for r in rows if "ayo_overhead_s" in r]  # not for calls that ran nothing on Ayo's runtime
    if overhead:
        out["ayo_overhead_median_s"] = median([r["ayo_overhead_s"] for r in overhead])
        out["ayo_overhead_median_pct"] = 100 * median([r["ayo_overhead_s"] / r["ayo_s"] for r in overhead])
        upper = [r["ayo_overhead_upper_s"] / r["ayo_s"] for r in overhead if "ayo_overhead_upper_s" in r]
        if upper:  # since 2026-12-05
            out["ayo_overhead_upper_median_pct"] = 100 * median(upper)
    traced = [r["ayo_trace"]["overhead_s"] for r in rows if "overhead_s" in r.get("ayo_trace", {})]
    if traced:
        out["ayo_overhead_recorded_median_s"] = median(traced)
    return out


def _gap_parts(reports: list[dict[str, Any]]) -> tuple[str, ...]:
    # a doc-QA function's own code is split out since 2026-12-05: older results have no such part
    caller = ("caller_code",) if any("caller_code_s" in b for b in reports) else ()
    return ("gap", "outside_graph", *caller, "other_engine", "queued", "runtime")


async def record_timelines(pair: AppPair, item: dict[str, Any], trace_path: Path) -> dict[str, Any]:
    """One query, stock then Ayo: stage spans for the plot, and Ayo's Perfetto trace."""
    rec = timeline.Recorder()
    await pair.cold_cache()
    if pair.module.FRAMEWORK == "llamaindex":
        with timeline.record_llamaindex(rec):
            rec.reset()
            stock_s = (await pair.timed("stock", item))[0]
    else:
        app = pair.stock.with_config(callbacks=[timeline.langchain_handler(rec)])
        rec.reset()
        start = time.perf_counter()
        await pair.module.arun(app, item)
        stock_s = time.perf_counter() - start
    out: dict[str, Any] = {"question": item["id"], "stock_s": stock_s, "stock": rec.stage_spans()}
    if pair.ayo is not None:
        try:
            await pair.cold_cache()
            ayo_s, _, traces = await pair.timed("ayo", item)
        except Exception as exc:
            log.error("%s ayo failed while recording the timeline: %r", pair.name, exc)
            return out
        out.update({"ayo_s": ayo_s, "ayo": timeline.spans_from_traces(traces)})
        if traces:
            save_chrome_trace(traces, trace_path)
            out["perfetto_trace"] = _shown(trace_path)
    return out


async def probe_cache_reset(llm_url: str) -> str | None:
    """vLLM's ``POST /reset_prefix_cache`` (served with VLLM_SERVER_DEV_MODE=1), if this server has it."""
    url = llm_url.rstrip("/").removesuffix("/v1") + "/reset_prefix_cache"
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            ok = (await client.post(url)).status_code == 200
    except httpx.HTTPError:
        ok = False
    if not ok:
        log.warning("the LLM server cannot reset its prefix cache: runs alternate order instead (see balanced_ratio)")
    return url if ok else None


# ---- load ------------------------------------------------------------------------------
async def open_loop(pair: AppPair, side: str, items: list[dict[str, Any]], gaps: list[float]) -> list[dict[str, Any]]:
    """Send ``items`` at the given inter-arrival gaps without waiting for answers (open loop)."""
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []

    async def one(item: dict[str, Any], arrival: float) -> None:
        try:
            _, answer, _ = await pair.timed(side, item)
            results.append({"id": item["id"], "arrival": arrival, "done": time.perf_counter() - t0, "answer": answer})
        except Exception as exc:  # one failed request is a data point, not the end of the run
            results.append({"id": item["id"], "arrival": arrival, "done": time.perf_counter() - t0, "error": repr(exc)})

    tasks, at = [], 0.0
    for item, gap in zip(items, gaps, strict=True):
        at += gap
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
        tasks.append(asyncio.create_task(one(item, at)))
    await asyncio.gather(*tasks)
    return sorted(results, key=lambda r: r["arrival"])


def summarize_load(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if "error" not in r]
    lat = [r["done"] - r["arrival"] for r in ok]
    span = max((r["done"] for r in ok), default=0.0) - min((r["arrival"] for r in results), default=0.0)
    return {"completed": len(ok), "errors": len(results) - len(ok), "throughput_qps": len(ok) / span if span > 0 else 0.0,
            "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95), "mean_s": statistics.fmean(lat) if lat else None}


async def run_load(pair: AppPair, questions: list[dict[str, Any]], rate: float, warmup: int, seed: int) -> dict[str, Any]:
    """Same Poisson arrivals for both apps; halves run stock-Ayo then Ayo-stock (prefix-cache fairness)."""
    rng = random.Random(seed)
    gaps = [rng.expovariate(rate) for _ in questions]
    gaps[0] = 0.0
    sides = ["stock"] + (["ayo"] if pair.ayo is not None else [])
    await warm_up(pair, sides, questions[:warmup])
    half = max(1, len(questions) // 2)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for part, order in ((slice(0, half), sides), (slice(half, None), sides[::-1])):
        if not questions[part]:
            continue
        for side in order:
            log.info("%s load: %s, %d queries at %.2f/s", pair.name, side, len(questions[part]), rate)
            await pair.cold_cache()  # else the second side of a half reuses the first's prompts
            runs[side].append({"offset": part.start, "results": await open_loop(pair, side, questions[part], gaps[part])})
    out: dict[str, Any] = {"rate_qps": rate, "seed": seed, "n": len(questions)}
    for side, halves in runs.items():
        results = [r for h in halves for r in h["results"]]
        out[side] = {"summary": summarize_load_halves(halves), "results": results}
    if pair.ayo is not None:
        ayo_answers = {r["id"]: r.get("answer") for r in out["ayo"]["results"]}
        out["all_identical"] = all(r.get("answer") == ayo_answers.get(r["id"]) for r in out["stock"]["results"])
    return out


def summarize_load_halves(halves: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency percentiles over both halves; throughput = completed / summed busy spans."""
    parts = [summarize_load(h["results"]) for h in halves]
    lat = [r["done"] - r["arrival"] for h in halves for r in h["results"] if "error" not in r]
    busy = sum(p["completed"] / p["throughput_qps"] for p in parts if p["throughput_qps"])
    done = sum(p["completed"] for p in parts)
    return {"completed": done, "errors": sum(p["errors"] for p in parts), "throughput_qps": done / busy if busy else 0.0,
            "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95)}


# ---- reporting -------------------------------------------------------------------------
def _fmt(value: Any, unit: str = "s") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.2f}{unit}" if isinstance(value, float) else str(value)


def print_latency(name: str, s: dict[str, Any], ayo_missing: str) -> None:
    print(f"\n== {name}: {s['n']} questions, stock and Ayo in pairs ==")
    print(f"  stock  median {_fmt(s['stock_median_s'])}  p95 {_fmt(s['stock_p95_s'])}")
    if ayo_missing or "ayo_median_s" not in s:
        print(f"  ayo    not measured: {ayo_missing or 'every optimized run failed (see the JSON)'}")
        return
    print(f"  ayo    median {_fmt(s['ayo_median_s'])}  p95 {_fmt(s['ayo_p95_s'])}")
    print(f"  median per-pair ratio (stock/ayo) {_fmt(s['median_ratio'], 'x')}"
          f"  [stock ran first: {_fmt(s['median_ratio_stock_first'], 'x')}, ayo first: {_fmt(s['median_ratio_ayo_first'], 'x')};"
          f" order-balanced {_fmt(s['balanced_ratio'], 'x')}]")
    ci = s.get("ratio_interval")
    if ci:
        print(f"  geometric-mean ratio {_fmt(ci['geomean'], 'x')}, 95 % interval {_fmt(ci['ci95_low'], 'x')}"
              f"-{_fmt(ci['ci95_high'], 'x')} over {ci['n']} pairs: {ci['verdict']}")
    print(f"  identical answers {s['identical_answers']}/{s['pairs_compared']}"
          + ("" if s["all_identical"] else "  <-- NOT all identical"))
    if s["ayo_errors"] or s["stock_errors"]:
        print(f"  FAILED runs: stock {s['stock_errors']}, ayo {s['ayo_errors']} (see the JSON for the errors)")
    if "utilization_median" in s or "lower_bound_median_s" in s:
        print_bounds(s)
    else:
        print("  no Ayo trace (no query of the optimized app ran on Ayo's runtime): overhead and bound not reported")


def print_bounds(s: dict[str, Any]) -> None:
    """The lower bound and latency / bound, Ayo's busiest-engine utilization and its gap, the overhead (medians)."""
    if "lower_bound_median_s" in s:
        print(f"  lower bound (any schedule) {_fmt(s['lower_bound_median_s'])} = max(critical path at zero load"
              f" {_fmt(s['lower_bound_critical_path_median_s'])}, busiest engine's least work"
              f" ({s['lower_bound_engine']}) {_fmt(s['lower_bound_engine_work_median_s'])});"
              f" Ayo's latency / bound {_fmt(s['latency_over_bound_median'], 'x')}"
              f" (min {_fmt(s['latency_over_bound_min'], 'x')});"
              f" service: {', '.join(s['lower_bound_service_model'])}, LLM requests with token counts"
              f" {s['lower_bound_llm_requests_with_tokens']}/{s['lower_bound_llm_requests']}")
    else:
        print("  lower bound (any schedule): not measured (no service model and no recorder: run without --no-record)")
    if "utilization_median" in s:
        gap = s["gap_median_s"]
        print(f"  Ayo's busiest engine in flight ({s['utilization_engine']}) {_fmt(s['utilization_busy_median_s'])}:"
              f" {_fmt(s['utilization_median'], '')} of Ayo's latency (min {_fmt(s['utilization_min'], '')};"
              " a utilization of Ayo's schedule, not a bound)")
        print(f"    the rest {_fmt(gap['gap'])} = outside Ayo's graph {_fmt(gap['outside_graph'])}"
              f" (of which the function's own code {_fmt(gap.get('caller_code', 0.0))})"
              f" + other engines while it waited {_fmt(gap['other_engine'])} + queued {_fmt(gap['queued'])}"
              f" + nothing running {_fmt(gap['runtime'])}")
    recorded = s.get("ayo_overhead_recorded_median_s")
    if "ayo_overhead_median_s" not in s:
        print("  ayo overhead: not measured (no query of these calls ran on Ayo's runtime)")
        return
    print(f"  ayo overhead on the critical path median {_fmt(s['ayo_overhead_median_s'])}"
          f" ({_fmt(s['ayo_overhead_median_pct'], '%')}: Ayo's hooks, hops and runtime with nothing of the"
          f" query working, the user's own code left out; with it, at most"
          f" {_fmt(s.get('ayo_overhead_upper_median_pct', float('nan')), '%')});"
          f" Ayo's own accounting (capture, build, passes, scheduling) {_fmt(recorded)}")


def print_load(name: str, out: dict[str, Any]) -> None:
    print(f"\n== {name}: open-loop Poisson load, {out['rate_qps']} queries/s, {out['n']} queries ==")
    for side in ("stock", "ayo"):
        if side in out:
            s = out[side]["summary"]
            print(f"  {side:5}  throughput {_fmt(s['throughput_qps'], ' q/s')}  p50 {_fmt(s['p50_s'])}"
                  f"  p95 {_fmt(s['p95_s'])}  errors {s['errors']}")
    if "ayo" in out:
        st, ay = out["stock"]["summary"], out["ayo"]["summary"]
        if ay["p95_s"] and st["throughput_qps"]:
            print(f"  p95 ratio (stock/ayo) {_fmt(st['p95_s'] / ay['p95_s'], 'x')}"
                  f"  throughput ratio (ayo/stock) {_fmt(ay['throughput_qps'] / st['throughput_qps'], 'x')}")
        print(f"  identical answers: {out['all_identical']}")


def header(cfg: EnginesConfig, args: argparse.Namespace, search_latency: float, llm_url: str,
           llm_given: bool) -> dict[str, Any]:
    """The results file's head: its provenance (server asked at ``llm_url``) and the run's settings."""
    prov = provenance.collect(llm_url, started_by_ayo=not llm_given, dtype=LLM_DTYPE, outputs=(args.out,))
    return {
        "provenance": prov, "date": prov["date"], "machine": prov["machine"],
        "model": cfg.model, "llm_server": "AYO_LLM_URL (shared server)" if llm_given else "started by serve_llm",
        "max_tokens": cfg.max_tokens, "search_latency_s": search_latency, "mode": args.mode,
        "recorded_llm_requests": not args.no_record and args.mode == "latency",
        "command": provenance.portable("ayo compare " + " ".join(args.argv)),
    }


async def compare_app(name: str, cfg: EnginesConfig, args: argparse.Namespace, meta: dict[str, Any],
                      recorder: Any = None, deployment: Any = None, search: Any = None) -> dict[str, Any]:
    questions = load_questions(name, args.n)
    pair = AppPair(name, cfg)
    pair.recorder = recorder
    pair.search_log = getattr(search, "requests_between", None)
    pair.cache_reset_url = await probe_cache_reset(cfg.llm_url)
    result: dict[str, Any] = {**meta, "app": name, "framework": pair.module.FRAMEWORK, "ayo_missing": pair.ayo_missing,
                              "prefix_cache_reset_between_runs": bool(pair.cache_reset_url)}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = ""
    if deployment is not None:  # an emulated deployment: record the answers, then time the replay
        recorded = await deployment.record_pass(pair, questions[:max(args.warmup, 0)] + questions)
        result["deployment"] = {**deployment.describe(), **{k: v for k, v in recorded.items() if k != "stats_before_timed"}}
        if deployment.timed_mode == "replay":
            pair.service_model = deployment.profile  # zero-load service times of the emulated engines
        suffix = f"-{deployment.profile.name}" + ("-proxy" if deployment.timed_mode == "record" else "")
        before = recorded["stats_before_timed"]
    if args.mode == "load":
        result["load"] = await run_load(pair, questions, args.rate, args.warmup, args.seed)
        print_load(name, result["load"])
        stem = f"{name}-load"
    else:
        result.update(await run_latency(pair, questions, args.warmup, args.seed))
        print_latency(name, result["summary"], pair.ayo_missing)
        result["timeline"] = await record_timelines(pair, questions[0], out_dir / f"{name}{suffix}.trace.json")
        stem = name
    if deployment is not None:
        result["deployment"]["timed_requests"] = deployment.misses_since(before)
        print(f"  deployment {result['deployment']['name']} ({'emulated' if result['deployment']['emulated'] else 'real engines through the emulator'}):"
              f" {result['deployment']['timed_requests']}")
    path = out_dir / f"{stem}{suffix}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"  wrote {_shown(path)}")
    if not args.no_plot:
        from .plot import plot_result

        print(f"  wrote {_shown(plot_result(path))}")
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ayo compare", description="Stock vs Ayo on the same engines.")
    parser.add_argument("app", choices=[*APPS, "all"], help="example app, or all")
    parser.add_argument("--mode", choices=["latency", "load"], default="latency")
    parser.add_argument("--rate", type=float, default=0.5, help="load mode: Poisson arrival rate, queries/s")
    parser.add_argument("-n", type=int, default=None, help="questions per app (default: all 30)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up questions per app (not timed)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the pairs' order (latency) or of the arrival process (load)")
    parser.add_argument("--max-tokens", type=int, default=64, help="LLM max_tokens of every app")
    parser.add_argument("--search-latency", type=float, default=None,
                        help="seconds per search request (default 0.3, or $AYO_SEARCH_LATENCY_S)")
    parser.add_argument("--out", default=str(default_results_dir()), help="results folder (default: %(default)s)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--no-record", action="store_true",
                        help="latency mode: send LLM requests straight to the server, without the recording "
                             "pass-through (no stock-model bound, and the busiest-engine bound sees Ayo's graph only)")
    parser.add_argument("--deployment", default=None, metavar="PROFILE",
                        help="run both apps on an emulated deployment (ayo emulate): a profile name "
                             "(`ayo emulate profiles`) or a profile JSON; every figure is then emulated")
    parser.add_argument("--emulator-mode", choices=["replay", "proxy"], default="replay",
                        help="with --deployment: replay (the profile's timing) or proxy (the real engines in real "
                             "time through the emulator's endpoints, what an emulated run is validated against)")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.rate <= 0:
        parser.error("--rate must be > 0")
    return args


@contextmanager
def recording(llm_url: str) -> Iterator[Any]:
    """The recording pass-through in front of ``llm_url``; Ayo learns the server's device as for ``llm_url``."""
    from ayo_core.engines.device import known_device, note_launched

    from .recorder import LLMRequestRecorder

    device = known_device(llm_url)
    with LLMRequestRecorder(llm_url) as recorder:
        if device is not None:  # else Ayo asks the server, through the pass-through, as it would directly
            note_launched(recorder.base_url, device)
        yield recorder


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ayo compare`` (and ``python -m ayo_bench.compare``)."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # One line per HTTP request or model load would bury the progress bar and the figures.
    for noisy in ("httpx", "httpcore", "openai", "chromadb", "sentence_transformers", "llama_index", "langchain", "langchain_classic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from ayo_core import serve_llm
    from ayo_examples.search_service import SearchService

    llm_given = bool(os.environ.get("AYO_LLM_URL"))
    # A server we start exposes POST /reset_prefix_cache, so every run starts from an
    # empty prefix cache and neither side profits from the other's cached prompts.
    os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")
    apps = list(APPS) if args.app == "all" else [args.app]
    with ExitStack() as stack:
        llm_url = stack.enter_context(serve_llm(dtype=LLM_DTYPE))
        search = stack.enter_context(SearchService(latency_s=args.search_latency, mode="process"))
        deployment, apps_url, embed_url = None, llm_url, ""
        if args.deployment:
            from .deployment import emulated_deployment

            deployment = stack.enter_context(emulated_deployment(args.deployment, llm_url, EnginesConfig.model,
                                                                 args.emulator_mode))
            apps_url = embed_url = deployment.emulator.base_url
        recorder = None if args.no_record or args.mode != "latency" else stack.enter_context(recording(apps_url))
        cfg = EnginesConfig(llm_url=recorder.base_url if recorder else apps_url, max_tokens=args.max_tokens,
                            search_url=search.url, embed_url=embed_url)
        meta = header(cfg, args, search.latency_s, llm_url, llm_given)
        print(f"engines: LLM {llm_url} ({cfg.model}{', recorded through ' + cfg.llm_url if recorder else ''}),"
              f" search {search.url} (declared latency {search.latency_s:.3f} s)")
        with asyncio.Runner() as runner:
            # Sync apps (the LlamaIndex document-QA functions) run in threads: enough for open-loop load.
            runner.get_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
            for name in apps:
                runner.run(compare_app(name, cfg, args, meta, recorder, deployment, search))
    return 0


if __name__ == "__main__":
    sys.exit(main())
