"""LangChain chains, stock vs ``ayo_langchain.optimize``: single-query latency and batch of 16.

    .venv/bin/python benchmarks/langchain_configs.py                 # both chains, 6 pairs, batch 16
    .venv/bin/python benchmarks/langchain_configs.py --chains multiquery --pairs 4 --batch 0

Two chains, written as plain LangChain (LCEL) code over the stdlib-docstring corpus
(``ayo_examples.corpus``) in a Chroma ``PersistentClient`` with ``HuggingFaceEmbeddings``:

* ``rag``: ``{"context": retriever | format_docs, "question": RunnablePassthrough()} |
  prompt | llm | StrOutputParser()``
* ``multiquery``: the same with ``MultiQueryRetriever.from_llm(retriever, llm)``.

Both sides use the same vLLM server (``$AYO_LLM_URL``, else one started by
``serve_llm``) in the same process lifetime. After a warm-up, stock and Ayo run in pairs;
who goes first is balanced, in a seeded random order. Both sides answer the same
question, but under different vLLM ``cache_salt`` values (``extra_body`` of the
ChatOpenAI, the only difference between the two chains): otherwise whoever runs second
would find the whole prompt in the prefix cache and win by that alone. Each side keeps
its own warm system prompt, as a deployed app would; each question is new to both. Stock runs at its best:
``ainvoke`` for one query, ``abatch(..., config={"max_concurrency": N})`` for a batch
(vLLM batches concurrent requests itself).

Printed: medians, the median per-pair ratio (stock / Ayo) and the geometric mean with its
95 % interval and verdict (:mod:`ayo_bench.stats`), whether outputs matched, and efficiency =
the busiest engine's busy time over the call (the union of its request intervals in Ayo's
traces: a bound on any schedule, :mod:`ayo_bench.bound`) / Ayo's latency, plus where the time
goes (stage breakdown of Ayo's trace; for stock, LLM and retriever time from callbacks).
Results (with provenance) go to ``$AYO_HOME/results/langchain_configs.json``; the committed
ones are written on purpose with ``--out benchmarks/results/langchain_configs.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("ANONYMIZED_TELEMETRY", "False"),
                      ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_name, _value)

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402

from ayo_bench import provenance, stats  # noqa: E402
from ayo_bench.bound import QueryWork, busiest_engine_bound  # noqa: E402
from ayo_core.models import ayo_home  # noqa: E402

RESULTS = ayo_home() / "results" / "langchain_configs.json"
COMMITTED = REPO / "benchmarks" / "results" / "langchain_configs.json"
SYSTEM = ("You are an assistant for question-answering tasks about the Python standard library. Use the following "
          "pieces of retrieved context to answer the question. If you don't know the answer, just say that you "
          "don't know. Use three sentences maximum and keep the answer concise.")


# ---- the user's code (plain LangChain) ---------------------------------------------------
def format_docs(docs: list) -> str:
    return "\n\n".join(d.page_content for d in docs)


def build_chains(llm_url: str, vectorstore: Any, max_tokens: int, k: int, salt: str) -> dict[str, Any]:
    from langchain_classic.retrievers import MultiQueryRetriever
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_openai import ChatOpenAI

    from ayo_core.models import LLM_NAME

    llm = ChatOpenAI(model=LLM_NAME, base_url=llm_url, api_key="none", temperature=0, max_tokens=max_tokens,
                     extra_body={"cache_salt": salt})
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM),
                                               ("human", "Question: {question}\nContext: {context}\nAnswer:")])
    retriever = vectorstore.as_retriever(search_kwargs={"k": k})
    multi = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": max(1, k - 1)}),
                                         llm=llm)
    return {
        "rag": {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm
        | StrOutputParser(),
        "multiquery": {"context": multi | format_docs, "question": RunnablePassthrough()} | prompt | llm
        | StrOutputParser(),
    }


# ---- setup -------------------------------------------------------------------------------
def open_index(n_docs: int) -> Any:
    """Chroma over the first ``n_docs`` corpus documents, indexed once with the stock embeddings and reused."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_huggingface import HuggingFaceEmbeddings

    from ayo_core import models
    from ayo_examples.corpus import load_corpus

    emb = HuggingFaceEmbeddings(model_name=str(models.embedding_model_path()))
    client = chromadb.PersistentClient(path=str(models.ayo_home() / "chroma" / "langchain_configs"))
    vs = Chroma(collection_name=f"stdlib_{n_docs}", embedding_function=emb, client=client)
    if vs._collection.count() != n_docs:
        docs = load_corpus()[:n_docs]
        print(f"indexing {len(docs)} documents (once)...", flush=True)
        vs.reset_collection()
        for i in range(0, len(docs), 64):
            batch = docs[i:i + 64]
            vs.add_texts([d["text"] for d in batch], metadatas=[{"id": d["id"], "title": d["title"]} for d in batch],
                         ids=[d["id"] for d in batch])
    return vs


