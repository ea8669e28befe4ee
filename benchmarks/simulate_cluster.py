"""Ayo's cluster tier at scale, simulated: fake engines on the virtual clock.

16 LLM replicas and 4 embedding replicas (fake engines: :mod:`ayo_core.runtime.fake_serving`,
:mod:`ayo_core.runtime.fakes`), one in-memory vector store; an open-loop Poisson stream of the
apps' graph shapes (naive RAG, advanced RAG with expansion + rerank, tree summarize, a dynamic
retrieve-per-plan-step graph; :mod:`benchmarks.cluster_workload`) at 50/70/90 % utilization.
Systems on the same replicas:

- stock, each query's unoptimized graph run as its framework runs it (``stock_run``: what
  LlamaIndex gathers with ``use_async=True`` runs concurrently, the rest in order; no priorities),
  behind each router production stacks give a stock deployment: ``stock_rr`` (round robin),
  ``stock_least_outstanding`` (least outstanding work) and ``stock_prefix_aware`` (the replica
  that last served the prompt's longest prefix, with a load guard: llm-d's and vLLM
  production-stack's KV-aware routers, the SGLang router; the routers look at prompts and load
  only, nothing of Ayo's);
- ``ayo_rr``: Ayo's optimized graphs and engine schedulers (critical-path policy), round robin;
- ``ayo_affinity_program``: Ayo with prefix-affinity routing and program-level scheduling (least
  attained service per query, then critical-path slack);
- ``ayo_affinity`` (ablation, at 70 %): prefix affinity with the critical-path policy.

The headline at each load is Ayo against the *best* stock configuration at that load.

Utilization: offered load relative to stock's saturation throughput, the highest of the three
stock configurations', each measured first with a closed-loop burst of the same mix deep enough
to keep every replica full, so 90 % is 90 % of what the best stock can sustain at all.

Step costs come from a deployment profile (``--profile``, default ``a100-llama2-7b``; every
constant with its source in ``ayo_core/emulate/profiles/NAME.json``): the LLM replicas' step model
(:class:`~ayo_core.emulate.step_engine.StepModel`) and the embedding device's batch cost. Replicas
(``--replica-model``):

- ``serving`` (default): :class:`~ayo_core.runtime.fake_serving.ServingFakeLLM`, a replica that
  batches as vLLM does (one step per output token for every running sequence, chunked prefill
  inside the steps, admission bounded by the KV cache, waiting requests by priority then
  arrival, an LRU prefix cache over 16-token blocks), costs from the profile's step model;
- ``slots``: :class:`~ayo_core.runtime.fakes.FakeLLM`, the first version of this benchmark: 32
  sequence slots per replica, a token at the profile's one-sequence step cost slowed ~5 % per
  added sequence, prefill at the profile's per-token cost; an unbounded prefix cache.

Vector search (in memory, not in the profiles): 2 ms + 0.5 ms per query vector. Fake tokens are
words. Every query indexes its own documents, drawn from a pool (``--doc-pool``,
``--doc-overlap``); questions recur (``--distinct-questions``); the results carry the repeat rates
the figures assume (queries whose question was asked before, prompt tokens an unbounded shared
prefix cache would have served). Every system answers the same jobs; the results say whether all
answers were identical.

Scheduling cost: Ayo's real CPU time in routers and engine schedulers per query, recorded in
every Ayo run of the figures (the collector running as it runs); a separate diagnostic runs 1 to
64 replicas with the collector held off to show how it scales. Past stock's saturation: the most
load Ayo carries within the best stock's p95 at 70 %. Default 2,000 queries per run
(``--queries 10000``: ~5x longer). Results: JSON and a p95-vs-load plot under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* importable

from ayo_core.cluster.engine import ClusterLLMEngine, ReplicaPool, static_replicas  # noqa: E402
from ayo_core.emulate.profile import EmbedCost, Profile, load_profile  # noqa: E402
from ayo_core.passes import optimize_graph  # noqa: E402
from ayo_core.runtime import Engines, Runtime, SchedulerConfig, reference_run  # noqa: E402
from ayo_core.runtime.clock import run_virtual  # noqa: E402
from ayo_core.runtime.fake_serving import ServingFakeLLM  # noqa: E402
from ayo_core.runtime.fakes import FakeEmbedding, FakeLLM, FakeVectorStore, LatencyModel  # noqa: E402
from ayo_core.runtime.stock_runner import stock_run  # noqa: E402
from ayo_core.templates.examples import example_inputs, example_responder  # noqa: E402
from benchmarks.cluster_workload import (  # noqa: E402
    DISTINCT_QUESTIONS,
    DOC_OVERLAP,
    DOC_POOL,
    DOCS_PER_QUERY,
    MIX,
    STOCK_CONCURRENCY,
    make_jobs,
    own_collection,
    prefix_hit_possible,
    question_repeat_share,
)

DEFAULT_PROFILE = "a100-llama2-7b"
SLOTS_PER_REPLICA = 32  # --replica-model slots: FakeLLM's sequence slots per replica
SEARCH = LatencyModel(fixed=0.002, per_item=0.0005, batch_efficiency=0.5)
STOCK_SYSTEMS = ("stock_rr", "stock_least_outstanding", "stock_prefix_aware")
SYSTEMS = (*STOCK_SYSTEMS, "ayo_rr", "ayo_affinity_program")
AYO = "ayo_affinity_program"
# Ablation at 70 %: prefix affinity with Ayo's default policy (critical path), no program-level
# scheduling: what each of the two contributes.
ABLATION = "ayo_affinity"
ROUTER = {"stock_rr": "round_robin", "stock_least_outstanding": "least_outstanding",
          "stock_prefix_aware": "prefix_affinity", "ayo_rr": "round_robin", AYO: "prefix_affinity",
          ABLATION: "prefix_affinity", "stock_sequential": "round_robin"}
LOADS = (0.5, 0.7, 0.9)
BEYOND = (1.0, 1.15, 1.3, 1.5, 1.75, 2.0)  # Ayo alone, until its p95 passes the best stock's at 70 %


@dataclass(frozen=True)
class Deployment:
    """What every replica costs: one profile, one replica model."""

    profile: Profile
    replica_model: str = "serving"

    @property
    def slots(self) -> int:
        """Requests Ayo keeps in flight per LLM replica: as many as the replica runs at once."""
        return self.profile.llm.max_seqs if self.replica_model == "serving" else SLOTS_PER_REPLICA

    def llm(self) -> FakeLLM:
        step = self.profile.llm
        if self.replica_model == "serving":
            return ServingFakeLLM(step, responder=example_responder, block=self.profile.prefix_block)
        latency = LatencyModel(fixed=step.fixed, per_token=step.step_base, batch_efficiency=0.95,
                               per_prompt_token=max(step.per_prefill_token, step.token_roofline_s))
        return FakeLLM(latency, responder=example_responder, max_concurrency=SLOTS_PER_REPLICA,
                       block=self.profile.prefix_block)


def default_deployment() -> Deployment:
    return Deployment(load_profile(DEFAULT_PROFILE))


class ProfileEmbedding(FakeEmbedding):
    """An embedding replica at the profile's batch cost (one device: its calls one after the other)."""

    def __init__(self, cost: EmbedCost):
        super().__init__()
        self.cost = cost

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        if self._worker is None:
            self._worker = asyncio.Lock()
        async with self._worker:
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i in range(0, len(texts), max(1, self.cost.max_batch)):
                batch = texts[i:i + max(1, self.cost.max_batch)]
                await asyncio.sleep(self.cost.batch_s(len(batch), sum(len(t.split()) for t in batch)))
            self.calls.append((len(texts), start, loop.time()))
            return self.embed(texts)


