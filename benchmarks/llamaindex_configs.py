"""LlamaIndex pipelines, stock vs ``ayo_llamaindex.optimize``: single-query latency, alternating pairs.

    .venv/bin/python benchmarks/llamaindex_configs.py                       # all configs, 6 pairs
    .venv/bin/python benchmarks/llamaindex_configs.py --configs docqa_advanced --pairs 4

Configurations (plain LlamaIndex code over the stdlib-docstring corpus, questions and their
documents from ``examples/data/advanced_rag.json``):

* ``docqa``: document QA, the question's documents indexed per call (SentenceSplitter, Chroma
  ``PersistentClient``, ``HuggingFaceEmbedding``), ``as_query_engine(similarity_top_k=3,
  response_mode="compact", use_async=True)``;
* ``docqa_async``: the same function written ``async def`` with ``await engine.aquery()``;
* ``docqa_advanced``: the same per-call indexing, then ``QueryFusionRetriever`` (3 queries,
  reciprocal rerank) + ``LLMRerank`` (batches of 2) + ``refine``, called with a plain
  ``query()`` as users write it (**stock's default, sync path**: ``LLMRerank`` runs its
  batches one after another);
* ``docqa_advanced_async``: the same function written ``async def`` with ``await
  engine.aquery()`` (**stock at its best**: ``LLMRerank``'s batches run concurrently);
* ``advanced``: a pre-built index over the questions' documents, ``QueryFusionRetriever`` (3
  queries) + ``LLMRerank`` + ``refine``;
* ``advanced_tree``: the same with ``tree_summarize`` (``use_async=True``).

Stock runs at its best: ``use_async=True`` wherever LlamaIndex offers it and ``aquery`` for a
query engine (it runs ``LLMRerank``'s batches concurrently); a doc-QA function written with a
plain ``query()`` (the ``docqa*`` configs without ``_async``: the default users run, labelled
so) runs in a worker thread, an ``async def`` one is awaited; the optimized one runs through
``acall``. Same vLLM server (``$AYO_LLM_URL``, else one started by ``serve_llm``), same process.
After a warm-up, each pair runs the *same* question on both sides (same prompts, same answer
lengths); who goes first is balanced, in a seeded random order. When the server runs in dev mode its prefix cache is
emptied before every timed run; otherwise whoever runs second finds the question's prompts
cached, and the balanced ratio (the geometric mean of the median ratio with stock first and
with Ayo first) cancels that. Each doc-QA question
comes with its documents padded to ``--docs`` documents of the same modules.

Printed per configuration: median latency of each side, the median per-pair ratio (stock /
Ayo) and the geometric mean with its 95 % interval and verdict (:mod:`ayo_bench.stats`), efficiency = the busiest engine's busy time in Ayo's run / Ayo's latency
(:mod:`ayo_bench.bound`: a bound on any schedule, not Ayo's own critical path), where Ayo's
time goes (trace stage breakdown, busy seconds per op) and where stock's time goes (LLM and
embedding seconds from LlamaIndex's instrumentation). Results (with provenance):
``$AYO_HOME/results/llamaindex_configs.json``; the committed ones are written on purpose with
``--out benchmarks/results/llamaindex_configs.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("ANONYMIZED_TELEMETRY", "False"),
                      ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_name, _value)

from ayo_bench import provenance, stats  # noqa: E402 - after the environment defaults above
from ayo_bench.bound import busiest_engine_bound, work_from_trace  # noqa: E402
from ayo_core.models import ayo_home  # noqa: E402

CONFIGS = ("docqa", "docqa_async", "docqa_advanced", "docqa_advanced_async", "advanced", "advanced_tree")
STOCK_PATH = {"docqa": "sync query() in a worker thread (users' default)",
              "docqa_async": "async def + aquery (stock's best)",
              "docqa_advanced": "sync query() in a worker thread (users' default)",
              "docqa_advanced_async": "async def + aquery (stock's best)",
              "advanced": "aquery (stock's best)", "advanced_tree": "aquery (stock's best)"}


# ---- the user's code (plain LlamaIndex) ---------------------------------------------------------
def make_llm(url: str, max_tokens: int) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    from ayo_core.models import LLM_NAME

    return OpenAILike(model=LLM_NAME, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                      max_tokens=max_tokens, context_window=8192)


def advanced_engine(index: Any, llm: Any, mode: str) -> Any:
    from llama_index.core.postprocessor import LLMRerank
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import QueryFusionRetriever

    retriever = QueryFusionRetriever([index.as_retriever(similarity_top_k=3)], llm=llm, num_queries=3,
                                     similarity_top_k=4, mode="reciprocal_rerank", use_async=True)
    # a lenient answer parser (as examples/advanced_rag.py has): a 135M model rarely follows
    # LLMRerank's answer format, and the default parser would then drop every node
    from ayo_examples.advanced_rag import parse_choices

    rerank = LLMRerank(llm=llm, top_n=3, choice_batch_size=2, parse_choice_select_answer_fn=parse_choices)
    return RetrieverQueryEngine.from_args(retriever, llm=llm, response_mode=mode, use_async=True,
                                          node_postprocessors=[rerank])


def docqa_function(llm: Any, embed_model: Any, chroma: Any, advanced: bool, use_async: bool = False) -> Any:
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.vector_stores.chroma import ChromaVectorStore

    splitter = SentenceSplitter(chunk_size=128, chunk_overlap=16)

    def engine_over(documents: list[Any], name: str) -> Any:
        store = ChromaVectorStore(chroma_collection=chroma.get_or_create_collection(name, embedding_function=None))
        index = VectorStoreIndex.from_documents(documents, embed_model=embed_model, transformations=[splitter],
                                                storage_context=StorageContext.from_defaults(vector_store=store))
        if advanced:
            return advanced_engine(index, llm, "refine")
        return index.as_query_engine(llm=llm, similarity_top_k=3, response_mode="compact", use_async=True)

    def answer(question: str, documents: list[Any]) -> Any:
        name = f"bench-{uuid.uuid4().hex}"
        try:
            return engine_over(documents, name).query(question)
        finally:
            chroma.delete_collection(name)

    async def aanswer(question: str, documents: list[Any]) -> Any:
        name = f"bench-{uuid.uuid4().hex}"
        try:
            return await engine_over(documents, name).aquery(question)
        finally:
            chroma.delete_collection(name)

    return aanswer if use_async else answer


# ---- harness ----------------------------------------------------------------------------------
class StockTimes:
    """LLM and embedding seconds of stock runs, from LlamaIndex's instrumentation events."""

    def __init__(self) -> None:
        from llama_index.core.instrumentation import get_dispatcher
        from llama_index.core.instrumentation.event_handlers import BaseEventHandler

        times = self
        self.open: dict[str, float] = {}
        self.busy: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.lock = threading.Lock()

        class Handler(BaseEventHandler):
            @classmethod
            def class_name(cls) -> str:
                return "AyoBenchTimes"

            def handle(self, event: Any, **kwargs: Any) -> None:
                times.on_event(event)

        get_dispatcher().add_event_handler(Handler())

    def on_event(self, event: Any) -> None:
        name = type(event).__name__
        for kind, prefix in (("llm", "LLMChat"), ("llm", "LLMCompletion"), ("embed", "Embedding")):
            if name.startswith(prefix) and name.endswith(("StartEvent", "EndEvent")):
                key = f"{kind}:{event.span_id}"
                now = time.perf_counter()
                with self.lock:
                    if name.endswith("StartEvent"):
                        self.open[key] = now
                    elif key in self.open:
                        self.busy[kind].append((self.open.pop(key), now))

    def window(self, t0: float, t1: float) -> dict[str, float]:
        with self.lock:
            return {k: _union([(max(a, t0), min(b, t1)) for a, b in v if b > t0 and a < t1])
                    for k, v in self.busy.items()}


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


