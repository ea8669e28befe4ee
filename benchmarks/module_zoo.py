"""Stock vs Ayo on the modules stock runs one call after another: side by side, in balanced pairs.

    python benchmarks/module_zoo.py -n 8 --out benchmarks/results/module_zoo.json   # starts Ayo's server
    AYO_LLM_URL=http://127.0.0.1:8123/v1 python benchmarks/module_zoo.py -n 2 --modules accumulate

Modules (each the way its framework's docs build it, at their defaults):

- ``accumulate``: a LlamaIndex query engine with ``response_mode="accumulate"`` over a tiny
  in-memory index (top-k chunks, one LLM call each: stock sequential, Ayo concurrent);
- ``compact_accumulate``: the same with ``response_mode="compact_accumulate"`` and a context
  window small enough that the chunks pack into several calls;
- ``compressor``: a LangChain ``ContextualCompressionRetriever`` with ``LLMChainExtractor``
  over Chroma (one chain call per retrieved document: stock sequential under ``invoke``);
- ``compressor_pipeline``: the same retriever with a ``DocumentCompressorPipeline`` of an
  ``EmbeddingsFilter`` and an ``LLMChainExtractor`` (the filter as the user's object, then one
  chain call per kept document);
- ``hyde``: a LlamaIndex ``TransformQueryEngine`` with ``HyDEQueryTransform`` answering four
  questions at once with ``aquery`` (stock's async path runs the transform's synchronous
  ``predict``, so each query's hypothetical document blocks the loop: the four decode one after
  another; Ayo's decode concurrently);
- ``retry_source``: a LlamaIndex ``RetrySourceQueryEngine`` with a ``RelevancyEvaluator`` over a
  top-k query engine (``max_retries=1``): when the answer fails its evaluation, stock evaluates it
  against each source node one LLM call after another, Ayo all at once; then both query again
  over the sources that passed (a ``SummaryIndex`` built with ``Settings.llm``, set to the same LLM);
- ``tool_router``: a LlamaIndex ``ToolRetrieverRouterQueryEngine`` over an ``ObjectIndex`` of two
  query engine tools (both retrieved): stock's ``query`` runs the two engines one after another,
  Ayo at once, then both combine the answers with the engine's ``TreeSummarize``;
- ``recursive``: a LlamaIndex ``RecursiveRetriever`` whose root index holds two ``IndexNode`` links
  to per-document query engines (LlamaIndex's recursive-retrieval guide), in a query engine: stock
  queries the two linked engines one after another, Ayo at once, then both synthesize;
- ``map``: a LangChain ``prompt | ChatOpenAI | StrOutputParser`` chain's ``.map()`` over four
  questions (stock's ``RunnableEach`` already runs them through ``batch``, a thread each: the
  honest comparison of a module stock does not run one by one).

Each pair runs stock and Ayo on the same question, who goes first drawn as ``ayo compare`` draws
it (``ayo_bench.stats.first_sides``), after one warm-up of each; every pair checks the answers
are identical. Printed per module: each pair's times, the median per-pair ratio stock/Ayo and
the geometric mean with its 95 % interval. The server's prefix cache is not reset (the server
may be shared): the balanced order spreads its help evenly over both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ayo_bench import stats  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
TEXTS = [
    "The json module encodes Python objects as JSON strings with json.dumps and decodes them with json.loads.",
    "pathlib.Path joins path components with the / operator; os.path.join does the same for strings.",
    "The bisect module keeps a list sorted: insort inserts an item at its sorted position.",
    "collections.Counter counts hashable objects; most_common returns the most frequent ones.",
    "argparse.ArgumentParser parses command line arguments, options and sub-commands.",
    "datetime.date represents a date; timedelta is a duration between two dates or times.",
]
QUESTIONS = ["How do I turn Python objects into JSON?", "How can a list stay sorted?",
             "How do I count things in Python?", "How do I parse command line options?"]

Pipeline = tuple[Callable[[str], Any], Callable[[str], Any], Callable[[Any], Any]]  # stock, fast, comparable
# With --deployment: the emulator's URL, where both sides embed (the frameworks' OpenAI-compatible
# embedding classes), as ``ayo compare --deployment`` builds its apps; empty: HuggingFace in-process.
EMBED_URL = ""
EMBED_MODEL_NAME = "all-MiniLM-L6-v2"


def _li_embedding() -> Any:
    """LlamaIndex's embedding model: ``OpenAILikeEmbedding`` at ``EMBED_URL`` when set, else HuggingFace on CPU."""
    if EMBED_URL:
        from llama_index.embeddings.openai_like import OpenAILikeEmbedding

        return OpenAILikeEmbedding(model_name=EMBED_MODEL_NAME, api_base=EMBED_URL, api_key="unused")
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from ayo_core.models import embedding_model_path

    return HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")


