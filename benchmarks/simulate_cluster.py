"""Ayo's cluster tier at scale, simulated: fake engines on the virtual clock.

16 LLM replicas and 4 embedding replicas (fake engines: :mod:`ayo_core.runtime.fakes`), one
in-memory vector store; an open-loop Poisson stream of the apps' graph shapes (naive RAG,
advanced RAG with expansion + rerank, tree summarize, a dynamic retrieve-per-plan-step graph)
at 50/70/90 % utilization. Three systems on the same replicas:

- ``stock_rr``: calls sent as stock sends them (each query's unoptimized graph, one call after
  the other, no priorities) to round-robin replicas serving first come first served;
- ``ayo_rr``: Ayo's optimized graphs and engine schedulers (critical-path policy), round-robin;
- ``ayo_affinity_program``: Ayo with prefix-affinity routing and program-level scheduling
  (least attained service per query, then critical-path slack).

Utilization: offered load relative to the stock system's saturation throughput, measured first
with a closed-loop burst of the same mix, ~8 queries per LLM batch slot (so 90 % is 90 % of
what stock can sustain at all).

Latency model (a 7B model, fp16, on one A100-80GB per LLM replica; sources: vLLM's and
Anyscale's published Llama-2-7B serving benchmarks): decode 15 ms per output token for one
sequence, continuous batching of up to 32 sequences at ~5 % extra per added sequence
(``batch_efficiency=0.95``); prefill ~8,000 tokens/s (0.125 ms per uncached prompt token;
prefix-cache hits cost nothing, 16-token blocks); 5 ms fixed per request. Embedding (a
MiniLM/bge-small class model on a GPU): 5 ms + 1 ms per text, batch efficiency 0.8. Vector
search: 2 ms + 0.5 ms per query vector. Fake tokens are words, so prompt lengths are the
graphs' word counts.

Also reported: Ayo's scheduling cost per query (real CPU time in routers and engine schedulers)
with 1 to 64 replicas. Default 2,000 queries per run (the issue asks 10,000: ``--queries
10000`` works, it takes ~5x longer on this 2-core machine). Results: JSON and a p95-vs-load
plot under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ayo_core.cluster.engine import ClusterLLMEngine, ReplicaPool, static_replicas
from ayo_core.passes import optimize_graph
from ayo_core.runtime import Engines, Runtime, SchedulerConfig, reference_run
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.fakes import FakeEmbedding, FakeLLM, FakeVectorStore, LatencyModel
from ayo_core.templates.examples import (
    advanced_rag_graph,
    dynamic_graph,
    example_inputs,
    example_responder,
    naive_rag_graph,
    tree_summarize_graph,
)

LLM_7B_A100 = LatencyModel(fixed=0.005, per_token=0.015, per_prompt_token=0.000125, batch_efficiency=0.95)
EMBED_GPU = LatencyModel(fixed=0.005, per_item=0.001, batch_efficiency=0.8)
SEARCH = LatencyModel(fixed=0.002, per_item=0.0005, batch_efficiency=0.5)
SYSTEMS = ("stock_rr", "ayo_rr", "ayo_affinity_program")
LOADS = (0.5, 0.7, 0.9)
N_CHUNKS = 16

# The mix: (weight, graph builder). Shapes of the five apps' graphs (see templates/examples).
MIX: list[tuple[float, str, Callable[[str], Any]]] = [
    (0.4, "naive_rag", lambda q: naive_rag_graph(q, n_chunks=N_CHUNKS)),
    (0.25, "advanced_rag", lambda q: advanced_rag_graph(q, n_chunks=N_CHUNKS)),
    (0.15, "tree_summarize", lambda q: tree_summarize_graph(q, n_chunks=N_CHUNKS)),
    (0.2, "dynamic", lambda q: dynamic_graph(q, n_chunks=N_CHUNKS)),
]


class FakeEmbedPool(ReplicaPool):
    """Embedding replicas in the simulation: least-outstanding routing, batching inside each."""

    async def aembed(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        result: list[list[float]] = await self._dispatch((), float(len(texts)), 0, lambda e: e.aembed(texts))
        return result


def make_engines(system: str, llm_replicas: int, embed_replicas: int) -> tuple[Engines, ClusterLLMEngine]:
    router = "prefix_affinity" if system == "ayo_affinity_program" else "round_robin"
    llms = [(f"llm-{i}", FakeLLM(LLM_7B_A100, responder=example_responder, max_concurrency=32))
            for i in range(llm_replicas)]
    llm = ClusterLLMEngine(static_replicas(llms), router=router, max_inflight_per_replica=32)
    embeds = [(f"embed-{i}", FakeEmbedding(EMBED_GPU)) for i in range(embed_replicas)]
    embed = FakeEmbedPool(static_replicas(embeds), router="least_outstanding", max_inflight_per_replica=4)
    return Engines(llm=llm, embed=embed, vector=FakeVectorStore(SEARCH, SEARCH)), llm


def make_jobs(n: int, seed: int) -> list[tuple[Any, dict]]:
    rng = random.Random(seed)
    weights = [w for w, _, _ in MIX]
    jobs = []
    for i in range(n):
        _, _, build = rng.choices(MIX, weights)[0]
        # a few popular questions recur (shared prefixes across queries, as in real traffic)
        question = f"question {rng.randrange(50)} about topic {rng.randrange(5)}"
        jobs.append((build(f"q{i}"), example_inputs(question, n_chunks=N_CHUNKS)))
    return jobs


async def run_query(system: str, graph: Any, inputs: dict, engines: Engines, rt: Runtime) -> float:
    """One query as ``system`` sends it (stock: the unoptimized graph, one call after the other; Ayo:
    optimized, on ``rt``); returns Ayo's scheduling CPU seconds for it (0 for stock)."""
    if system == "stock_rr":
        await reference_run(graph, inputs, engines, inline_sync=True)
        return 0.0
    _, trace = await rt.run(optimize_graph(graph), inputs)
    return trace.overhead.get("scheduling", 0.0)