class Side:
    """One app (stock or optimized) and how to call it with one question."""

    def __init__(self, name: str, app: Any, docqa: bool) -> None:
        self.name, self.app, self.docqa = name, app, docqa

    async def run(self, item: dict[str, Any]) -> tuple[float, Any]:
        t0, self.window_start = time.perf_counter(), time.monotonic()
        if self.docqa:
            acall = getattr(self.app, "acall", None)
            if acall is not None:
                out = await acall(item["question"], item["docs"])
            elif asyncio.iscoroutinefunction(self.app):
                out = await self.app(item["question"], item["docs"])
            else:
                out = await asyncio.to_thread(self.app, item["question"], item["docs"])
        else:
            out = await self.app.aquery(item["question"])
        self.window = (self.window_start, time.monotonic())  # the trace's clock
        return time.perf_counter() - t0, out


async def reset_prefix_cache(url: str | None) -> None:
    """Empty vLLM's prefix cache (``POST /reset_prefix_cache``, served in dev mode) before a timed run."""
    if url:
        import httpx

        async with httpx.AsyncClient(timeout=30) as client:
            (await client.post(url)).raise_for_status()  # a 404 (no dev mode) is no reset


async def probe_cache_reset(llm_url: str) -> str | None:
    url = llm_url.rstrip("/").removesuffix("/v1") + "/reset_prefix_cache"
    try:
        await reset_prefix_cache(url)
        return url
    except Exception:  # noqa: BLE001 - no dev mode: the balanced order cancels the cache
        return None