def _lc_embeddings() -> Any:
    """LangChain's embeddings: ``OpenAIEmbeddings`` at ``EMBED_URL`` when set, else HuggingFace on CPU."""
    if EMBED_URL:
        from langchain_openai import OpenAIEmbeddings

        return OpenAIEmbeddings(model=EMBED_MODEL_NAME, base_url=EMBED_URL, api_key="unused",
                                check_embedding_ctx_length=False)
    from langchain_huggingface import HuggingFaceEmbeddings

    from ayo_core.models import embedding_model_path

    return HuggingFaceEmbeddings(model_name=str(embedding_model_path()))


def llamaindex_pipeline(url: str, mode: str, k: int, max_tokens: int) -> Pipeline:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.llms.openai_like import OpenAILike

    import ayo_llamaindex

    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS], embed_model=_li_embedding())
    window = 200 if mode == "compact_accumulate" else 3900
    llm = OpenAILike(model=MODEL, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                     max_tokens=max_tokens, context_window=window)
    stock = index.as_query_engine(llm=llm, similarity_top_k=k, response_mode=mode)
    fast = ayo_llamaindex.optimize(stock)
    return stock.query, fast.query, str


def _store_and_llm(url: str, max_tokens: int) -> tuple[Any, Any]:
    """The Chroma store of ``TEXTS`` (stock HuggingFace embeddings) and the chat model both compressors use."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_openai import ChatOpenAI

    embeddings = _lc_embeddings()
    client = chromadb.PersistentClient(path=tempfile.mkdtemp(prefix="ayo-zoo-"))
    store = Chroma(collection_name="zoo", embedding_function=embeddings, client=client)
    store.add_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))])
    return store, ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens)


def _compression(compressor: Any, store: Any, k: int) -> Pipeline:
    from langchain_classic.retrievers import ContextualCompressionRetriever

    import ayo_langchain

    stock = ContextualCompressionRetriever(base_compressor=compressor,
                                           base_retriever=store.as_retriever(search_kwargs={"k": k}))
    fast = ayo_langchain.optimize(stock)
    return stock.invoke, fast.invoke, lambda docs: [(d.page_content, d.metadata) for d in docs]


def compressor_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor

    store, llm = _store_and_llm(url, max_tokens)
    return _compression(LLMChainExtractor.from_llm(llm), store, k)


def compressor_pipeline_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    from langchain_classic.retrievers.document_compressors import (
        DocumentCompressorPipeline,
        EmbeddingsFilter,
        LLMChainExtractor,
    )

    store, llm = _store_and_llm(url, max_tokens)
    stages = [EmbeddingsFilter(embeddings=store.embeddings, similarity_threshold=0.05), LLMChainExtractor.from_llm(llm)]
    return _compression(DocumentCompressorPipeline(transformers=stages), store, k)


def hyde_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    import asyncio

    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.indices.query.query_transform import HyDEQueryTransform
    from llama_index.core.query_engine import TransformQueryEngine
    from llama_index.llms.openai_like import OpenAILike

    import ayo_llamaindex

    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS], embed_model=_li_embedding())
    llm = OpenAILike(model=MODEL, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                     max_tokens=max_tokens)
    stock = TransformQueryEngine(index.as_query_engine(llm=llm, similarity_top_k=k), HyDEQueryTransform(llm=llm))
    fast = ayo_llamaindex.optimize(stock)

    def together(engine: Any) -> Callable[[str], Any]:
        def call(question: str) -> list[Any]:
            first = QUESTIONS.index(question)
            batch = [QUESTIONS[(first + i) % len(QUESTIONS)] for i in range(4)]

            async def run() -> list[Any]:
                return list(await asyncio.gather(*(engine.aquery(q) for q in batch)))

            return asyncio.run(run())

        return call

    return together(stock), together(fast), lambda responses: [str(r) for r in responses]


def _li_models(url: str, max_tokens: int) -> tuple[Any, Any]:
    """The embedding model (``_li_embedding``) and the LLM (``OpenAILike`` on ``url``) a LlamaIndex module uses."""
    from llama_index.llms.openai_like import OpenAILike

    return _li_embedding(), OpenAILike(model=MODEL, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                             max_tokens=max_tokens)


def retry_source_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.evaluation import RelevancyEvaluator
    from llama_index.core.query_engine import RetrySourceQueryEngine

    import ayo_llamaindex

    embed, llm = _li_models(url, max_tokens)
    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS], embed_model=embed)
    Settings.llm = llm  # the retry's SummaryIndex engine takes its synthesizer's LLM from Settings

    def build() -> Any:
        return RetrySourceQueryEngine(index.as_query_engine(llm=llm, similarity_top_k=k),
                                      RelevancyEvaluator(llm=llm), llm=llm, max_retries=1)

    return build().query, ayo_llamaindex.optimize(build()).query, str


def tool_router_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.objects import ObjectIndex
    from llama_index.core.query_engine import ToolRetrieverRouterQueryEngine
    from llama_index.core.tools import QueryEngineTool

    import ayo_llamaindex

    embed, llm = _li_models(url, max_tokens)
    halves = {"data formats": TEXTS[:3], "standard tools": TEXTS[3:]}

    def build() -> Any:
        tools = [QueryEngineTool.from_defaults(
            VectorStoreIndex.from_documents([Document(text=t) for t in texts], embed_model=embed).as_query_engine(
                llm=llm, similarity_top_k=2), name=name.replace(" ", "_"), description=f"Python docs: {name}")
                 for name, texts in halves.items()]
        objects = ObjectIndex.from_objects(tools, index_cls=VectorStoreIndex, embed_model=embed)
        return ToolRetrieverRouterQueryEngine(objects.as_retriever(similarity_top_k=2), llm=llm)

    return build().query, ayo_llamaindex.optimize(build()).query, str


def recursive_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import RecursiveRetriever
    from llama_index.core.schema import IndexNode

    import ayo_llamaindex

    embed, llm = _li_models(url, max_tokens)
    halves = {"data_formats": TEXTS[:3], "standard_tools": TEXTS[3:]}
    engines = {name: VectorStoreIndex.from_documents([Document(text=t) for t in texts], embed_model=embed)
               .as_query_engine(llm=llm, similarity_top_k=2) for name, texts in halves.items()}
    top = VectorStoreIndex([IndexNode(text=f"Python docs: {name}", index_id=name) for name in halves],
                           embed_model=embed)

    def build() -> Any:
        recursive = RecursiveRetriever("root", retriever_dict={"root": top.as_retriever(similarity_top_k=2)},
                                       query_engine_dict=engines)
        return RetrieverQueryEngine.from_args(recursive, llm=llm)

    return build().query, ayo_llamaindex.optimize(build()).query, str


def timed(call: Callable[[str], Any], question: str) -> tuple[float, Any]:
    start = time.perf_counter()
    out = call(question)
    return time.perf_counter() - start, out


def record_pass(stock: Callable[[str], Any], fast: Callable[[str], Any], questions: list[str],
                deployment: Any) -> dict[str, Any]:
    """On an emulated deployment: every question once per side, untimed, with every request the emulator's
    store cannot answer sent to the real engines and stored (``ayo_bench.deployment``): the answers
    the timed replay serves. Returns the emulator's counters before the timed pairs."""
    with deployment.recording() as before:
        for q in questions:
            stock(q)
            fast(q)
    return before