def questions(n: int, n_docs: int) -> list[str]:
    """Distinct questions about indexed documents: the example apps' questions, then generated ones."""
    from ayo_examples.corpus import load_corpus

    out: list[str] = []
    for app in ("naive_rag", "advanced_rag"):
        data = json.loads((REPO / "examples" / "data" / f"{app}.json").read_text(encoding="utf-8"))
        out += [q["question"] for q in data["questions"]]
    templates = ("What is {} used for?", "How do I use {}?", "What does {} return?")
    docs = load_corpus()[:n_docs]
    i = 0
    while len(out) < n and i < 3 * len(docs):
        doc = docs[(i * 7) % len(docs)]  # spread over modules, deterministic
        q = templates[(i // len(docs)) % 3].format(doc["id"])
        if q not in out:
            out.append(q)
        i += 1
    if len(out) < n:
        raise ValueError(f"only {len(out)} distinct questions for {n} runs: index more documents (--docs)")
    return out[:n]


class StageTimer(BaseCallbackHandler):
    """Wall time of the stock chain's LLM and retriever runs (union of intervals per kind)."""

    def __init__(self) -> None:
        self.open: dict[Any, tuple[str, float]] = {}
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def _start(self, kind: str, run_id: Any) -> None:
        self.open[run_id] = (kind, time.perf_counter())

    def _end(self, run_id: Any) -> None:
        kind, t0 = self.open.pop(run_id, ("?", time.perf_counter()))
        self.spans[kind].append((t0, time.perf_counter()))

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kw: Any) -> None:
        self._start("llm", run_id)

    def on_llm_end(self, response: Any, *, run_id: Any, **kw: Any) -> None:
        self._end(run_id)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: Any, **kw: Any) -> None:
        self._start("retriever", run_id)

    def on_retriever_end(self, documents: Any, *, run_id: Any, **kw: Any) -> None:
        self._end(run_id)

    def breakdown(self) -> dict[str, float]:
        return {k: round(_union(v), 3) for k, v in self.spans.items()}


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


# ---- measuring ---------------------------------------------------------------------------
async def timed(coro: Any) -> tuple[float, Any, tuple[float, float]]:
    """Seconds, value, and the call as a ``time.monotonic()`` interval (the clock of Ayo's traces)."""
    t0, m0 = time.perf_counter(), time.monotonic()
    out = await coro
    return time.perf_counter() - t0, out, (m0, time.monotonic())