async def run_system(system: str, jobs: list[tuple[Any, dict]], rate: float | None, llm_replicas: int,
                     embed_replicas: int, seed: int) -> dict[str, Any]:
    """Run ``jobs`` open-loop at ``rate`` queries/s (None: closed loop, all at once)."""
    engines, llm = make_engines(system, llm_replicas, embed_replicas)
    policy = "program" if system == "ayo_affinity_program" else "critical_path"
    configs = {"llm": SchedulerConfig(max_inflight=32 * llm_replicas, max_queue=10**6),
               "embed": SchedulerConfig(max_inflight=4 * embed_replicas, max_batch_items=64,
                                        merge={"aembed": "texts"}, max_queue=10**6)}
    rt = Runtime(engines, policy=policy, configs=configs, inline_sync=True)
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    latencies: list[float] = []
    sched_cpu = 0.0
    t0 = loop.time()

    async def one(graph: Any, inputs: dict, at: float) -> None:
        nonlocal sched_cpu
        await asyncio.sleep(max(0.0, at - (loop.time() - t0)))
        start = loop.time()
        sched_cpu += await run_query(system, graph, inputs, engines, rt)
        latencies.append(loop.time() - start)

    at, tasks = 0.0, []
    for graph, inputs in jobs:
        tasks.append(one(graph, inputs, at))
        if rate is not None:
            at += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    makespan = loop.time() - t0
    latencies.sort()
    return {"system": system, "queries": len(jobs), "p50": statistics.median(latencies),
            "p95": latencies[int(0.95 * (len(latencies) - 1))], "throughput": len(jobs) / makespan,
            "makespan": makespan, "scheduling_ms_per_query": 1000 * sched_cpu / len(jobs),
            "resent": llm.resent, "llm_hit_rate": _hit_rate(llm)}


def _hit_rate(llm: ClusterLLMEngine) -> float:
    loads = llm.loads()
    prompt = sum(x.prompt_tokens for x in loads)
    return sum(x.cached_tokens for x in loads) / prompt if prompt else 0.0


async def one_alone(build: Callable[[str], Any], system: str) -> float:
    """One query of a shape on one idle replica set: its latency with no load at all."""
    engines, _ = make_engines(system, 1, 1)
    inputs = example_inputs("question 3 about topic 1", n_chunks=N_CHUNKS)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await run_query(system, build("q"), inputs, engines, Runtime(engines, policy="critical_path", inline_sync=True))
    return loop.time() - start


def zero_load() -> dict[str, dict[str, float]]:
    """Each shape of the mix alone, stock vs Ayo: the floor under any p95 a scheduler can reach (the mix's
    p95 cannot drop below its slowest frequent shape's zero-load latency)."""
    out = {}
    for weight, name, build in MIX:
        stock = run_virtual(lambda b=build: one_alone(b, "stock_rr"))
        ayo = run_virtual(lambda b=build: one_alone(b, "ayo_rr"))
        out[name] = {"weight": weight, "stock_s": stock, "ayo_s": ayo}
    return out


