"""What each optimization pass buys on the advanced-RAG worked example (fake engines, virtual clock).

The paper's worked example (indexing of uploaded documents, query expansion,
retrieval per expanded query, LLM rerank, refine synthesis) runs on fake
engines whose latency model has GPU-scale numbers (an 8B-class LLM at ~25 ms
per output token, GPU embedding, in-memory vector search: see
``ayo_core.runtime.fakes.fake_engines("gpu")``). A virtual clock makes the
modelled time pass instantly, so the numbers are exact and reproducible; they
are a *plan*, not a measurement of real engines (``ayo compare`` does that).

Printed: the sequential time (reference interpreter, one primitive at a time),
the runtime's time with no pass and then with each pass added in turn, the
critical-path bound of the optimized graph, a few concurrent queries per
scheduling policy, and Ayo's build+optimize overhead per query for a 50-node
graph with and without the shape cache (real time). Results (with provenance) go to
``$AYO_HOME/results/passes.json``; the committed ones are written on purpose with
``--json benchmarks/results/passes.json``.

    .venv/bin/python benchmarks/passes.py [--json PATH] [--queries N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ayo_core.passes import PASSES, optimize_graph
from ayo_core.runtime import Runtime, reference_run
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.fakes import fake_engines
from ayo_core.templates import ShapeCache
from ayo_core.templates.examples import advanced_rag_graph, example_inputs, example_responder


def engines():
    return fake_engines("gpu", example_responder)


async def pass_by_pass() -> dict[str, Any]:
    graph = advanced_rag_graph("adv")
    inputs = example_inputs()
    _, seq = await reference_run(graph, inputs, engines(), inline_sync=True)
    rows = [{"config": "sequential (reference interpreter)", "latency_s": seq.latency}]
    names = list(PASSES)
    trace = None
    for k in range(len(names) + 1):
        optimized = optimize_graph(graph, names[:k])
        _, trace = await Runtime(engines(), inline_sync=True).run(optimized, inputs)
        label = "runtime, no pass" if k == 0 else f"+ {names[k - 1]}"
        rows.append({"config": label, "latency_s": trace.latency, "nodes": len(optimized)})
    assert trace is not None
    return {"rows": rows, "critical_path_bound_s": trace.critical_path_bound(),
            "stage_breakdown": trace.stage_breakdown(), "sequential_breakdown": seq.stage_breakdown()}


async def policies(n_queries: int) -> dict[str, Any]:
    out = {}
    graph = optimize_graph(advanced_rag_graph("adv"))
    for policy in ("fifo", "depth", "critical_path"):
        rt = Runtime(engines(), policy=policy, inline_sync=True)
        jobs = [(graph.for_query(f"q{i}"), example_inputs(f"question number {i}")) for i in range(n_queries)]
        results = await rt.run_many(jobs, return_exceptions=False)
        lat = [t.latency for _, t in results]
        out[policy] = {"mean_s": statistics.mean(lat), "max_s": max(lat),
                       "embed_merged_requests": rt.statistics()["embed"].merged_requests}
    return out


def overhead(n_queries: int = 2000) -> dict[str, Any]:
    """Real time to get a per-query optimized 50-node graph, with and without the shape cache."""
    def build():
        return advanced_rag_graph("template", refine_steps=35)

    nodes = len(build())
    t0 = time.perf_counter()
    for i in range(20):
        g = build()
        g.query_id = f"u{i}"
        optimize_graph(g)
    uncached = (time.perf_counter() - t0) / 20
    cache = ShapeCache()
    first = cache.get("adv-50", build, "q0")
    t0 = time.perf_counter()
    for i in range(n_queries):
        cache.get("adv-50", build, f"q{i}")
    cached = (time.perf_counter() - t0) / n_queries

    async def scheduling() -> float:
        _, trace = await Runtime(engines(), inline_sync=True).run(cache.get("adv-50", build, "s"), example_inputs())
        return trace.overhead["scheduling"]

    return {"graph_nodes": nodes, "optimized_nodes": len(first), "build_optimize_uncached_ms": uncached * 1e3,
            "build_optimize_cached_ms": cached * 1e3, "runtime_scheduling_ms": run_virtual(scheduling) * 1e3}


def report(result: dict[str, Any]) -> str:
    rows = result["passes"]["rows"]
    seq = rows[0]["latency_s"]
    lines = ["Advanced RAG worked example, fake engines with GPU-scale latencies (virtual clock)", ""]
    for row in rows:
        lines.append(f"  {row['config']:<38} {row['latency_s']:6.3f} s   x{seq / row['latency_s']:4.2f}")
    lines.append(f"  {'critical-path bound (optimized graph)':<38} {result['passes']['critical_path_bound_s']:6.3f} s")
    lines += ["", f"{result['n_queries']} concurrent queries, optimized graph:"]
    for policy, p in result["policies"].items():
        lines.append(f"  {policy:<14} mean {p['mean_s']:6.3f} s   max {p['max_s']:6.3f} s   "
                     f"embed requests merged {p['embed_merged_requests']}")
    o = result["overhead"]
    lines += ["", f"Ayo overhead per query ({o['graph_nodes']}-node graph, {o['optimized_nodes']} after passes, real time):",
              f"  build + optimize, no cache    {o['build_optimize_uncached_ms']:8.3f} ms",
              f"  build + optimize, shape cache {o['build_optimize_cached_ms']:8.3f} ms",
              f"  runtime scheduling            {o['runtime_scheduling_ms']:8.3f} ms"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from ayo_bench import provenance
    from ayo_core.models import ayo_home

    parser.add_argument("--json", type=Path, default=ayo_home() / "results" / "passes.json",
                        help="where to write the results (default: %(default)s; committed: benchmarks/results/passes.json)")
    parser.add_argument("--queries", type=int, default=8, help="concurrent queries for the policy comparison")
    args = parser.parse_args(argv)
    # fake engines on a virtual clock: no server took part (provenance of the code and machine)
    result = {"provenance": provenance.collect(None, False, "none"), "passes": run_virtual(pass_by_pass), "n_queries": args.queries,
              "policies": run_virtual(lambda: policies(args.queries)), "overhead": overhead()}
    sys.stdout.write(report(result) + "\n")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    raise SystemExit(main())