async def bench(name: str, stock: Side, fast: Side, items: list[dict[str, Any]], pairs: int,
                stock_times: StockTimes, reset_url: str | None = None) -> dict[str, Any]:
    for item in items[:2]:  # warm-up: engines, caches, clients
        await stock.run(item)
        await fast.run(item)
    rows = []
    qs = items[2:]
    # who goes first: balanced, in a seeded random order (ayo_bench.stats.first_sides: a strict
    # alternation can alias with anything periodic on the machine)
    firsts = stats.first_sides(pairs, ("stock", "ayo"), seed=len(name))
    for i in range(pairs):
        item = qs[i % len(qs)]
        order = [stock, fast] if firsts[i] == "stock" else [fast, stock]
        row: dict[str, Any] = {"question": item["question"], "first": order[0].name}
        for side in order:
            await reset_prefix_cache(reset_url)
            t0 = time.perf_counter()
            seconds, out = await side.run(item)
            row[side.name], row[f"{side.name}_answer"] = seconds, str(out)
            if side is stock:
                row["stock_busy"] = stock_times.window(t0, t0 + seconds)
            else:
                tr = fast.app.last_trace
                report = busiest_engine_bound(work_from_trace(tr, fast.window))
                row["bound"], row["busiest_engine"] = report.busy_s, report.busiest_engine
                row["gap"] = {k: getattr(report, f"{k}_s") for k in ("outside_graph", "other_engine", "queued",
                                                                     "runtime")}
                row["ayo_breakdown"] = {op: v["busy"] for op, v in tr.stage_breakdown().items()}
                row["ayo_wall"] = {op: v["wall"] for op, v in tr.stage_breakdown().items()}
                row["overhead"] = sum(tr.overhead.values()) - tr.overhead.get("capture", 0.0)
                row["ayo_spans"] = [(sp.node, sp.part, round(sp.start - tr.start, 3), round(sp.end - tr.start, 3))
                                    for sp in tr.nodes]
        row["ratio"] = row["stock"] / row["ayo"]
        row["identical"] = row["stock_answer"] == row["ayo_answer"]
        rows.append(row)
        print(f"  [{name}] pair {i} ({row['first']} first): stock {row['stock']:.2f}s  ayo {row['ayo']:.2f}s  "
              f"ratio {row['ratio']:.2f}  identical={row['identical']}", flush=True)
    return summarize(name, rows)


def balanced_ratio(rows: list[dict[str, Any]]) -> float:
    """Geometric mean of the median ratio with stock first and with Ayo first: whoever runs a
    question second finds its prompts in vLLM's prefix cache, and the two orders cancel that."""
    meds = [statistics.median([r["ratio"] for r in rows if r["first"] == side])
            for side in ("stock", "ayo") if any(r["first"] == side for r in rows)]
    return float(math.prod(meds) ** (1 / len(meds))) if meds else float("nan")


