"""Load: open-loop Poisson arrivals from below to above the server's capacity, stock vs Ayo.

    python -m benchmarks.load search_augmented                      # 50/80/100/120 % for 5 minutes each
    python -m benchmarks.load naive_rag --levels 0.5 1.2 --duration 20 --capacity 0.4   # a tiny run

Capacity (queries/s the app sustains on this server) is measured first unless ``--capacity`` is
given: stock, closed loop, ``--probe-concurrency`` callers for ``--probe-s`` seconds. Then, for each
level, the same Poisson arrival times (rate = level x capacity, ``--duration`` seconds) go to stock
and to Ayo (order alternating by level) through ``ayo_bench.compare``'s open-loop driver, the one
``ayo compare --mode load`` uses. The apps keep their models' default timeouts (the example apps
set none), so above capacity queries queue rather than fail; errors are counted and shown.

Printed per level and side: throughput, p50/p95/p99, the longest latency, errors (and whether each
names the engine), answers identical to stock; for Ayo also its engine schedulers' peak queue
length (bounded: ``SchedulerConfig.max_queue``) and the starvation check: its longest latency
against stock's p99 at the same level. ``--out FILE`` writes everything as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("ayo.load")
LEVELS = (0.5, 0.8, 1.0, 1.2)


async def measure_capacity(pair: Any, questions: list[dict[str, Any]], concurrency: int, seconds: float) -> float:
    """Stock's closed-loop throughput (queries/s) with ``concurrency`` callers for ``seconds``."""
    done, stop = 0, time.perf_counter() + seconds
    start = time.perf_counter()

    async def caller(k: int) -> None:
        nonlocal done
        i = k
        while time.perf_counter() < stop:
            await pair.timed("stock", questions[i % len(questions)])
            done += 1
            i += concurrency

    await asyncio.gather(*(caller(k) for k in range(concurrency)))
    return done / (time.perf_counter() - start)


def side_figures(results: list[dict[str, Any]], engine_names: list[str]) -> dict[str, Any]:
    from ayo_bench.compare import percentile, summarize_load

    latency_by_id = {r["id"]: r["done"] - r["arrival"] for r in results if "error" not in r}
    lat = list(latency_by_id.values())
    errors = [r["error"] for r in results if "error" in r]
    return {**summarize_load(results), "p99_s": percentile(lat, 99), "max_s": max(lat, default=float("nan")),
            "errors_naming_engine": sum(any(n in e for n in engine_names) for e in errors),
            "error_examples": sorted(set(errors))[:3], "latency_by_id": latency_by_id}


def scheduler_peaks() -> dict[str, int]:
    """Peak queue length of every Ayo engine scheduler on the running loop, by engine kind."""
    from ayo_core.runtime.shared import shared_schedulers

    peaks: dict[str, int] = {}
    for sched in shared_schedulers(asyncio.get_running_loop()):
        s = sched.statistics()
        peaks[s.kind] = max(peaks.get(s.kind, 0), s.max_waiting)
    return peaks


async def run_level(pair: Any, questions: list[dict[str, Any]], rate: float, duration: float, seed: int,
                    order: list[str], engine_names: list[str]) -> dict[str, Any]:
    from ayo_bench.compare import open_loop

    rng = random.Random(seed)
    gaps, total = [0.0], 0.0
    while total < duration:
        gaps.append(rng.expovariate(rate))
        total += gaps[-1]
    items = [dict(questions[i % len(questions)], id=f"{questions[i % len(questions)]['id']}#{i}")
             for i in range(len(gaps))]
    out: dict[str, Any] = {"rate_qps": rate, "queries": len(items), "order": order}
    for side in order:
        await pair.cold_cache()
        results = await open_loop(pair, side, items, gaps)
        out[side] = side_figures(results, engine_names)
        out[side]["answers"] = {r["id"]: r.get("answer") for r in results}
        if side == "ayo":
            out["ayo"]["scheduler_peak_queue"] = scheduler_peaks()
    if "ayo" in out:
        stock, ayo = out["stock"]["answers"], out["ayo"]["answers"]
        both = [k for k in stock if stock[k] is not None and ayo.get(k) is not None]
        out["identical_answers"] = sum(stock[k] == ayo[k] for k in both)
        out["compared_answers"] = len(both)
        out["ayo_max_over_stock_p99"] = out["ayo"]["max_s"] / out["stock"]["p99_s"] if out["stock"]["p99_s"] else None
        out["paired"] = paired_ratios(out["stock"]["latency_by_id"], out["ayo"]["latency_by_id"])
    for side in ("stock", "ayo"):
        out.get(side, {}).pop("answers", None)
    return out