def run_pairs(name: str, pipeline: Pipeline, n: int, seed: int, deployment: Any = None) -> dict[str, Any]:
    stock, fast, comparable = pipeline
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(n)]
    before = record_pass(stock, fast, sorted(set(questions)), deployment) if deployment is not None else None
    timed(stock, QUESTIONS[0])  # warm-up: model loads, first requests, shapes cached
    timed(fast, QUESTIONS[0])
    ratios, rows = [], []
    for i, first in enumerate(stats.first_sides(n, ("stock", "ayo"), seed=seed)):
        q = questions[i]
        sides = {"stock": stock, "ayo": fast}
        order = [first, "ayo" if first == "stock" else "stock"]
        results = {side: timed(sides[side], q) for side in order}
        if comparable(results["stock"][1]) != comparable(results["ayo"][1]):
            raise AssertionError(f"{name}: pair {i} ({q!r}) gave different answers")
        ratio = results["stock"][0] / results["ayo"][0]
        ratios.append(ratio)
        rows.append(f"  pair {i} ({first} first): stock {results['stock'][0]:.2f} s, ayo {results['ayo'][0]:.2f} s, "
                    f"ratio {ratio:.2f}x")
    print(f"{name}:" + (f" (EMULATED: {deployment.profile.name} {deployment.profile.content_hash[:10]})"
                        if deployment is not None and deployment.timed_mode == "replay" else ""))
    print("\n".join(rows))
    interval = stats.ratio_interval(ratios)
    spread = f", geomean {interval.geomean:.2f}x [{interval.low:.2f}-{interval.high:.2f}]" if interval else ""
    print(f"  median ratio stock/ayo {statistics.median(ratios):.2f}x over {len(ratios)} pairs{spread}")
    result = {"module": name, "pairs": rows, "ratios": ratios, "median": statistics.median(ratios),
              "geomean": interval.geomean if interval else None, "ci95_low": interval.low if interval else None,
              "ci95_high": interval.high if interval else None, "identical": len(ratios)}
    if before is not None:  # requests the record pass did not see, proxied to the real engines while timed
        result["timed_requests"] = deployment.misses_since(before)
        print(f"  emulator during the timed pairs: {result['timed_requests']}")
    return result


