"""Lowering: a captured query-engine plan becomes one per-query primitive graph (``ayo_core.graph``).

Shape (for ``RetrieverQueryEngine``; names are stable across queries, so the core's
cost model learns each node's duration)::

    query ─┬─ retrieve.embed (EMBED) ── retrieve.search (SEARCH)            VectorIndexRetriever
           │  or retrieve.expand (DECODE, streamed) ─ retrieve.generated     QueryFusionRetriever:
           │     (per generated query, starts as its line is decoded)        decode pipelining
           │  + retrieve.original (SEARCH, during the decode) ─ retrieve.fuse
           ├─ post{i}.batches ─ post{i}.choose (DECODE per batch) ─ post{i}.merge   LLMRerank
           │  or post{i} (TRANSFORM / OPAQUE)
           └─ synthesize (DECODE: compact / refine / tree_summarize / simple_summarize) ─ output
    query ── synthesize.prefill (PARTIAL_PREFILL, optional; added by the core's prefill-splitting
             pass from the synthesize node's PrefixSpec): prompt parts known before retrieval

Opaque modules become one OPAQUE node calling the user's object. ``extra_after`` lets a
caller (doc-QA) make every retrieval wait for an ingestion node.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from llama_index.core.schema import QueryBundle

from ayo_core.graph import Graph, Node, Op
from ayo_llamaindex import postprocess, prefill, retrieval, synthesis
from ayo_llamaindex.capture import PostprocessorPlan, QueryEnginePlan, RetrieverPlan, SynthesizerPlan
from ayo_llamaindex.runtime import EngineAssignment, embed_send, llm_send


def build_query_graph(plan: QueryEnginePlan, assign: EngineAssignment, extra_after: frozenset[str] = frozenset(),
                      graph: Graph | None = None, query_input: str = "query") -> Graph:
    """The primitive graph of one query through ``plan`` (input ``query``: a ``QueryBundle``)."""
    g = graph if graph is not None else Graph(query_id="q")
    if query_input not in g:
        g.input(query_input)
    if plan.kind == "opaque":
        qe = plan.obj

        async def run_engine(ctx: Any, query: QueryBundle) -> Any:
            return await asyncio.to_thread(qe.query, query)

        g.add(Node("query_engine", Op.OPAQUE, fn=run_engine, inputs={"query": query_input}, module="query_engine",
                   after=extra_after, cost=1.0, meta={"reason": plan.reason}))
        g.output("query_engine")
        return g
    nodes = lower_retriever(g, plan.retriever, assign, query_input, extra_after)
    for i, pp in enumerate(plan.postprocessors):
        nodes = lower_postprocessor(g, pp, assign, f"post{i}", query_input, nodes)
    out = lower_synthesizer(g, plan.synthesizer, assign, query_input, nodes)
    g.output(out)
    return g


# -- retrieval ---------------------------------------------------------------------------------

def sub_retrieve_fn(plan: RetrieverPlan, assign: EngineAssignment, ctx: Any) -> Any:
    """``async retrieve(bundle) -> nodes`` for a (sub-)retriever plan, inside one node."""
    if plan.kind == "vector":
        embed = plan.embed
        send = embed_send(ctx, assign.embed_kind(embed))
        return lambda bundle: retrieval.vector_retrieve(
            plan.obj, bundle, lambda strs: embed.agg_query_embedding(send, strs))
    if plan.kind == "fusion":
        llm, lsend = plan.llm, llm_send(ctx, assign.llm_kind(plan.llm))
        subs = [sub_retrieve_fn(s, assign, ctx) for s in plan.subs]
        return lambda bundle: retrieval.fusion_retrieve(
            plan.obj, bundle, lambda prompt, stream_cb=None: llm.complete(lsend, prompt, stream_cb=stream_cb), subs)
    return lambda bundle: retrieval.opaque_retrieve(plan.obj, bundle)


async def _retrieve_with_subs(plan: RetrieverPlan, assign: EngineAssignment, ctx: Any,
                              bundle: QueryBundle) -> list[list[Any]]:
    """One query through every sub-retriever of a fusion retriever, as stock would."""
    subs = [sub_retrieve_fn(s, assign, ctx) for s in plan.subs]
    if plan.obj.use_async:  # stock: aretrieve on each, concurrently, bundle left untouched
        return list(await asyncio.gather(*(sub(copy.copy(bundle)) for sub in subs)))
    return [await sub(bundle) for sub in subs]  # stock: retrieve() one after another


def lower_retriever(g: Graph, plan: RetrieverPlan, assign: EngineAssignment, query: str,
                    after: frozenset[str]) -> str:
    if plan.kind == "vector":
        return _lower_vector(g, plan, assign, query, after)
    if plan.kind == "fusion":
        return _lower_fusion(g, plan, assign, query, after)

    async def run(ctx: Any, query: QueryBundle) -> Any:
        return await retrieval.opaque_retrieve(plan.obj, query)

    g.add(Node("retrieve", Op.OPAQUE, fn=run, inputs={"query": query}, module="retriever", after=after,
               cost=0.05, meta={"reason": plan.reason}))
    return "retrieve"


def _lower_vector(g: Graph, plan: RetrieverPlan, assign: EngineAssignment, query: str, after: frozenset[str]) -> str:
    r, embed = plan.obj, plan.embed
    kind = assign.embed_kind(embed)

    async def embed_query(ctx: Any, query: QueryBundle) -> Any:
        if not retrieval.needs_query_embedding(r, query):
            return None
        return await embed.agg_query_embedding(embed_send(ctx, kind), list(query.embedding_strs))

    async def search(ctx: Any, query: QueryBundle, embedding: Any) -> Any:
        if embedding is not None:
            query.embedding = embedding  # stock retrieve() leaves it on the caller's bundle
        return await asyncio.to_thread(retrieval.search_sync, r, query)

    g.add(Node("retrieve.embed", Op.EMBED, fn=embed_query, inputs={"query": query}, engine=kind or "local",
               module="retriever", batchable=True, cost=0.02))
    g.add(Node("retrieve.search", Op.SEARCH, fn=search, inputs={"query": query, "embedding": "retrieve.embed"},
               module="retriever", after=after, cost=0.01))
    return "retrieve.search"


def _lower_fusion(g: Graph, plan: RetrieverPlan, assign: EngineAssignment, query: str, after: frozenset[str]) -> str:
    r, llm = plan.obj, plan.llm
    kind = assign.llm_kind(llm)

    async def expand(ctx: Any, query: QueryBundle) -> list[str]:
        if r.num_queries <= 1:
            return []
        text = await llm.complete(llm_send(ctx, kind), retrieval.query_gen_prompt(r, query.query_str),
                                  stream_cb=ctx.stream_cb)
        return retrieval.parse_queries(r, text)

    async def original(ctx: Any, query: QueryBundle) -> list[list[Any]]:
        return await _retrieve_with_subs(plan, assign, ctx, query)

    async def generated(ctx: Any, queries: str) -> list[list[Any]]:
        return await _retrieve_with_subs(plan, assign, ctx, QueryBundle(queries))

    async def fuse(ctx: Any, query: QueryBundle, original: list, generated: list, queries: list[str]) -> Any:
        results: dict[tuple[str, int], list[Any]] = {}
        for q, per_sub in zip([query.query_str, *queries], [original, *generated], strict=True):
            for i, nodes in enumerate(per_sub):
                results[(q, i)] = nodes  # a repeated query string keeps its first slot, as in stock
        return r._handle_recursive_retrieval(query, retrieval.fuse(r, results))

    def streaming_parts(text: str) -> list[str]:
        # finished lines, then the line still being decoded (the runtime holds back the last part)
        lines = text.lstrip("`").split("\n")
        return retrieval.finished_queries(r, text) + [lines[-1]]

    g.add(Node("retrieve.expand", Op.DECODE, fn=expand, inputs={"query": query}, engine=kind or "local",
               module="retriever", streamable=True, cost=1.0, meta={"parts": streaming_parts}))
    g.add(Node("retrieve.original", Op.SEARCH, fn=original, inputs={"query": query}, module="retriever",
               after=after, cost=0.03))
    g.add(Node("retrieve.generated", Op.SEARCH, fn=generated, inputs={"queries": "retrieve.expand"},
               module="retriever", after=after, cost=0.03, meta={"per_part": "queries", "pipelined": True}))
    g.add(Node("retrieve.fuse", Op.AGGREGATE, fn=fuse, module="retriever", cost=0.001,
               inputs={"query": query, "original": "retrieve.original", "generated": "retrieve.generated",
                       "queries": "retrieve.expand"}))
    return "retrieve.fuse"


# -- postprocessors ----------------------------------------------------------------------------

def lower_postprocessor(g: Graph, plan: PostprocessorPlan, assign: EngineAssignment, name: str, query: str,
                        nodes: str) -> str:
    pp = plan.obj
    module = f"postprocessor[{name[4:]}]"
    if plan.kind != "llm_rerank":
        async def run(ctx: Any, query: QueryBundle, nodes: list) -> Any:
            return await postprocess.local_postprocess(pp, nodes, query)

        op = Op.TRANSFORM if plan.kind == "local" else Op.OPAQUE
        g.add(Node(name, op, fn=run, inputs={"query": query, "nodes": nodes}, module=module, cost=0.005,
                   meta={"reason": plan.reason} if plan.reason else {}))
        return name
    llm, kind = plan.llm, assign.llm_kind(plan.llm)

    def batches(ctx: Any, nodes: list) -> list:
        return pp._get_node_batches(nodes)

    async def choose(ctx: Any, query: QueryBundle, batch: list) -> str:
        return await llm.predict(llm_send(ctx, kind), pp.choice_select_prompt,
                                 **pp._get_predict_kwargs(batch, query.query_str))

    def merge(ctx: Any, batches: list, raw: list[str]) -> list:
        initial = []
        for raw_response, batch in zip(raw, batches, strict=True):
            initial.extend(pp._parse_raw_response(raw_response, batch))
        return sorted(initial, key=lambda x: x.score or 0.0, reverse=True)[: pp.top_n]

    g.add(Node(f"{name}.batches", Op.TRANSFORM, fn=batches, inputs={"nodes": nodes}, module=module, cost=0.001))
    g.add(Node(f"{name}.choose", Op.DECODE, fn=choose, inputs={"query": query, "batch": f"{name}.batches"},
               engine=kind or "local", module=module, batchable=True, cost=1.0, meta={"per_part": "batch"}))
    g.add(Node(f"{name}.merge", Op.AGGREGATE, fn=merge, module=module, cost=0.001,
               inputs={"batches": f"{name}.batches", "raw": f"{name}.choose"}))
    return f"{name}.merge"


# -- synthesis ---------------------------------------------------------------------------------

def lower_synthesizer(g: Graph, plan: SynthesizerPlan, assign: EngineAssignment, query: str, nodes: str) -> str:
    synth = plan.obj
    if plan.mode is None:
        async def run_opaque(ctx: Any, query: QueryBundle, nodes: list) -> Any:
            return await asyncio.to_thread(synth.synthesize, query, nodes)

        g.add(Node("synthesize", Op.OPAQUE, fn=run_opaque, inputs={"query": query, "nodes": nodes},
                   module="synthesizer", cost=1.0, meta={"reason": plan.reason}))
        return "synthesize"
    llm, kind, mode = plan.llm, assign.llm_kind(plan.llm), plan.mode

    async def run(ctx: Any, query: QueryBundle, nodes: list) -> Any:
        if len(nodes) == 0:
            return synthesis.empty_response(synth)
        send = llm_send(ctx, kind)

        async def predict(template: Any, **kwargs: Any) -> str:
            return await llm.predict(send, template, **kwargs)

        text = await synthesis.run_synthesis(synth, mode, query.query_str, synthesis.source_texts(nodes), predict)
        return synthesis.prepare_response(synth, text, nodes)

    meta: dict[str, Any] = {"mode": mode}
    spec = prefill.prefix_spec(plan, assign)
    if spec is not None:
        meta["prefix"] = spec
    g.add(Node("synthesize", Op.DECODE, fn=run, inputs={"query": query, "nodes": nodes}, engine=kind or "local",
               module="synthesizer", cost=1.5, meta=meta))
    return "synthesize"