def trace_figures(traces: list[Any], call: tuple[float, float]) -> dict[str, Any]:
    """The busiest engine's busy time over the call (the union of its request intervals in every
    query's trace: a bound on any schedule of the same work, not Ayo's own critical path),
    efficiency = that / the call's latency, and the stage breakdown summed over queries."""
    engines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for t in traces:
        for c in t.engine_calls:
            engines[str(c.engine)].append((c.start, c.end))
    report = busiest_engine_bound(QueryWork(call=call, engines=dict(engines)))
    stages: dict[str, float] = defaultdict(float)
    for t in traces:
        for op, row in t.stage_breakdown().items():
            stages[op] += row["wall"]
    overhead = sum(sum(t.overhead.values()) for t in traces)
    return {"bound_s": round(report.busy_s, 3), "busiest_engine": report.busiest_engine,
            "efficiency": round(report.efficiency, 3) if report.latency_s else None,
            "stages_wall_s": {k: round(v, 3) for k, v in sorted(stages.items())}, "overhead_s": round(overhead, 4)}


async def run_pair(stock: Any, fast: Any, inputs: list[str], stock_first: bool, concurrency: int) -> dict[str, Any]:
    timer = StageTimer()
    single = len(inputs) == 1

    async def run_stock() -> tuple[float, Any, tuple[float, float]]:
        if single:
            return await timed(stock.ainvoke(inputs[0], config={"callbacks": [timer]}))
        return await timed(stock.abatch(inputs, config={"max_concurrency": concurrency, "callbacks": [timer]}))

    async def run_fast() -> tuple[float, Any, tuple[float, float]]:
        if single:
            return await timed(fast.ainvoke(inputs[0]))
        return await timed(fast.abatch(inputs, config={"max_concurrency": concurrency}))

    if stock_first:
        (s_t, s_out, _), (a_t, a_out, a_call) = await run_stock(), await run_fast()
    else:
        (a_t, a_out, a_call), (s_t, s_out, _) = await run_fast(), await run_stock()
    return {"first": "stock" if stock_first else "ayo", "stock_s": round(s_t, 3), "ayo_s": round(a_t, 3),
            "ratio": round(s_t / a_t, 3), "identical": s_out == a_out,
            "stock_stages_s": timer.breakdown(), "ayo": trace_figures(list(fast.last_traces), a_call)}