def map_pipeline(url: str, k: int, max_tokens: int) -> Pipeline:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI

    import ayo_langchain

    llm = ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens)
    stock = (ChatPromptTemplate.from_template("Answer briefly: {question}") | llm | StrOutputParser()).map()
    fast = ayo_langchain.optimize(stock)

    def four(chain: Any) -> Callable[[str], Any]:
        def call(question: str) -> list[str]:
            first = QUESTIONS.index(question)
            return chain.invoke([{"question": QUESTIONS[(first + i) % len(QUESTIONS)]} for i in range(4)])

        return call

    return four(stock), four(fast), list


BUILDERS: dict[str, Callable[[str, int, int], Pipeline]] = {
    "compressor": compressor_pipeline, "compressor_pipeline": compressor_pipeline_pipeline, "hyde": hyde_pipeline,
    "map": map_pipeline, "retry_source": retry_source_pipeline,
    "tool_router": tool_router_pipeline, "recursive": recursive_pipeline}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--pairs", type=int, default=8)
    ap.add_argument("--modules", default="accumulate,compact_accumulate,compressor")
    ap.add_argument("-k", type=int, default=4, help="documents retrieved (one LLM call each)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="also write the figures (with provenance) as JSON here")
    ap.add_argument("--deployment", metavar="PROFILE",
                    help="both sides on an emulated deployment (`ayo emulate profiles`), as `ayo compare "
                         "--deployment`: every figure is then emulated and labelled with the profile")
    ap.add_argument("--emulator-mode", choices=["replay", "proxy"], default="replay",
                    help="with --deployment: replay (the profile's timing) or proxy (the real engines, real time)")
    args = ap.parse_args(argv)
    from ayo_core.engines.llm_server import serve_llm

    global EMBED_URL
    given = bool(os.environ.get("AYO_LLM_URL"))
    with ExitStack() as stack:
        llm_url = url = stack.enter_context(serve_llm(dtype="float32"))  # $AYO_LLM_URL as is, else Ayo's server
        deployment = None
        if args.deployment:
            from ayo_bench.deployment import emulated_deployment

            deployment = stack.enter_context(emulated_deployment(args.deployment, llm_url, MODEL, args.emulator_mode))
            url = EMBED_URL = deployment.emulator.base_url
        results = []
        for name in args.modules.split(","):
            if name in ("accumulate", "compact_accumulate"):
                pipeline = llamaindex_pipeline(url, name, args.k, args.max_tokens)
            elif name in BUILDERS:
                pipeline = BUILDERS[name](url, args.k, args.max_tokens)
            else:
                ap.error(f"unknown module {name!r}: use accumulate, compact_accumulate or one of {sorted(BUILDERS)}")
            results.append(run_pairs(name, pipeline, args.pairs, args.seed, deployment))
        if args.out is not None:
            from ayo_bench import provenance

            report = {"provenance": provenance.collect(llm_url, started_by_ayo=not given, dtype="float32",
                                                       outputs=(args.out,)),
                      "command": provenance.portable(" ".join(["benchmarks/module_zoo.py", *(argv or sys.argv[1:])])),
                      "k": args.k, "max_tokens": args.max_tokens, "seed": args.seed, "modules": results}
            if deployment is not None:
                report["deployment"] = deployment.describe()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