def summarize(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    med = statistics.median
    ayo = [r["ayo"] for r in rows]
    ops = sorted({op for r in rows for op in r["ayo_breakdown"]})
    stock_kinds = sorted({k for r in rows for k in r["stock_busy"]})
    return {
        "config": name,
        "stock_path": STOCK_PATH[name],
        "pairs": len(rows),
        "stock_median_s": med([r["stock"] for r in rows]),
        "ayo_median_s": med(ayo),
        "ratio_median": med([r["ratio"] for r in rows]),
        "ratio_balanced": balanced_ratio(rows),
        "ratio_interval": _interval([r["ratio"] for r in rows]),
        "efficiency_median": med([r["bound"] / r["ayo"] for r in rows]),
        "bound_median_s": med([r["bound"] for r in rows]),
        "bound": "busiest engine busy time (ayo_bench.bound)",
        "gap_median_s": {k: med([r["gap"][k] for r in rows]) for k in rows[0]["gap"]},
        "ayo_overhead_median_ms": 1000 * med([r["overhead"] for r in rows]),
        "ayo_busy_by_op_s": {op: med([r["ayo_breakdown"].get(op, 0.0) for r in rows]) for op in ops},
        "ayo_wall_by_op_s": {op: med([r["ayo_wall"].get(op, 0.0) for r in rows]) for op in ops},
        "stock_busy_s": {k: med([r["stock_busy"].get(k, 0.0) for r in rows]) for k in stock_kinds},
        "answers_identical": sum(r["identical"] for r in rows),
        "rows": rows,
    }


# ---- setup --------------------------------------------------------------------------------------
def load_items(n: int, docs_per_question: int) -> list[dict[str, Any]]:
    """Questions with their documents, padded with the rest of the same modules' documents (in
    corpus order) up to ``docs_per_question``: the files a user would hand a doc-QA app."""
    from llama_index.core import Document

    from ayo_examples.corpus import get_documents, load_corpus

    corpus = load_corpus()
    data = json.loads((REPO / "examples" / "data" / "advanced_rag.json").read_text())["questions"][:n]
    items = []
    for q in data:
        docs = get_documents(q.get("docs", []))
        modules = {d["id"].split(".")[0] for d in docs}
        seen = {d["id"] for d in docs}
        extra = [d for d in corpus if d["id"].split(".")[0] in modules and d["id"] not in seen]
        docs = (docs + extra)[: max(docs_per_question, len(docs))]
        items.append({"question": q["question"],
                      "docs": [Document(text=d["text"], id_=d["id"], metadata={"title": d["title"]}) for d in docs]})
    return items


def build_sides(name: str, url: str, max_tokens: int, embed_model: Any, chroma: Any, items: list[dict[str, Any]],
                shared: dict[str, Any]) -> tuple[Side, Side]:
    import ayo_llamaindex

    llm = make_llm(url, max_tokens)
    if name.startswith("docqa"):
        fn = docqa_function(llm, embed_model, chroma, advanced=name.startswith("docqa_advanced"),
                            use_async=name.endswith("_async"))
        return Side("stock", fn, True), Side("ayo", ayo_llamaindex.optimize(fn), True)
    if "index" not in shared:
        from llama_index.core import VectorStoreIndex
        from llama_index.core.node_parser import SentenceSplitter

        docs = {d.id_: d for item in items for d in item["docs"]}
        shared["index"] = VectorStoreIndex.from_documents(
            list(docs.values()), embed_model=embed_model, transformations=[SentenceSplitter(chunk_size=128,
                                                                                            chunk_overlap=16)])
    engine = advanced_engine(shared["index"], llm, "tree_summarize" if name == "advanced_tree" else "refine")
    return Side("stock", engine, False), Side("ayo", ayo_llamaindex.optimize(engine), False)


async def run_all(args: argparse.Namespace, url: str) -> dict[str, Any]:
    import chromadb
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from ayo_core.models import ayo_home, embedding_model_path

    embed_model = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    chroma = chromadb.PersistentClient(path=str(ayo_home() / "chroma" / "bench-llamaindex"))
    items = load_items(args.questions, args.docs)
    stock_times = StockTimes()
    reset_url = await probe_cache_reset(url)
    print(f"prefix cache reset before every timed run: {'yes' if reset_url else 'no (the balanced order cancels the cache)'}")
    shared: dict[str, Any] = {}
    results = []
    for name in args.configs:
        stock, fast = build_sides(name, url, args.max_tokens, embed_model, chroma, items, shared)
        print(f"== {name} ==", flush=True)
        results.append(await bench(name, stock, fast, items, args.pairs, stock_times, reset_url))
        print_summary(results[-1])
    return {"provenance": provenance.collect(url, started_by_ayo=args.started_server, dtype="float32"),
            "date": dt.datetime.now().isoformat(timespec="seconds"), "llm_url": url, "max_tokens": args.max_tokens,
            "docs_per_question": args.docs, "prefix_cache_reset": bool(reset_url),
            "pairs": args.pairs, "embed_threads": os.environ.get("AYO_EMBED_THREADS", "1"), "results": results}


def _interval(ratios: list[float]) -> dict[str, Any] | None:
    ci = stats.ratio_interval(ratios)
    return None if ci is None else ci.as_dict()


def print_summary(s: dict[str, Any]) -> None:
    print(f"-- {s['config']} (stock: {s['stock_path']}): stock {s['stock_median_s']:.2f}s  ayo {s['ayo_median_s']:.2f}s  "
          f"ratio {s['ratio_median']:.2f}x  efficiency {s['efficiency_median']:.2f}  "
          f"(busiest engine busy {s['bound_median_s']:.2f}s, overhead {s['ayo_overhead_median_ms']:.1f}ms)")
    print("   gap: " + ", ".join(f"{k} {v:.2f}s" for k, v in s["gap_median_s"].items()))
    print("   ayo busy by op: " + ", ".join(f"{k} {v:.2f}s" for k, v in s["ayo_busy_by_op_s"].items()))
    print("   stock busy:     " + ", ".join(f"{k} {v:.2f}s" for k, v in s["stock_busy_s"].items()))
    ci = s["ratio_interval"]
    interval = f"{ci['geomean']:.2f}x [{ci['ci95_low']:.2f}-{ci['ci95_high']:.2f}]: {ci['verdict']}" if ci else "-"
    print(f"   balanced ratio {s['ratio_balanced']:.2f}x; geometric mean {interval}; "
          f"answers identical: {s['answers_identical']}/{s['pairs']}", flush=True)


def plot(report: dict[str, Any], path: Path) -> None:
    """Median latency per configuration, stock vs Ayo, with the per-pair ratio on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = report["results"]
    xs = range(len(res))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar([x - 0.2 for x in xs], [r["stock_median_s"] for r in res], 0.4, label="stock LlamaIndex")
    ax.bar([x + 0.2 for x in xs], [r["ayo_median_s"] for r in res], 0.4, label="ayo_llamaindex.optimize")
    for x, r in zip(xs, res, strict=True):
        ax.text(x, max(r["stock_median_s"], r["ayo_median_s"]) * 1.02, f"{r['ratio_median']:.2f}x", ha="center")
    ax.set_xticks(list(xs), [r["config"] for r in res])
    ax.set_ylabel("median latency (s)")
    ax.set_title(f"LlamaIndex pipelines, {report['pairs']} pairs, max_tokens={report['max_tokens']}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--docs", type=int, default=12, help="documents per doc-QA question (padded)")
    parser.add_argument("--out", type=Path, default=ayo_home() / "results" / "llamaindex_configs.json",
                        help="results file (default: %(default)s; committed: benchmarks/results/llamaindex_configs.json)")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = os.environ.get("AYO_LLM_URL")
        args.started_server = not url
        if not url:
            from ayo_core.engines import serve_llm

            # dev mode serves POST /reset_prefix_cache: every timed run then starts cold
            os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")
            url = stack.enter_context(serve_llm(dtype="float32"))
        report = asyncio.run(run_all(args, url))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
