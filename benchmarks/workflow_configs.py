"""LlamaIndex Workflows whose steps retrieve and query, stock vs ``ayo_llamaindex.optimize``: alternating pairs.

    .venv/bin/python benchmarks/workflow_configs.py                      # both workflows, 6 pairs
    .venv/bin/python benchmarks/workflow_configs.py --configs rag --pairs 4

Workflows (plain LlamaIndex code over a pre-built index of the questions' documents from
``examples/data/advanced_rag.json``, the index ``llamaindex_configs.py`` builds):

* ``rag``: LlamaIndex's documented RAG workflow shape: a ``retrieve`` step awaits a
  ``QueryFusionRetriever`` (3 queries, ``use_async=True``), a ``synthesize`` step awaits
  ``CompactAndRefine.asynthesize``. Ayo lowers the retrieval (generated queries searched as their
  lines are decoded, the decode stopped once the kept lines are complete) and routes the
  synthesis's model calls to its engine;
* ``fanout``: a step sends three questions about the user's question as events, a 4-worker step
  answers each with ``await query_engine.aquery(...)`` (top-3, compact), a join collects them.
  Stock runs the three queries concurrently (its best); Ayo runs each as its lowered graph on the
  shared schedulers (query embeddings batched, off the workflow's loop).

Same vLLM server (``$AYO_LLM_URL``, else one started by ``serve_llm`` in dev mode, its prefix cache
emptied before every timed run), same process, same questions on both sides, balanced random order
(:func:`ayo_bench.stats.first_sides`). Printed per workflow: median latency per side, the geometric
mean ratio (stock / Ayo) with its 95 % interval and verdict, answers identical. Results (with
provenance): ``$AYO_HOME/results/workflow_configs.json``; committed with
``--out benchmarks/results/workflow_configs.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (HERE.parent, HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import llamaindex_configs as lic  # noqa: E402 - sets the offline environment defaults, shares the corpus setup

from ayo_bench import provenance, stats  # noqa: E402
from ayo_core.models import ayo_home  # noqa: E402

CONFIGS = ("rag", "fanout")
ASPECTS = ("{q}", "Give a short example for this question: {q}", "What mistakes do people make here? {q}")


# ---- the user's code (plain LlamaIndex Workflows) -------------------------------------------------
def rag_workflow(index: Any, llm: Any) -> Any:
    from llama_index.core.response_synthesizers import CompactAndRefine
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

    class Retrieved(Event):
        query: str
        nodes: list

    class RAG(Workflow):
        retriever = QueryFusionRetriever([index.as_retriever(similarity_top_k=3)], llm=llm, num_queries=3,
                                         similarity_top_k=4, mode="reciprocal_rerank", use_async=True)

        @step
        async def retrieve(self, ctx: Context, ev: StartEvent) -> Retrieved:
            return Retrieved(query=ev.query, nodes=await self.retriever.aretrieve(ev.query))

        @step
        async def synthesize(self, ev: Retrieved) -> StopEvent:
            return StopEvent(result=await CompactAndRefine(llm=llm).asynthesize(ev.query, nodes=ev.nodes))

    return RAG(timeout=600)


def fanout_workflow(index: Any, llm: Any) -> Any:
    from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

    class Aspect(Event):
        text: str

    class Answered(Event):
        text: str
        answer: str

    class FanOut(Workflow):
        engine = index.as_query_engine(llm=llm, similarity_top_k=3)

        @step
        async def split(self, ctx: Context, ev: StartEvent) -> Aspect | None:
            for template in ASPECTS:
                ctx.send_event(Aspect(text=template.format(q=ev.query)))
            return None

        @step(num_workers=4)
        async def answer(self, ev: Aspect) -> Answered:
            return Answered(text=ev.text, answer=str(await self.engine.aquery(ev.text)))

        @step
        async def join(self, ctx: Context, ev: Answered) -> StopEvent | None:
            got = ctx.collect_events(ev, [Answered] * len(ASPECTS))
            if got is None:
                return None
            by_text = {a.text: a.answer for a in got}
            return StopEvent(result="\n\n".join(by_text[t] for t in sorted(by_text)))

    return FanOut(timeout=600)


# ---- the comparison -----------------------------------------------------------------------------
async def timed(workflow: Any, question: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    result = await workflow.run(query=question)
    return time.perf_counter() - t0, str(result)


async def bench(name: str, stock: Any, fast: Any, questions: list[str], pairs: int, reset_url: str | None) -> dict:
    for q in questions[:2]:  # warm-up: engines, caches, clients
        await timed(stock, q)
        await timed(fast, q)
    rows = []
    firsts = stats.first_sides(pairs, ("stock", "ayo"), seed=len(name))
    for i in range(pairs):
        q = questions[2 + i % (len(questions) - 2)]
        sides = {"stock": stock, "ayo": fast}
        row: dict[str, Any] = {"question": q, "first": firsts[i]}
        for side in ([firsts[i], "ayo" if firsts[i] == "stock" else "stock"]):
            await lic.reset_prefix_cache(reset_url)
            row[side], row[f"{side}_answer"] = await timed(sides[side], q)
        row["ratio"], row["identical"] = row["stock"] / row["ayo"], row["stock_answer"] == row["ayo_answer"]
        rows.append(row)
        print(f"  [{name}] pair {i} ({row['first']} first): stock {row['stock']:.2f}s  ayo {row['ayo']:.2f}s  "
              f"ratio {row['ratio']:.2f}  identical={row['identical']}", flush=True)
    ci = stats.ratio_interval([r["ratio"] for r in rows])
    return {"config": name, "pairs": len(rows), "stock_median_s": statistics.median(r["stock"] for r in rows),
            "ayo_median_s": statistics.median(r["ayo"] for r in rows), "ratio_balanced": lic.balanced_ratio(rows),
            "ratio_interval": None if ci is None else ci.as_dict(),
            "answers_identical": sum(r["identical"] for r in rows), "explain": str(fast.explain()), "rows": rows}


def print_summary(s: dict[str, Any]) -> None:
    ci = s["ratio_interval"]
    interval = f"{ci['geomean']:.2f}x [{ci['ci95_low']:.2f}-{ci['ci95_high']:.2f}]: {ci['verdict']}" if ci else "-"
    print(f"-- {s['config']}: stock {s['stock_median_s']:.2f}s  ayo {s['ayo_median_s']:.2f}s  balanced ratio "
          f"{s['ratio_balanced']:.2f}x; geometric mean {interval}; answers identical: "
          f"{s['answers_identical']}/{s['pairs']}", flush=True)


async def run_all(args: argparse.Namespace, url: str) -> dict[str, Any]:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    import ayo_llamaindex
    from ayo_core.models import embedding_model_path

    embed_model = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    items = lic.load_items(args.questions, args.docs)
    docs = {d.id_: d for item in items for d in item["docs"]}
    index = VectorStoreIndex.from_documents(list(docs.values()), embed_model=embed_model,
                                            transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=16)])
    reset_url = await lic.probe_cache_reset(url)
    print(f"prefix cache reset before every timed run: {'yes' if reset_url else 'no (the balanced order cancels it)'}")
    build = {"rag": rag_workflow, "fanout": fanout_workflow}
    results = []
    for name in args.configs:
        stock = build[name](index, lic.make_llm(url, args.max_tokens))
        fast = ayo_llamaindex.optimize(build[name](index, lic.make_llm(url, args.max_tokens)))
        print(f"== {name} ==", flush=True)
        results.append(await bench(name, stock, fast, [i["question"] for i in items], args.pairs, reset_url))
        print_summary(results[-1])
    return {"provenance": provenance.collect(url, started_by_ayo=args.started_server, dtype="float32"),
            "date": dt.datetime.now().isoformat(timespec="seconds"), "llm_url": url, "max_tokens": args.max_tokens,
            "prefix_cache_reset": bool(reset_url), "pairs": args.pairs, "results": results}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--docs", type=int, default=12, help="documents per question in the index (padded)")
    parser.add_argument("--out", type=Path, default=ayo_home() / "results" / "workflow_configs.json")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = os.environ.get("AYO_LLM_URL")
        args.started_server = not url
        if not url:
            from ayo_core.engines import serve_llm

            os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")  # POST /reset_prefix_cache: every timed run starts cold
            url = stack.enter_context(serve_llm(dtype="float32"))
        report = asyncio.run(run_all(args, url))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
