"""Ayo's cluster tier at scale, simulated: fake engines on the virtual clock.

16 LLM replicas and 4 embedding replicas (fake engines: :mod:`ayo_core.runtime.fakes`,
:mod:`ayo_core.runtime.fake_serving`), one
in-memory vector store; an open-loop Poisson stream of the apps' graph shapes (naive RAG,
advanced RAG with expansion + rerank, tree summarize, a dynamic retrieve-per-plan-step graph)
at 50/70/90 % utilization. Three systems on the same replicas:

- ``stock_rr``: calls sent as stock sends them (each query's unoptimized graph, one call after
  the other, no priorities) to round-robin replicas serving first come first served;
- ``ayo_rr``: Ayo's optimized graphs and engine schedulers (critical-path policy), round-robin;
- ``ayo_affinity_program``: Ayo with prefix-affinity routing and program-level scheduling
  (least attained service per query, then critical-path slack).

Utilization: offered load relative to the stock system's saturation throughput, measured first
with a closed-loop burst of the same mix deep enough to keep every replica full (``saturation``),
so 90 % is 90 % of what stock can sustain at all.

Replicas (``--replica-model``), both a 7B model, fp16, on one A100-80GB per LLM replica:

- ``serving`` (default): :class:`~ayo_core.runtime.fake_serving.ServingFakeLLM`, a replica that
  batches as vLLM does: one step per output token for every running sequence, new prompts
  prefilled in chunks of up to 2,048 tokens inside the same steps, a request admitted only while
  the KV cache has room for its prompt and output budget, waiting requests by priority then
  arrival. A step costs 15 ms (weights read once; vLLM's and Anyscale's published Llama-2-7B
  figures give 12-15 ms per token for one sequence) + 0.1 ms per further sequence (14 GFLOP per
  token at half of the A100's 312 TFLOP/s) + 0.33 us per token of KV the step reads (512 KiB per
  token for Llama-2-7B at ~1.6 TB/s of the A100's 2 TB/s) + 0.125 ms per prefilled prompt token
  (~8,000 tokens/s); KV cache 100,000 tokens (80 GB x 0.9 - 13.5 GB weights - activations, at
  512 KiB per token); at most 256 running sequences (vLLM's ``max_num_seqs``); 5 ms per request
  outside the engine. The prefix cache is LRU over the KV cache's 16-token blocks.
- ``slots``: :class:`~ayo_core.runtime.fakes.FakeLLM`, the first version of this benchmark: 32
  sequence slots per replica, decode 15 ms per output token at ~5 % extra per added sequence
  (``batch_efficiency=0.95``), the same prefill cost, an unbounded prefix cache. No queue forms
  below its saturation, so scheduling policies have little to act on.

Embedding (a MiniLM/bge-small class model on a GPU): 5 ms + 1 ms per text, batch efficiency 0.8.
Vector search: 2 ms + 0.5 ms per query vector. Fake tokens are words, so prompt lengths are the
graphs' word counts. Every system answers the same jobs; the results say whether all answers were
identical.

Also reported: Ayo's scheduling cost per query (real CPU time in routers and engine schedulers)
with 1 to 64 replicas, and, past stock's saturation, the most load Ayo carries within stock's
p95 at 70 %. Default 2,000 queries per run (``--queries 10000``: ~5x longer). Results: JSON and
a p95-vs-load plot under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ayo_core.cluster.engine import ClusterLLMEngine, ReplicaPool, static_replicas
from ayo_core.passes import optimize_graph
from ayo_core.runtime import Engines, Runtime, SchedulerConfig, reference_run
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.fake_serving import ServingFakeLLM, StepModel
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
# The same model as a serving engine (``--replica-model serving``, the default; see the module doc).
SERVING_7B_A100 = StepModel(fixed=0.005, step_base=0.015, per_sequence=0.0001, per_context_token=3.3e-7,
                            per_prefill_token=0.000125, prefill_chunk=2048, kv_tokens=100_000, max_seqs=256)
SLOTS_PER_REPLICA = 32  # --replica-model slots: FakeLLM's sequence slots per replica
EMBED_GPU = LatencyModel(fixed=0.005, per_item=0.001, batch_efficiency=0.8)
SEARCH = LatencyModel(fixed=0.002, per_item=0.0005, batch_efficiency=0.5)
SYSTEMS = ("stock_rr", "ayo_rr", "ayo_affinity_program")
# Ablation at 70 %: prefix affinity with Ayo's default policy (critical path), no program-level
# scheduling: what each of the two contributes.
ABLATION = "ayo_affinity"
LOADS = (0.5, 0.7, 0.9)
BEYOND = (1.0, 1.15, 1.3, 1.5, 1.75, 2.0)  # Ayo alone, until its p95 passes stock's at 70 %
N_CHUNKS = 16
# How many different questions the stream draws from: with 10,000 queries each recurs ~40 times, and
# prefix affinity finds their prompts cached (the figures depend on it: --distinct-questions).
DISTINCT_QUESTIONS = 250

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


def replica_slots(replica_model: str) -> int:
    """Requests Ayo keeps in flight per LLM replica: as many as the replica runs at once."""
    return SERVING_7B_A100.max_seqs if replica_model == "serving" else SLOTS_PER_REPLICA


def make_llm(replica_model: str) -> FakeLLM:
    if replica_model == "serving":
        return ServingFakeLLM(SERVING_7B_A100, responder=example_responder)
    return FakeLLM(LLM_7B_A100, responder=example_responder, max_concurrency=SLOTS_PER_REPLICA)


def make_engines(system: str, llm_replicas: int, embed_replicas: int,
                 replica_model: str = "serving") -> tuple[Engines, ClusterLLMEngine]:
    router = "prefix_affinity" if system in ("ayo_affinity_program", ABLATION) else "round_robin"
    llms = [(f"llm-{i}", make_llm(replica_model)) for i in range(llm_replicas)]
    llm = ClusterLLMEngine(static_replicas(llms), router=router, max_inflight_per_replica=replica_slots(replica_model))
    embeds = [(f"embed-{i}", FakeEmbedding(EMBED_GPU)) for i in range(embed_replicas)]
    embed = FakeEmbedPool(static_replicas(embeds), router="least_outstanding", max_inflight_per_replica=4)
    return Engines(llm=llm, embed=embed, vector=FakeVectorStore(SEARCH, SEARCH)), llm


def make_jobs(n: int, seed: int, distinct: int = DISTINCT_QUESTIONS) -> list[tuple[Any, dict]]:
    rng = random.Random(seed)
    weights = [w for w, _, _ in MIX]
    jobs = []
    for i in range(n):
        _, shape, build = rng.choices(MIX, weights)[0]
        # questions recur (shared prefixes across queries): ``distinct`` of them, drawn uniformly
        question = f"question {rng.randrange(max(1, distinct // 5))} about topic {rng.randrange(5)}"
        graph = build(f"q{i}")
        graph.shape = shape  # which of the mix's shapes (per-shape latencies in the results)
        jobs.append((graph, example_inputs(question, n_chunks=N_CHUNKS)))
    return jobs


async def run_query(system: str, graph: Any, inputs: dict, engines: Engines, rt: Runtime) -> tuple[Any, float]:
    """One query as ``system`` sends it (stock: the unoptimized graph, one call after the other; Ayo:
    optimized, on ``rt``); returns its answer and Ayo's scheduling CPU seconds for it (0 for stock)."""
    if system == "stock_rr":
        answer, _ = await reference_run(graph, inputs, engines, inline_sync=True)
        return answer, 0.0
    answer, trace = await rt.run(optimize_graph(graph), inputs)
    return answer, trace.overhead.get("scheduling", 0.0)


