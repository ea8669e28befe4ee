"""The A/A noise floor: the same requests, timed against themselves, on the real LLM server.

    python benchmarks/noise_floor.py              # -n 8 pairs, Ayo's own server
    AYO_LLM_URL=http://127.0.0.1:8765/v1 python benchmarks/noise_floor.py -n 4

What a ratio from ``ayo compare`` can show depends on how much the very same work varies on this
machine. This sends one fixed sequence of chat requests (a short query-writing call, then an
answer over a long prompt, ``max_tokens`` each, greedy, ``ignore_eos`` so every run decodes the
same tokens) as two identical sides A and B, with the server's prefix cache emptied before every
run and who goes first in a pair drawn as ``ayo compare`` draws it (``--order alternate``: strict
A B / B A instead). There is no Ayo in it: each pair's ratio A/B would be exactly 1.0 on a
perfectly steady machine. Printed: every run's time, the spread
(slowest / fastest run), and the A/A ratio's geometric mean with its 95 % interval
(``ayo_bench.stats``), which is how wide an ``ayo compare`` interval with the same n is before Ayo
changes anything. ``--repeat R`` makes R such A/A runs one after another (seeds ``seed .. seed+R-1``)
into the same file, so figures quoted over several runs come from one results file: ``repeats``
holds each run, the top level the first (as a single run writes it) and ``summary`` the range over
all. The JSON (with provenance) goes to ``--out`` (default ``$AYO_HOME/results``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from ayo_bench import provenance, stats
from ayo_bench.compare import LLM_DTYPE, default_results_dir, probe_cache_reset

QUERY = ("Write 3 short web search queries that would find the answer to this question about Python's "
         "standard library. Write one query per line and nothing else.\nQuestion: which module parses "
         "command-line options?")
CONTEXT = " ".join(f"Result {i}: the argparse module makes it easy to write user-friendly command-line "
                   "interfaces; it defines what arguments the program requires." for i in range(12))


def requests(model: str, max_tokens: int) -> list[dict[str, Any]]:
    answer = f"Question: which module parses command-line options?\n\nSearch results:\n{CONTEXT}\n\nAnswer."
    return [{"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
             "temperature": 0.0, "ignore_eos": True} for text in (QUERY, answer)]


async def one_run(client: httpx.AsyncClient, url: str, bodies: list[dict[str, Any]], reset_url: str | None) -> float:
    if reset_url:
        (await client.post(reset_url)).raise_for_status()
    start = time.perf_counter()
    for body in bodies:
        (await client.post(url.rstrip("/") + "/chat/completions", json=body)).raise_for_status()
    return time.perf_counter() - start


async def measure(url: str, pairs: int, max_tokens: int, order: str = "random", seed: int = 0) -> dict[str, Any]:
    reset_url = await probe_cache_reset(url)
    async with httpx.AsyncClient(timeout=600) as client:
        model = (await client.get(url.rstrip("/") + "/models")).json()["data"][0]["id"]
        bodies = requests(model, max_tokens)
        await one_run(client, url, bodies, reset_url)  # warm-up: weights, connections
        runs: dict[str, list[float]] = {"A": [], "B": []}
        firsts = (stats.first_sides(pairs, ("A", "B"), seed) if order == "random"
                  else [("A", "B")[i % 2] for i in range(pairs)])
        for i in range(pairs):
            for side in ("A", "B") if firsts[i] == "A" else ("B", "A"):
                runs[side].append(await one_run(client, url, bodies, reset_url))
                print(f"pair {i + 1}/{pairs} {side}: {runs[side][-1]:.2f} s", flush=True)
    every = runs["A"] + runs["B"]
    interval = stats.ratio_interval([a / b for a, b in zip(runs["A"], runs["B"], strict=True)])
    return {"pairs": pairs, "order": order, "seed": seed, "max_tokens": max_tokens,
            "cache_reset": reset_url is not None, "runs": runs,
            "median_s": statistics.median(every), "spread_slowest_over_fastest": max(every) / min(every),
            "aa_ratio_interval": None if interval is None else interval.as_dict()}


def summarize_repeats(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures quoted over several A/A runs: the spread and the A/A ratio's range, and the worst pair."""
    ratios = [a / b for r in repeats for a, b in zip(r["runs"]["A"], r["runs"]["B"], strict=True)]
    geomeans = [r["aa_ratio_interval"]["geomean"] for r in repeats if r["aa_ratio_interval"]]
    spreads = [r["spread_slowest_over_fastest"] for r in repeats]
    return {"repeats": len(repeats), "spread_min": min(spreads), "spread_max": max(spreads),
            "aa_geomean_min": min(geomeans, default=None), "aa_geomean_max": max(geomeans, default=None),
            "pair_ratio_max_deviation": max(abs(r - 1) for r in ratios) if ratios else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--pairs", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--order", choices=["random", "alternate"], default="random",
                    help="who runs first in each pair: ayo compare's balanced random order, or strict "
                         "A B / B A alternation (the order ayo compare used before; see stats.first_sides)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="A/A runs into the one file (seeds seed..seed+R-1)")
    ap.add_argument("--out", default=None, help="results folder (default: $AYO_HOME/results)")
    args = ap.parse_args(argv)
    from ayo_core import serve_llm

    given = bool(os.environ.get("AYO_LLM_URL"))
    os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")  # a server we start can empty its prefix cache
    out = Path(args.out) if args.out else default_results_dir()
    with serve_llm(dtype=LLM_DTYPE) as url:
        repeats = [asyncio.run(measure(url, args.pairs, args.max_tokens, args.order, args.seed + k))
                   for k in range(args.repeat)]
        result = {**repeats[0], "repeats": repeats, "summary": summarize_repeats(repeats),
                  "provenance": provenance.collect(url, started_by_ayo=not given, dtype=LLM_DTYPE, outputs=(out,))}
    for r in repeats:
        ci = r["aa_ratio_interval"]
        print(f"A/A seed {r['seed']}: median run {r['median_s']:.2f} s, slowest/fastest "
              f"{r['spread_slowest_over_fastest']:.2f}; A/A ratio {ci['geomean']:.2f}x, 95 % interval "
              f"{ci['ci95_low']:.2f}-{ci['ci95_high']:.2f} over {ci['n']} pairs")
    out.mkdir(parents=True, exist_ok=True)
    (out / "noise_floor.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {provenance.shown_path(out / 'noise_floor.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