def summarize(pairs: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    med = statistics.median
    out = {"pairs": len(pairs), "stock_median_s": round(med(p["stock_s"] for p in pairs), 3),
           "ayo_median_s": round(med(p["ayo_s"] for p in pairs), 3),
           "median_ratio": round(med(p["ratio"] for p in pairs), 3),
           "ratio_interval": _interval([p["ratio"] for p in pairs]),
           "all_identical": all(p["identical"] for p in pairs if p["identical"] is not None),
           "efficiency_median": round(med(p["ayo"]["efficiency"] for p in pairs), 3)}
    if batch > 1:
        out["stock_throughput_qps"] = round(batch / out["stock_median_s"], 3)
        out["ayo_throughput_qps"] = round(batch / out["ayo_median_s"], 3)
    return out


def _interval(ratios: list[float]) -> dict[str, Any] | None:
    ci = stats.ratio_interval(ratios)
    return None if ci is None else ci.as_dict()


async def bench_chain(name: str, stock: Any, fast: Any, qs: list[str], pairs: int, batch: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    await stock.ainvoke(qs[0])  # warm-up: connections, models, the system prompt's cache blocks
    await fast.ainvoke(qs[0])
    cursor = 1

    def take(n: int) -> list[str]:
        nonlocal cursor
        cursor += n
        return qs[cursor - n:cursor]

    single = []
    # who goes first: balanced, in a seeded random order (ayo_bench.stats.first_sides)
    firsts = stats.first_sides(pairs, ("stock", "ayo"), seed=len(name))
    for i in range(pairs):
        pair = await run_pair(stock, fast, take(1), stock_first=firsts[i] == "stock", concurrency=1)
        single.append(pair)
        print(f"  {name} single #{i}: stock {pair['stock_s']:.2f}s ayo {pair['ayo_s']:.2f}s "
              f"ratio {pair['ratio']:.2f} identical={pair['identical']} eff={pair['ayo']['efficiency']}", flush=True)
    result["single"] = {"summary": summarize(single, 1), "runs": single}
    if batch > 1:
        runs = []
        n_batches = max(2, pairs // 2)
        firsts = stats.first_sides(n_batches, ("stock", "ayo"), seed=len(name) + 1)
        for i in range(n_batches):
            pair = await run_pair(stock, fast, take(batch), stock_first=firsts[i] == "stock", concurrency=batch)
            runs.append(pair)
            print(f"  {name} batch{batch} #{i}: stock {pair['stock_s']:.2f}s ayo {pair['ayo_s']:.2f}s "
                  f"ratio {pair['ratio']:.2f} identical={pair['identical']}", flush=True)
        result[f"batch{batch}"] = {"summary": summarize(runs, batch), "runs": runs}
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", default="rag,multiquery")
    ap.add_argument("--pairs", type=int, default=6, help="single-query pairs per chain")
    ap.add_argument("--batch", type=int, default=16, help="batch size (0: skip the batch runs)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="documents per retrieval (MultiQuery: k-1 per query)")
    ap.add_argument("--docs", type=int, default=400, help="corpus documents in the index")
    ap.add_argument("--out", default=str(RESULTS),
                    help=f"results file (default: %(default)s; committed: {COMMITTED.relative_to(REPO)})")
    args = ap.parse_args(argv)

    import ayo_langchain
    from ayo_core.engines.llm_server import serve_llm

    names = [c for c in args.chains.split(",") if c]
    with serve_llm(dtype="float32") as llm_url:
        vs = open_index(args.docs)
        # The two sides run the same questions under different vLLM cache salts: whoever runs
        # second must not find the other's prompts in the prefix cache (each side keeps its own
        # warm system prompt, as a deployed app would).
        stock_chains = build_chains(llm_url, vs, args.max_tokens, args.k, salt="stock")
        ayo_chains = build_chains(llm_url, vs, args.max_tokens, args.k, salt="ayo")
        need = 1 + args.pairs + max(2, args.pairs // 2) * max(args.batch, 0)
        qs = questions(need * len(names), args.docs)
        given = bool(os.environ.get("AYO_LLM_URL"))  # serve_llm yields it as is
        report: dict[str, Any] = {"provenance": provenance.collect(llm_url, started_by_ayo=not given, dtype="float32"),
                                  "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                  "command": provenance.portable(" ".join(["benchmarks/langchain_configs.py", *(argv or sys.argv[1:])])),
                                  "llm_url": llm_url, "max_tokens": args.max_tokens, "k": args.k, "docs": args.docs,
                                  "cores": os.cpu_count(), "chains": {}}

        async def run_all() -> None:  # one event loop: the stock clients keep their connections
            for i, name in enumerate(names):
                stock = stock_chains[name]
                fast = ayo_langchain.optimize(ayo_chains[name])
                print(f"{name}:", flush=True)
                report["chains"][name] = await bench_chain(name, stock, fast, qs[i * need:(i + 1) * need],
                                                           args.pairs, args.batch)

        asyncio.run(run_all())
        print_table(report)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(f"wrote {args.out}")


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{'chain':12s} {'mode':8s} {'stock':>8s} {'ayo':>8s} {'ratio':>6s} {'geomean [95 %]':>22s} "
          f"{'eff':>5s} identical")
    for name, res in report["chains"].items():
        for mode, block in res.items():
            s = block["summary"]
            ci = s["ratio_interval"]
            interval = f"{ci['geomean']:.2f} [{ci['ci95_low']:.2f}-{ci['ci95_high']:.2f}]" if ci else "-"
            print(f"{name:12s} {mode:8s} {s['stock_median_s']:8.2f} {s['ayo_median_s']:8.2f} "
                  f"{s['median_ratio']:6.2f} {interval:>22s} {s['efficiency_median']:5.2f} {s['all_identical']}"
                  + (f" ({ci['verdict']})" if ci else ""))


if __name__ == "__main__":
    main()