async def run_system(system: str, jobs: list[tuple[Any, dict]], rate: float | None, llm_replicas: int,
                     embed_replicas: int, seed: int, replica_model: str = "serving") -> dict[str, Any]:
    """Run ``jobs`` open-loop at ``rate`` queries/s (None: closed loop, all at once)."""
    engines, llm = make_engines(system, llm_replicas, embed_replicas, replica_model)
    policy = "program" if system == "ayo_affinity_program" else "critical_path"
    configs = {"llm": SchedulerConfig(max_inflight=replica_slots(replica_model) * llm_replicas, max_queue=10**6),
               "embed": SchedulerConfig(max_inflight=4 * embed_replicas, max_batch_items=64,
                                        merge={"aembed": "texts"}, max_queue=10**6)}
    rt = Runtime(engines, policy=policy, configs=configs, inline_sync=True)
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    latencies: list[float] = []
    by_shape: dict[str, list[float]] = {}
    answers: list[Any] = [None] * len(jobs)
    sched_cpu = 0.0
    t0 = loop.time()

    async def one(i: int, graph: Any, inputs: dict, at: float) -> None:
        nonlocal sched_cpu
        await asyncio.sleep(max(0.0, at - (loop.time() - t0)))
        start = loop.time()
        answers[i], cpu = await run_query(system, graph, inputs, engines, rt)
        sched_cpu += cpu
        latencies.append(loop.time() - start)
        by_shape.setdefault(getattr(graph, "shape", "?"), []).append(latencies[-1])

    at, tasks = 0.0, []
    for i, (graph, inputs) in enumerate(jobs):
        tasks.append(one(i, graph, inputs, at))
        if rate is not None:
            at += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    makespan = loop.time() - t0
    latencies.sort()
    return {"system": system, "queries": len(jobs), "p50": statistics.median(latencies),
            "p95": _p95(latencies), "throughput": len(jobs) / makespan,
            "p95_by_shape": {shape: _p95(sorted(xs)) for shape, xs in sorted(by_shape.items())},
            "makespan": makespan, "scheduling_ms_per_query": 1000 * sched_cpu / len(jobs),
            "resent": llm.resent, "llm_hit_rate": _hit_rate(llm), **_replica_figures(llm, makespan),
            # the answers in job order: every system must give the same ones for the same jobs
            "answers_sha256": hashlib.sha256(json.dumps(answers, default=repr).encode()).hexdigest()}