def paired_ratios(stock: dict[str, float], ayo: dict[str, float]) -> dict[str, Any]:
    """Stock / Ayo latency of the same query (same arrival time, same question), per query: whether a
    difference is every query's or a few queries' (a shift of the whole distribution vs a tail)."""
    from ayo_bench.compare import percentile

    ratios = [stock[k] / ayo[k] for k in stock if k in ayo and ayo[k] > 0]
    return {"n": len(ratios), "median": percentile(ratios, 50), "p10": percentile(ratios, 10),
            "p90": percentile(ratios, 90), "ayo_slower_share": sum(r < 1 for r in ratios) / len(ratios) if ratios else None}


def print_level(level: float, r: dict[str, Any]) -> None:
    print(f"\n== {level:.0%} of capacity: {r['rate_qps']:.3f} q/s, {r['queries']} queries ==")
    for side in ("stock", "ayo"):
        s = r.get(side)
        if s is None:
            continue
        print(f"  {side:5} throughput {s['throughput_qps']:.3f} q/s  p50 {s['p50_s']:.2f}  p95 {s['p95_s']:.2f}  "
              f"p99 {s['p99_s']:.2f}  max {s['max_s']:.2f} s  errors {s['errors']} "
              f"(naming the engine: {s['errors_naming_engine']})")
        for e in s["error_examples"]:
            print(f"        {e[:200]}")
    if "ayo" in r:
        print(f"  identical answers {r['identical_answers']}/{r['compared_answers']}; Ayo peak queue "
              f"{r['ayo']['scheduler_peak_queue']}; Ayo max latency / stock p99 = {r['ayo_max_over_stock_p99']}")
        p = r["paired"]
        print(f"  per query stock/Ayo: median {p['median']:.2f}x [p10 {p['p10']:.2f}, p90 {p['p90']:.2f}], "
              f"Ayo slower on {p['ayo_slower_share']:.0%} of {p['n']}")


async def run(args: argparse.Namespace, cfg: Any) -> dict[str, Any]:
    from ayo_bench.compare import AppPair, probe_cache_reset, warm_up
    from ayo_examples.common import load_questions

    questions = load_questions(args.app, args.questions)
    pair = AppPair(args.app, cfg)
    pair.cache_reset_url = await probe_cache_reset(cfg.llm_url)
    sides = ["stock"] + (["ayo"] if pair.ayo is not None else [])
    await warm_up(pair, sides, questions[:1])
    capacity = args.capacity or await measure_capacity(pair, questions, args.probe_concurrency, args.probe_s)
    print(f"{args.app}: capacity {capacity:.3f} q/s ({'given' if args.capacity else 'measured, stock closed loop'})")
    engine_names = [cfg.llm_url, cfg.llm_url.removesuffix("/v1")]
    out: dict[str, Any] = {"app": args.app, "capacity_qps": capacity, "duration_s": args.duration,
                           "levels": {}}
    for i, level in enumerate(args.levels):
        order = sides if i % 2 == 0 else sides[::-1]
        r = await run_level(pair, questions, level * capacity, args.duration, args.seed + i, order, engine_names)
        print_level(level, r)
        out["levels"][str(level)] = r
    return out


def main(argv: list[str] | None = None) -> int:
    from ayo_examples.common import APPS

    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("app", choices=APPS, nargs="?", default="search_augmented")
    parser.add_argument("--levels", type=float, nargs="+", default=list(LEVELS), help="fractions of capacity")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of arrivals per level")
    parser.add_argument("--capacity", type=float, default=None, help="queries/s (default: measured)")
    parser.add_argument("--probe-concurrency", type=int, default=8)
    parser.add_argument("--probe-s", type=float, default=60.0)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from concurrent.futures import ThreadPoolExecutor

    from ayo_core import serve_llm
    from ayo_examples.common import EnginesConfig
    from ayo_examples.search_service import SearchService

    with serve_llm(dtype="float32") as llm_url, SearchService(mode="process") as search:
        cfg = EnginesConfig(llm_url=llm_url, max_tokens=args.max_tokens, search_url=search.url)
        with asyncio.Runner() as runner:
            runner.get_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
            result = runner.run(run(args, cfg))
        from ayo_bench import provenance

        result["provenance"] = provenance.collect(llm_url, started_by_ayo=True, dtype="float32")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