def scheduling_cost(replicas: list[int], n: int, seed: int, qps_per_replica: float) -> dict[int, Any]:
    """Real CPU ms per query in Ayo's engine schedulers (policy ordering, batching, routing), by
    replica count, at 70 % load scaled with the replicas."""
    out = {}
    for r in replicas:
        jobs = make_jobs(n, seed)
        t0 = time.process_time()
        res = run_virtual(lambda r=r, jobs=jobs: run_system("ayo_affinity_program", jobs, 0.7 * qps_per_replica * r,
                                                            r, max(1, r // 4), seed))
        out[r] = {"scheduling_ms_per_query": res["scheduling_ms_per_query"],
                  "total_cpu_ms_per_query": 1000 * (time.process_time() - t0) / n}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--llm-replicas", type=int, default=16)
    ap.add_argument("--embed-replicas", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    floors = zero_load()
    for name, f in floors.items():
        print(f"zero load, {name:<15} (weight {f['weight']:.2f}): stock {f['stock_s']:.2f} s, Ayo {f['ayo_s']:.2f} s "
              f"({f['stock_s'] / f['ayo_s']:.2f}x)")
    jobs = make_jobs(args.queries, args.seed)
    # Saturation: a closed-loop burst deep enough (~8 queries per LLM batch slot) that the replicas
    # run full batches for most of the makespan.
    burst = 8 * 32 * args.llm_replicas
    sat = run_virtual(lambda: run_system("stock_rr", make_jobs(burst, args.seed + 1), None,
                                         args.llm_replicas, args.embed_replicas, args.seed))
    capacity = sat["throughput"]
    print(f"stock saturation throughput: {capacity:.1f} queries/s ({args.llm_replicas} LLM replicas)")
    rows = []
    for load in LOADS:
        for system in SYSTEMS:
            res = run_virtual(lambda s=system, load=load: run_system(
                s, make_jobs(args.queries, args.seed), capacity * load, args.llm_replicas, args.embed_replicas,
                args.seed))
            res["load"] = load
            rows.append(res)
            print(f"load {load:.0%} {system:<22} p50 {res['p50']:.2f}s p95 {res['p95']:.2f}s "
                  f"throughput {res['throughput']:.1f} q/s  hit {res['llm_hit_rate']:.0%}", flush=True)
    del jobs
    summary = summarize(rows)
    cost = scheduling_cost([1, 4, 16, 64], 300, args.seed, capacity / args.llm_replicas)
    for r, c in cost.items():
        print(f"scheduling cost, {r:>2} replicas: {c['scheduling_ms_per_query']:.3f} ms/query "
              f"(all simulation CPU: {c['total_cpu_ms_per_query']:.1f} ms/query)")
    print(json.dumps(summary, indent=1))
    save(args, capacity, rows, summary, cost, floors)
    return 0


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets: p95 ratio at 70 % and throughput at the stock's 70 % p95."""
    by = {(r["system"], r["load"]): r for r in rows}
    stock70 = by[("stock_rr", 0.7)]["p95"]
    out: dict[str, Any] = {"p95_ratio_stock_over_ayo_full_at_70": stock70 / by[("ayo_affinity_program", 0.7)]["p95"]}
    for system in SYSTEMS:
        ok = [r for r in rows if r["system"] == system and r["p95"] <= stock70]
        out[f"max_throughput_within_stock_p95_{system}"] = max((r["throughput"] for r in ok), default=0.0)
    base = out["max_throughput_within_stock_p95_stock_rr"]
    out["throughput_ratio_at_stock_p95"] = out["max_throughput_within_stock_p95_ayo_affinity_program"] / base
    return out


def save(args: argparse.Namespace, capacity: float, rows: list, summary: dict, cost: dict,
         floors: dict | None = None) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    data = {"provenance": {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "engines": "fake (virtual clock), 7B/A100 latency model stated in the script",
                           "queries": args.queries, "llm_replicas": args.llm_replicas,
                           "embed_replicas": args.embed_replicas},
            "stock_saturation_qps": capacity, "rows": rows, "summary": summary, "scheduling_cost": cost,
            "zero_load": floors}
    (out / "simulate_cluster.json").write_text(json.dumps(data, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for system in SYSTEMS:
        pts = sorted((r["load"], r["p95"]) for r in rows if r["system"] == system)
        ax.plot([100 * x for x, _ in pts], [y for _, y in pts], marker="o", label=system)
    ax.set_xlabel("offered load (% of stock saturation throughput)")
    ax.set_ylabel("p95 latency (s)")
    ax.set_title(f"{args.llm_replicas} LLM + {args.embed_replicas} embedding replicas (simulated)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "simulate_cluster.png", dpi=120)
    print(f"wrote {out / 'simulate_cluster.json'} and {out / 'simulate_cluster.png'}")


if __name__ == "__main__":
    raise SystemExit(main())