def _p95(ordered: list[float]) -> float:
    return ordered[int(0.95 * (len(ordered) - 1))]


def _replica_figures(llm: ClusterLLMEngine, makespan: float) -> dict[str, float]:
    """How busy the serving replicas were and how deep their queues got (the serving model only)."""
    engines = [rep.engine for rep in llm.replicas.values() if isinstance(rep.engine, ServingFakeLLM)]
    if not engines or makespan <= 0:
        return {}
    return {"llm_busy": statistics.mean(e.busy_s / makespan for e in engines),
            "llm_mean_batch": statistics.mean(e.sequence_s / makespan for e in engines),
            "llm_max_waiting": max(e.max_waiting for e in engines)}


def _hit_rate(llm: ClusterLLMEngine) -> float:
    loads = llm.loads()
    prompt = sum(x.prompt_tokens for x in loads)
    return sum(x.cached_tokens for x in loads) / prompt if prompt else 0.0


async def one_alone(build: Callable[[str], Any], system: str, replica_model: str) -> float:
    """One query of a shape on one idle replica set: its latency with no load at all."""
    engines, _ = make_engines(system, 1, 1, replica_model)
    inputs = example_inputs("question 3 about topic 1", n_chunks=N_CHUNKS)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await run_query(system, build("q"), inputs, engines, Runtime(engines, policy="critical_path", inline_sync=True))
    return loop.time() - start