class FakeEmbedPool(ReplicaPool):
    """Embedding replicas in the simulation: least-outstanding routing, batching inside each."""

    async def aembed(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        result: list[list[float]] = await self._dispatch((), float(len(texts)), 0, lambda e: e.aembed(texts))
        return result


def make_engines(system: str, llm_replicas: int, embed_replicas: int,
                 dep: Deployment) -> tuple[Engines, ClusterLLMEngine]:
    llms = [(f"llm-{i}", dep.llm()) for i in range(llm_replicas)]
    llm = ClusterLLMEngine(static_replicas(llms), router=ROUTER[system], max_inflight_per_replica=dep.slots)
    embeds = [(f"embed-{i}", ProfileEmbedding(dep.profile.embed)) for i in range(embed_replicas)]
    embed = FakeEmbedPool(static_replicas(embeds), router="least_outstanding", max_inflight_per_replica=4)
    return Engines(llm=llm, embed=embed, vector=FakeVectorStore(SEARCH, SEARCH)), llm


async def run_query(system: str, graph: Any, inputs: dict, engines: Engines, rt: Runtime) -> tuple[Any, float]:
    """One query as ``system`` sends it (stock: the unoptimized graph with its framework's concurrency;
    ``stock_sequential``: one call after the other; Ayo: optimized, on ``rt``); returns its answer and
    Ayo's scheduling CPU seconds for it (0 for stock)."""
    if system == "stock_sequential":
        answer, _ = await reference_run(graph, inputs, engines, inline_sync=True)
        return answer, 0.0
    if system in STOCK_SYSTEMS:
        answer, _ = await stock_run(graph, inputs, engines, concurrency=STOCK_CONCURRENCY[graph.shape],
                                    inline_sync=True)
        return answer, 0.0
    answer, trace = await rt.run(optimize_graph(graph), inputs)
    return answer, trace.overhead.get("scheduling", 0.0)


async def run_system(system: str, jobs: list[tuple[Any, dict]], rate: float | None, llm_replicas: int,
                     embed_replicas: int, seed: int, dep: Deployment | None = None) -> dict[str, Any]:
    """Run ``jobs`` open-loop at ``rate`` queries/s (None: closed loop, all at once)."""
    dep = dep or default_deployment()
    engines, llm = make_engines(system, llm_replicas, embed_replicas, dep)
    policy = "program" if system == AYO else "critical_path"
    configs = {"llm": SchedulerConfig(max_inflight=dep.slots * llm_replicas, max_queue=10**6),
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
    row = {"system": system, "queries": len(jobs), "p50": statistics.median(latencies),
           "p95": _p95(latencies), "throughput": len(jobs) / makespan,
           "p95_by_shape": {shape: _p95(sorted(xs)) for shape, xs in sorted(by_shape.items())},
           "makespan": makespan, "scheduling_ms_per_query": 1000 * sched_cpu / len(jobs),
           "resent": llm.resent, "llm_hit_rate": _hit_rate(llm), **_replica_figures(llm, makespan),
           # the answers in job order: every system must give the same ones for the same jobs
           "answers_sha256": hashlib.sha256(json.dumps(answers, default=repr).encode()).hexdigest()}
    if system == "stock_rr":  # the stream's own property, read from the prompts stock sent
        row["prefix_hit_possible"] = _prefix_hit_possible(llm)
    return row


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


def _prefix_hit_possible(llm: ClusterLLMEngine) -> float:
    calls = sorted((c for rep in llm.replicas.values() for c in rep.engine.calls), key=lambda c: c.start)
    return prefix_hit_possible(c.prompt for c in calls)


async def one_alone(shape: str, system: str, dep: Deployment) -> float:
    """One query of a shape on one idle replica set: its latency with no load at all."""
    engines, _ = make_engines(system, 1, 1, dep)
    build = next(b for _, name, b in MIX if name == shape)
    graph = build("q")
    graph.shape = shape
    own_collection(graph, "docs-alone")
    inputs = example_inputs("question 3 about topic 1", n_chunks=DOCS_PER_QUERY)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await run_query(system, graph, inputs, engines, Runtime(engines, policy="critical_path", inline_sync=True))
    return loop.time() - start


def zero_load(dep: Deployment) -> dict[str, dict[str, float]]:
    """Each shape of the mix alone: stock as its framework runs it, stock one call after the other
    (the reference interpreter), and Ayo. The mix's p95 cannot drop below its slowest frequent
    shape's zero-load latency."""
    out = {}
    for weight, name, _ in MIX:
        times = {key: run_virtual(lambda s=system, n=name: one_alone(n, s, dep))
                 for key, system in (("stock_s", "stock_rr"), ("stock_sequential_s", "stock_sequential"),
                                     ("ayo_s", "ayo_rr"))}
        out[name] = {"weight": weight, **times}
    return out


def scheduling_by_replicas(args: argparse.Namespace, qps_per_replica: float, dep: Deployment) -> dict[int, Any]:
    """Diagnostic: real ms per query in Ayo's engine schedulers by replica count (1 to 64), at 70 %
    load scaled with the replicas, ``--cost-queries`` each, the cyclic collector held off during each
    run and its time reported apart (``gc_ms_per_query``), so the scaling shows without collections
    of the whole heap landing at random in scheduling sections. The figure quoted is the one the main
    runs record (``summary.scheduling_ms_per_query``), with the collector running as it runs."""
    out = {}
    for r in args.cost_replicas:
        jobs = _jobs(args, args.cost_queries, args.seed)
        gc.collect()
        t0 = time.process_time()
        gc.disable()
        try:
            res = run_virtual(lambda r=r, jobs=jobs: run_system(AYO, jobs, 0.7 * qps_per_replica * r, r,
                                                                max(1, r // 4), args.seed, dep))
        finally:
            gc.enable()
        t1 = time.process_time()
        gc.collect()
        out[r] = {"scheduling_ms_per_query": res["scheduling_ms_per_query"],
                  "total_cpu_ms_per_query": 1000 * (time.process_time() - t0) / args.cost_queries,
                  "gc_ms_per_query": 1000 * (time.process_time() - t1) / args.cost_queries}
    return out


def _jobs(args: argparse.Namespace, n: int, seed: int) -> list[tuple[Any, dict]]:
    return make_jobs(n, seed, args.distinct_questions, args.doc_pool, args.doc_overlap)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--llm-replicas", type=int, default=16)
    ap.add_argument("--embed-replicas", type=int, default=4)
    ap.add_argument("--profile", default=DEFAULT_PROFILE,
                    help="deployment profile the replicas' step costs come from (a name in ayo_core/emulate/"
                         "profiles, or a profile JSON path)")
    ap.add_argument("--replica-model", choices=("serving", "slots"), default="serving",
                    help="serving: continuous batching with a KV-cache bound (ServingFakeLLM); slots: FakeLLM's "
                         "fixed sequence slots (the first version of this benchmark)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--distinct-questions", type=int, default=DISTINCT_QUESTIONS,
                    help="how many different questions the query stream draws from (a multiple of 5)")
    ap.add_argument("--doc-pool", type=int, default=DOC_POOL, help="documents the queries' own sets are drawn from")
    ap.add_argument("--doc-overlap", type=float, default=DOC_OVERLAP,
                    help="share of a query's documents that are its question's own set (the same when it recurs)")
    ap.add_argument("--cost-replicas", type=lambda v: [int(x) for x in v.split(",")], default=[1, 4, 16, 64],
                    help="replica counts of the scheduling-cost diagnostic (comma-separated)")
    ap.add_argument("--cost-queries", type=int, default=300)
    ap.add_argument("--burst-per-replica", type=int, default=None,
                    help="queries per LLM replica in each saturation burst (default: 512 serving, 256 slots)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dep = Deployment(load_profile(args.profile), args.replica_model)
    floors = zero_load(dep)
    for name, f in floors.items():
        print(f"zero load, {name:<15} (weight {f['weight']:.2f}): stock {f['stock_s']:.2f} s (one call after "
              f"the other: {f['stock_sequential_s']:.2f} s), Ayo {f['ayo_s']:.2f} s ({f['stock_s'] / f['ayo_s']:.2f}x)")
    saturations = saturation(args, dep)
    capacity = max(saturations.values())
    print(f"stock saturation throughput: {capacity:.1f} queries/s, the best of {saturations} "
          f"({args.llm_replicas} LLM replicas, {args.replica_model}, profile {dep.profile.name})")
    rows = [measure(args, dep, system, load, capacity) for load in LOADS for system in SYSTEMS]
    rows.append(measure(args, dep, ABLATION, 0.7, capacity))
    bar = best_stock(rows, 0.7)[1]
    # Past stock's saturation: the most load Ayo carries within the best stock's 70 % p95.
    for load in BEYOND:
        row = measure(args, dep, AYO, load, capacity)
        rows.append(row)
        if row["p95"] > bar:
            break
    summary = summarize(rows)
    summary["answers_identical"] = len({r["answers_sha256"] for r in rows}) == 1
    summary["repeat_rates"] = repeat_rates(args, rows)
    print(f"answers identical across every system and load: {summary['answers_identical']}")
    cost = scheduling_by_replicas(args, capacity / args.llm_replicas, dep)
    for r, c in cost.items():
        print(f"diagnostic, collector held off: scheduling {r:>2} replicas: {c['scheduling_ms_per_query']:.3f} "
              f"ms/query (all simulation CPU: {c['total_cpu_ms_per_query']:.1f} ms/query, collector after the "
              f"run: {c['gc_ms_per_query']:.2f} ms/query)")
    print(json.dumps(summary, indent=1))
    save(args, dep, saturations, rows, summary, cost, floors)
    return 0


def saturation(args: argparse.Namespace, dep: Deployment) -> dict[str, float]:
    """Each stock configuration's saturation throughput: a closed-loop burst deep enough (~4 queries
    per LLM batch slot; with the serving model, where the KV cache admits ~200 sequences, ~2) that
    the replicas run full batches for most of the makespan."""
    per_replica = args.burst_per_replica or (512 if dep.replica_model == "serving" else 8 * SLOTS_PER_REPLICA)
    burst = per_replica * args.llm_replicas
    out = {}
    for system in STOCK_SYSTEMS:
        sat = run_virtual(lambda s=system: run_system(s, _jobs(args, burst, args.seed + 1), None, args.llm_replicas,
                                                      args.embed_replicas, args.seed, dep))
        out[system] = float(sat["throughput"])
        print(f"saturation {system:<24} {out[system]:.1f} queries/s", flush=True)
    return out


def measure(args: argparse.Namespace, dep: Deployment, system: str, load: float, capacity: float) -> dict[str, Any]:
    res = run_virtual(lambda: run_system(system, _jobs(args, args.queries, args.seed), capacity * load,
                                         args.llm_replicas, args.embed_replicas, args.seed, dep))
    res["load"] = load
    busy = (f"  mean batch {res['llm_mean_batch']:.0f} sequences, deepest queue {res['llm_max_waiting']}"
            if "llm_busy" in res else "")
    print(f"load {load:.0%} {system:<24} p50 {res['p50']:.2f}s p95 {res['p95']:.2f}s "
          f"throughput {res['throughput']:.1f} q/s  hit {res['llm_hit_rate']:.0%}  "
          f"scheduling {res['scheduling_ms_per_query']:.2f} ms/q{busy}", flush=True)
    return res


def best_stock(rows: list[dict[str, Any]], load: float) -> tuple[str, float]:
    """The stock configuration with the lowest p95 at ``load``, and that p95."""
    stock = {r["system"]: r["p95"] for r in rows if r["system"] in STOCK_SYSTEMS and r["load"] == load}
    name = min(stock, key=stock.__getitem__)
    return name, stock[name]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline: Ayo against the best stock configuration at each load, and throughput within
    the best stock's 70 % p95; every stock configuration's ratio beside it."""
    by = {(r["system"], r["load"]): r for r in rows}
    per_load = {}
    for load in LOADS:
        name, p95 = best_stock(rows, load)
        per_load[f"{load:.0%}"] = {
            "best_stock": name, "best_stock_p95": p95, "ayo_p95": by[(AYO, load)]["p95"],
            "p95_ratio_best_stock_over_ayo": p95 / by[(AYO, load)]["p95"],
            "p95_ratio_best_stock_over_ayo_rr": p95 / by[("ayo_rr", load)]["p95"],
            "p95_ratio_each_stock_over_ayo": {s: by[(s, load)]["p95"] / by[(AYO, load)]["p95"] for s in STOCK_SYSTEMS}}
    name70, bar = best_stock(rows, 0.7)
    within = {s: max((r["throughput"] for r in rows if r["system"] == s and r["p95"] <= bar), default=0.0)
              for s in (*SYSTEMS, ABLATION)}
    stock_best_tp = max(within[s] for s in STOCK_SYSTEMS)
    ayo_sched = [r["scheduling_ms_per_query"] for r in rows if r["system"] not in STOCK_SYSTEMS]
    return {"per_load": per_load, "best_stock_at_70": name70,
            "p95_ratio_best_stock_over_ayo_at_70": per_load["70%"]["p95_ratio_best_stock_over_ayo"],
            "p95_ratio_best_stock_over_ablation_at_70": bar / by[(ABLATION, 0.7)]["p95"],
            "max_throughput_within_best_stock_p95": within,
            "throughput_ratio_at_best_stock_p95": within[AYO] / stock_best_tp if stock_best_tp else 0.0,
            # recorded in these very runs, with the collector running as it runs
            "scheduling_ms_per_query": {"min": min(ayo_sched), "max": max(ayo_sched),
                                        "median": statistics.median(ayo_sched), "runs": len(ayo_sched)}}


def repeat_rates(args: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the figures assume about repetition in the stream (the same jobs for every run)."""
    possible = [r["prefix_hit_possible"] for r in rows if "prefix_hit_possible" in r]
    return {"question_repeat_share": question_repeat_share(_jobs(args, args.queries, args.seed)),
            "prefix_hit_possible_share": statistics.mean(possible) if possible else None,
            "distinct_questions": args.distinct_questions, "doc_pool": args.doc_pool,
            "doc_overlap": args.doc_overlap, "docs_per_query": DOCS_PER_QUERY}


def result_stem(args: argparse.Namespace) -> str:
    """The results file's name: the default stream and profile plain, anything else named in it."""
    stem = "simulate_cluster" if args.replica_model == "serving" else f"simulate_cluster-{args.replica_model}"
    if args.profile != DEFAULT_PROFILE:
        stem += f"-{Path(args.profile).stem}"
    if args.distinct_questions != DISTINCT_QUESTIONS:
        stem += f"-{args.distinct_questions}q"
    if (args.doc_pool, args.doc_overlap) != (DOC_POOL, DOC_OVERLAP):
        stem += f"-pool{args.doc_pool}-overlap{args.doc_overlap:g}"
    return stem


def save(args: argparse.Namespace, dep: Deployment, saturations: dict[str, float], rows: list, summary: dict,
         cost: dict, floors: dict | None = None) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from ayo_bench import provenance

    # the full provenance every results file carries (commit, dirty flag, machine); no server took part
    data = {"provenance": {**provenance.collect(None, False, "none", outputs=(out,)),
                           "engines": "fake (virtual clock), step costs from the deployment profile",
                           "profile": dep.profile.describe(),
                           "queries": args.queries, "llm_replicas": args.llm_replicas,
                           "replica_model": args.replica_model, "distinct_questions": args.distinct_questions,
                           "doc_pool": args.doc_pool, "doc_overlap": args.doc_overlap,
                           "embed_replicas": args.embed_replicas},
            "stock_saturation_qps": max(saturations.values()), "stock_saturation_qps_by_system": saturations,
            "rows": rows, "summary": summary, "zero_load": floors,
            "diagnostic_scheduling_by_replicas_gc_held_off": cost}
    stem = result_stem(args)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for system in SYSTEMS:
        pts = sorted((r["load"], r["p95"]) for r in rows if r["system"] == system)
        ax.plot([100 * x for x, _ in pts], [y for _, y in pts], marker="o", label=system,
                linestyle="--" if system in STOCK_SYSTEMS else "-")
    ax.set_xlabel("offered load (% of the best stock's saturation throughput)")
    ax.set_ylabel("p95 latency (s)")
    ax.set_title(f"{args.llm_replicas} LLM + {args.embed_replicas} embedding replicas "
                 f"(simulated, {dep.profile.name})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{stem}.png", dpi=120)
    print(f"wrote {out / f'{stem}.json'} and {out / f'{stem}.png'}")


if __name__ == "__main__":
    raise SystemExit(main())