def zero_load(replica_model: str) -> dict[str, dict[str, float]]:
    """Each shape of the mix alone, stock vs Ayo: the floor under any p95 a scheduler can reach (the mix's
    p95 cannot drop below its slowest frequent shape's zero-load latency)."""
    out = {}
    for weight, name, build in MIX:
        stock = run_virtual(lambda b=build: one_alone(b, "stock_rr", replica_model))
        ayo = run_virtual(lambda b=build: one_alone(b, "ayo_rr", replica_model))
        out[name] = {"weight": weight, "stock_s": stock, "ayo_s": ayo}
    return out


def scheduling_cost(replicas: list[int], n: int, seed: int, qps_per_replica: float,
                    replica_model: str) -> dict[int, Any]:
    """Real ms per query in Ayo's engine schedulers (policy ordering, batching, routing), by
    replica count, at 70 % load scaled with the replicas.

    The cyclic garbage collector is held off during each run and its time is reported apart
    (``gc_ms_per_query``): a collection scans the whole simulation's heap (every replica's and
    query's objects), and where one lands inside a scheduling section it was charged to scheduling,
    which made the figure jump between 0.4 and 1.1 ms from run to run of the same code.
    """
    out = {}
    for r in replicas:
        jobs = make_jobs(n, seed)
        gc.collect()
        t0 = time.process_time()
        gc.disable()
        try:
            res = run_virtual(lambda r=r, jobs=jobs: run_system("ayo_affinity_program", jobs,
                                                                0.7 * qps_per_replica * r, r, max(1, r // 4),
                                                                seed, replica_model))
        finally:
            gc.enable()
        t1 = time.process_time()
        gc.collect()
        out[r] = {"scheduling_ms_per_query": res["scheduling_ms_per_query"],
                  "total_cpu_ms_per_query": 1000 * (time.process_time() - t0) / n,
                  "gc_ms_per_query": 1000 * (time.process_time() - t1) / n}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--llm-replicas", type=int, default=16)
    ap.add_argument("--embed-replicas", type=int, default=4)
    ap.add_argument("--replica-model", choices=("serving", "slots"), default="serving",
                    help="serving: continuous batching with a KV-cache bound (ServingFakeLLM); slots: FakeLLM's "
                         "fixed sequence slots (the first version of this benchmark)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--distinct-questions", type=int, default=DISTINCT_QUESTIONS,
                    help="how many different questions the query stream draws from (a multiple of 5)")
    ap.add_argument("--cost-replicas", type=lambda v: [int(x) for x in v.split(",")], default=[1, 4, 16, 64],
                    help="replica counts of the scheduling-cost runs (comma-separated)")
    ap.add_argument("--cost-queries", type=int, default=300)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    model = args.replica_model
    floors = zero_load(model)
    for name, f in floors.items():
        print(f"zero load, {name:<15} (weight {f['weight']:.2f}): stock {f['stock_s']:.2f} s, Ayo {f['ayo_s']:.2f} s "
              f"({f['stock_s'] / f['ayo_s']:.2f}x)")
    capacity = saturation(args, model)
    print(f"stock saturation throughput: {capacity:.1f} queries/s ({args.llm_replicas} LLM replicas, {model})")
    rows = []
    for load in LOADS:
        for system in SYSTEMS:
            rows.append(measure(args, model, system, load, capacity))
    rows.append(measure(args, model, ABLATION, 0.7, capacity))
    stock70 = next(r["p95"] for r in rows if r["system"] == "stock_rr" and r["load"] == 0.7)
    # Past stock's saturation: the most load Ayo carries within stock's 70 % p95 (the throughput target).
    for load in BEYOND:
        row = measure(args, model, "ayo_affinity_program", load, capacity)
        rows.append(row)
        if row["p95"] > stock70:
            break
    summary = summarize(rows)
    summary["answers_identical"] = len({r["answers_sha256"] for r in rows}) == 1
    print(f"answers identical across every system and load: {summary['answers_identical']}")
    cost = scheduling_cost(args.cost_replicas, args.cost_queries, args.seed, capacity / args.llm_replicas, model)
    for r, c in cost.items():
        print(f"scheduling cost, {r:>2} replicas: {c['scheduling_ms_per_query']:.3f} ms/query "
              f"(all simulation CPU: {c['total_cpu_ms_per_query']:.1f} ms/query, of which the collector "
              f"after the run: {c['gc_ms_per_query']:.2f} ms/query)")
    print(json.dumps(summary, indent=1))
    save(args, capacity, rows, summary, cost, floors)
    return 0


def saturation(args: argparse.Namespace, model: str) -> float:
    """Stock's saturation throughput: a closed-loop burst deep enough (~4 queries per LLM batch
    slot; with the serving model, where the KV cache admits ~200 sequences, ~2) that the replicas run
    full batches for most of the makespan."""
    burst = (512 if model == "serving" else 8 * SLOTS_PER_REPLICA) * args.llm_replicas
    sat = run_virtual(lambda: run_system("stock_rr", make_jobs(burst, args.seed + 1, args.distinct_questions), None,
                                         args.llm_replicas, args.embed_replicas, args.seed, model))
    return float(sat["throughput"])


def measure(args: argparse.Namespace, model: str, system: str, load: float, capacity: float) -> dict[str, Any]:
    res = run_virtual(lambda: run_system(system, make_jobs(args.queries, args.seed, args.distinct_questions), capacity * load,
                                         args.llm_replicas, args.embed_replicas, args.seed, model))
    res["load"] = load
    busy = (f"  mean batch {res['llm_mean_batch']:.0f} sequences, deepest queue {res['llm_max_waiting']}"
            if "llm_busy" in res else "")
    print(f"load {load:.0%} {system:<22} p50 {res['p50']:.2f}s p95 {res['p95']:.2f}s "
          f"throughput {res['throughput']:.1f} q/s  hit {res['llm_hit_rate']:.0%}{busy}", flush=True)
    return res


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets: p95 ratio at 70 % and throughput at the stock's 70 % p95."""
    by = {(r["system"], r["load"]): r for r in rows}
    stock70 = by[("stock_rr", 0.7)]["p95"]
    out: dict[str, Any] = {"p95_ratio_stock_over_ayo_full_at_70": stock70 / by[("ayo_affinity_program", 0.7)]["p95"]}
    for system in ("ayo_rr", ABLATION):
        if (system, 0.7) in by:
            out[f"p95_ratio_stock_over_{system}_at_70"] = stock70 / by[(system, 0.7)]["p95"]
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
    from ayo_bench import provenance

    # the full provenance every results file carries (commit, dirty flag, machine); no server took part
    data = {"provenance": {**provenance.collect(None, False, "none", outputs=(out,)),
                           "engines": "fake (virtual clock), 7B/A100 latency model stated in the script",
                           "queries": args.queries, "llm_replicas": args.llm_replicas,
                           "replica_model": args.replica_model, "distinct_questions": args.distinct_questions,
                           "embed_replicas": args.embed_replicas},
            "stock_saturation_qps": capacity, "rows": rows, "summary": summary, "scheduling_cost": cost,
            "zero_load": floors}
    stem = "simulate_cluster" if args.replica_model == "serving" else f"simulate_cluster-{args.replica_model}"
    if args.distinct_questions != DISTINCT_QUESTIONS:
        stem += f"-{args.distinct_questions}q"
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for system in SYSTEMS:
        pts = sorted((r["load"], r["p95"]) for r in rows if r["system"] == system)
        ax.plot([100 * x for x, _ in pts], [y for _, y in pts], marker="o", label=system)
    ax.set_xlabel("offered load (% of stock saturation throughput)")
    ax.set_ylabel("p95 latency (s)")
    ax.set_title(f"{args.llm_replicas} LLM + {args.embed_replicas} embedding replicas "
                 f"(simulated, {args.replica_model} replicas)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{stem}.png", dpi=120)
    print(f"wrote {out / f'{stem}.json'} and {out / f'{stem}.png'}")


if __name__ == "__main__":
    raise SystemExit(main())
