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

The adapter says *what* each module is (a core template from ``ayo_core.templates``, bound
to node callables that run LlamaIndex's own code); the templates build the nodes. Opaque
modules become one OPAQUE node calling the user's object. ``extra_after`` lets a caller
(doc-QA) make every retrieval wait for an ingestion node. Two optimizations are the core's:
the query-gen decode declares ``keep_parts`` (the retriever keeps ``num_queries - 1``
lines) and the ``early_stop`` pass ends it there; a lowered synthesis after ``LLMRerank``
speculates on the rerank's partial selection (``ayo_core.templates.speculation`` with the
hooks in :mod:`ayo_llamaindex.speculation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.schema import QueryBundle

from ayo_core.explain import record_optimization
from ayo_core.graph import Graph
from ayo_core.introspect import overridden
from ayo_core.runtime.caller import CALLER_LOOP, call_stock
from ayo_core.templates import (
    FusionHooks,
    FusionRetrieval,
    Opaque,
    Rerank,
    RerankHooks,
    Retrieval,
    RetrievalHooks,
    Synthesis,
    SynthesisHooks,
    ToolCall,
    Transform,
)
from ayo_core.templates.base import run_within
from ayo_core.templates.speculation import SpeculationBoard, attach_speculation
from ayo_llamaindex import (
    cross_encoder,
    events,
    postprocess,
    prefill,
    recursive,
    retrieval,
    selectors,
    spans,
    speculation,
    synthesis,
)
from ayo_llamaindex.capture import PostprocessorPlan, QueryEnginePlan, RetrieverPlan, SynthesizerPlan
from ayo_llamaindex.runtime import EngineAssignment, embed_send, llm_send
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

# stock logs "Selecting retriever ..." on its own module's logger: so do we
router_log = logging.getLogger("llama_index.core.retrievers.router_retriever")


def build_query_graph(plan: QueryEnginePlan, assign: EngineAssignment, extra_after: frozenset[str] = frozenset(),
                      graph: Graph | None = None, query_input: str = "query") -> Graph:
    """The primitive graph of one query through ``plan`` (input ``query``: a ``QueryBundle``)."""
    g = graph if graph is not None else Graph(query_id="q")
    if query_input not in g:
        g.input(query_input)
    if plan.kind == "opaque":
        qe = plan.obj

        # BaseQueryEngine.query's own events come from our query(): call the inner _query, unless
        # the engine defines query itself (CustomQueryEngine: its _query raises NotImplementedError)
        inner = isinstance(qe, BaseQueryEngine) and not overridden(qe, BaseQueryEngine, ("query", "aquery"))

        async def run_engine(ctx: Any, query: QueryBundle) -> Any:
            if inner:  # our own _query's span stands for the stock engine's: not opened twice
                return await call_stock(*shim.engine_query_methods(qe), query)
            return await call_stock(qe.query, qe.aquery, query)

        g.output(Opaque(run_engine, "query_engine", takes_ctx=True, resources=None, cost=1.0, reason=plan.reason)
                 .build(g, "query_engine", {"query": query_input}, after=extra_after))
        return g
    if plan.kind == "citation_query_engine":
        g.output(_lower_citation_engine(g, plan, assign, query_input, extra_after))
        return g
    nodes = lower_retriever(g, plan.retriever, assign, query_input, extra_after)
    board = speculation_board(plan, assign)
    nodes = _lower_postprocessors(g, plan, assign, query_input, nodes, board)
    if board is not None:
        attach_speculation(g, board, producer=nodes)
    g.output(lower_synthesizer(g, plan.synthesizer, assign, query_input, nodes, board))
    return g


def _lower_postprocessors(g: Graph, plan: QueryEnginePlan, assign: EngineAssignment, query: str, nodes: str,
                          board: SpeculationBoard | None = None) -> str:
    for i, pp in enumerate(plan.postprocessors):
        last = i == len(plan.postprocessors) - 1
        nodes = lower_postprocessor(g, pp, assign, f"post{i}", query, nodes, board if last else None)
    return nodes


class _EventsPerQuery:
    """Events one node opens for a query (``CitationQueryEngine``'s, a fusion or auto-merging retriever's)
    around nodes that lowering split out of the stock call: the opening node hands the query on, so every
    node inside waits for it (dependency pruning keeps data edges), and those nodes run inside the events
    (:func:`ayo_core.templates.base.run_within`); ``events(ctx)`` is the query's, until a node ends them."""

    def __init__(self, make: Callable[[QueryBundle, Callable[[], Any]], Any]) -> None:
        self.make, self.open = make, {}

    def __call__(self, ctx: Any) -> Any:
        return self.open[ctx.query_id]

    async def _opening(self, ctx: Any, query: QueryBundle) -> QueryBundle:  # on the loop: no thread hop
        self.open[ctx.query_id] = self.make(query, lambda: self.open.pop(ctx.query_id, None))
        return query

    def around(self, g: Graph, name: str, module: str, query: str, after: frozenset[str],
               lower_inside: Callable[[str], str], scope: Callable[[Any], AbstractContextManager[Any]]) -> str:
        """Add the opening node ``name``, then ``lower_inside(its name)``, whose nodes run in ``scope(events)``."""
        first = set(g.nodes)
        opened = Transform(self._opening, module, takes_ctx=True).build(g, name, {"query": query}, after=after)
        out = lower_inside(opened)
        run_within(g, [n for n in g.nodes if n not in first and n != opened], lambda ctx: scope(self(ctx)))
        return out


def _lower_citation_engine(g: Graph, plan: QueryEnginePlan, assign: EngineAssignment, query: str,
                           after: frozenset[str]) -> str:
    """``CitationQueryEngine._query``: its own ``RETRIEVE`` event opened around retrieval, postprocessing and
    the cut of the nodes into numbered sources, then synthesis."""
    engine = plan.obj
    opened = _EventsPerQuery(lambda query, on_end: events.EngineRetrieval(engine, query, on_end))

    def cite(ctx: Any, nodes: list) -> list:
        event = opened(ctx)
        with event.failing():
            return event.end(shim.citation_nodes(engine, nodes))

    def retrieval_and_cut(opened_query: str) -> str:
        nodes = lower_retriever(g, plan.retriever, assign, opened_query, frozenset())
        nodes = _lower_postprocessors(g, plan, assign, opened_query, nodes)
        return Transform(cite, "citations", takes_ctx=True).build(g, "citations", {"nodes": nodes})

    nodes = opened.around(g, "citations.open", "citations", query, after, retrieval_and_cut,
                          lambda event: event.event.as_parent())
    return lower_synthesizer(g, plan.synthesizer, assign, query, nodes, None)


def speculation_board(plan: QueryEnginePlan, assign: EngineAssignment) -> SpeculationBoard | None:
    """A board when the last postprocessor is a streamable LLMRerank feeding a lowered synthesizer."""
    if not plan.postprocessors or plan.synthesizer is None or plan.synthesizer.mode in (None,
                                                                                        *synthesis.NODE_FREE_MODES):
        return None
    last = plan.postprocessors[-1]
    if last.kind != "llm_rerank" or assign.llm_kind(last.llm) is None:
        return None
    hooks = speculation.rerank_hooks(synthesis_runner(plan.synthesizer, assign))
    return SpeculationBoard(hooks, consumer="synthesize", module="synthesizer")


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
    if plan.kind == "router":
        return lambda bundle: router_retrieve(plan, assign, ctx, bundle)
    if plan.kind == "recursive":
        root = sub_retrieve_fn(plan.subs[0], assign, ctx)
        return lambda bundle: recursive.recursive_retrieve(plan.obj, bundle, root)
    return lambda bundle: retrieval.opaque_retrieve(plan.obj, bundle)


async def router_retrieve(plan: RetrieverPlan, assign: EngineAssignment, ctx: Any, query: QueryBundle) -> list:
    """``RouterRetriever.retrieve``: its events and spans, its selector (through Ayo's engine), then the chosen
    retrievers, lowered, at once (stock's sync path runs them one after another: see
    :func:`retrieval.one_bundle_at_once`), merged by node id as stock merges them."""
    parts = eng.router_retriever_parts(plan.obj)
    send = llm_send(ctx, assign.llm_kind(plan.llm)) if plan.llm is not None else None
    subs = [sub_retrieve_fn(s, assign, ctx) for s in plan.subs]
    event = events.RouterRetrieval(plan.obj, query)
    with event.inside(), event.failing():
        result = await selectors.select(plan.llm, parts["selector"], parts["metadatas"], query, send)
        if len(result.inds) > 1:
            for i, ind in enumerate(result.inds):
                router_log.info(f"Selecting retriever {ind}: {result.reasons[i]}.")
            per_retriever = await retrieval.one_bundle_at_once([subs[ind] for ind in result.inds], query)
        else:
            try:
                chosen = subs[result.ind]
                router_log.info(f"Selecting retriever {result.ind}: {result.reason}.")
            except ValueError as e:
                raise ValueError("Failed to select retriever") from e
            per_retriever = [await chosen(query)]
        found = {n.node.node_id: n for nodes in per_retriever for n in nodes}
        return event.end_with(found, shim.handle_recursive_retrieval(plan.obj, query, list(found.values())))


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
    if plan.kind == "auto_merging":
        return _lower_auto_merging(g, plan, assign, query, after)
    if plan.kind in ("router", "recursive"):  # one node: the selection or the recursion inside it
        async def route(ctx: Any, query: QueryBundle) -> list:
            return await sub_retrieve_fn(plan, assign, ctx)(query)

        return ToolCall(route, "retriever", takes_ctx=True, side_effect=False, resources=None, cost=1.0).build(
            g, "retrieve", {"query": query}, after=after)

    async def run(ctx: Any, query: QueryBundle) -> Any:
        return await retrieval.opaque_retrieve(plan.obj, query)

    return Opaque(run, "retriever", takes_ctx=True, resources=None, cost=0.05, reason=plan.reason).build(
        g, "retrieve", {"query": query}, after=after)


def _lower_auto_merging(g: Graph, plan: RetrieverPlan, assign: EngineAssignment, query: str,
                        after: frozenset[str]) -> str:
    """``AutoMergingRetriever.retrieve``: its events and spans open (``retrieve`` > ``_retrieve``), its vector
    retriever lowered inside them, then its own merging. Its ``_retrieve`` calls the vector retriever's sync
    ``retrieve()``, under ``aretrieve()`` too (it keeps the base ``_aretrieve``): so does the lowered one."""
    r = plan.obj
    opened = _EventsPerQuery(lambda query, on_end: events.OuterRetrieval(r, query, on_end))

    @contextlib.contextmanager
    def inside(event: events.OuterRetrieval) -> Iterator[None]:
        token = CALLER_LOOP.set(None)  # the vector nodes' own context: the sync path, as stock's _retrieve takes
        try:
            with event.inside():
                yield
        finally:
            CALLER_LOOP.reset(token)

    found = opened.around(g, "retrieve.open", "retriever", query, after, lambda opened_query: _lower_vector(
        g, plan.subs[0], assign, opened_query, frozenset(), name="retrieve.vector"), inside)

    async def merge(ctx: Any, query: QueryBundle, nodes: list) -> list:
        event = opened(ctx)
        with event.failing(), event.inside():  # the docstore may be remote: off the loop
            merged = await asyncio.to_thread(shim.auto_merge, r, nodes)
        with event.failing():
            return event.end(shim.handle_recursive_retrieval(r, query, merged))

    return Transform(merge, "retriever", takes_ctx=True, resources=None).build(
        g, "retrieve", {"query": query, "nodes": found})


def _lower_vector(g: Graph, plan: RetrieverPlan, assign: EngineAssignment, query: str, after: frozenset[str],
                  name: str = "retrieve") -> str:
    """``VectorIndexRetriever.retrieve`` as embed + search nodes."""
    r, embed = plan.obj, plan.embed
    kind = assign.embed_kind(embed)

    async def embed_query(ctx: Any, query: QueryBundle) -> tuple[Any, events.Retrieval]:
        # the retrieve events start here, as stock's retrieve() starts them before it embeds
        event = events.Retrieval(r, query)
        if not retrieval.needs_query_embedding(r, query):
            return None, event
        with event.inside(), event.failing():
            return await embed.agg_query_embedding(embed_send(ctx, kind), list(query.embedding_strs)), event

    async def search(ctx: Any, query: QueryBundle, embedded: tuple[Any, events.Retrieval]) -> Any:
        embedding, event = embedded
        with event.failing():
            bundle = retrieval.with_embedding(query, embedding)
            nodes = await asyncio.to_thread(retrieval.search_sync, r, bundle)
        return event.end(nodes)

    hooks = RetrievalHooks(embed=embed_query, search=search, engine=kind or "local")
    return Retrieval(module="retriever", hooks=hooks).build(g, name, {"query": query}, after=after)


def _lower_fusion(g: Graph, plan: RetrieverPlan, assign: EngineAssignment, query: str, after: frozenset[str]) -> str:
    r, llm = plan.obj, plan.llm
    kind = assign.llm_kind(llm)

    opened = _EventsPerQuery(lambda query, on_end: events.OuterRetrieval(r, query, on_end))

    async def expand(ctx: Any, query: QueryBundle) -> list[str]:
        if r.num_queries <= 1:
            return []
        # ctx.stream_cb streams the lines to the retrievals and, once the kept lines are final, stops
        # the decode (the early_stop pass); stock's parse of a stopped text equals its parse of the whole
        text = await llm.complete(llm_send(ctx, kind), retrieval.query_gen_prompt(r, query.query_str),
                                  stream_cb=ctx.stream_cb)
        retrieval.report_queries(r, text)
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
        event = opened(ctx)
        with event.failing():
            nodes = shim.handle_recursive_retrieval(r, query, retrieval.fuse(r, results))
        return event.end(nodes)

    def streaming_parts(text: str) -> list[str]:
        # finished lines, then the line still being decoded (the runtime holds back the last part)
        finished, growing = retrieval.fusion_lines(r, text)
        return [*finished, growing]

    # a verbose retriever prints every line the LLM wrote, so its decode runs to the end as in stock
    keep = None if shim.retriever_verbose(r) or r.num_queries <= 1 else r.num_queries - 1
    hooks = FusionHooks(expand=expand, parts=streaming_parts, original=original, generated=generated, fuse=fuse,
                        engine=kind or "local", keep_parts=keep)
    # the events hold the query generation, every sub-retrieval and the fusion, as stock's retrieve() holds them
    return opened.around(g, "retrieve.open", "retriever", query, after, lambda opened_query: FusionRetrieval(
        hooks, "retriever").build(g, "retrieve", {"query": opened_query}), lambda event: event.inside())


# -- postprocessors ----------------------------------------------------------------------------

def lower_postprocessor(g: Graph, plan: PostprocessorPlan, assign: EngineAssignment, name: str, query: str,
                        nodes: str, board: SpeculationBoard | None = None) -> str:
    pp = plan.obj
    module = f"postprocessor[{name[4:]}]"
    if plan.kind != "llm_rerank":
        step = postprocess.structured_rerank if plan.kind == "structured_rerank" else postprocess.local_postprocess
        if plan.batched:  # a cross-encoder's predict merged with concurrent queries' (Options.batch_cross_encoder)
            step = cross_encoder.batched_step(pp)
            record_optimization(g, "cross_encoder_batching", name, cross_encoder.NOTE)

        async def run(ctx: Any, query: QueryBundle, nodes: list) -> Any:
            return await step(pp, nodes, query)

        template = {"opaque": Opaque, "structured_rerank": Transform}.get(plan.kind) or \
            postprocess.LOCAL_TEMPLATES.find(pp)
        return template(run, module, takes_ctx=True, resources=None, cost=0.005, reason=plan.reason).build(
            g, name, {"query": query, "nodes": nodes})
    llm, kind = plan.llm, assign.llm_kind(plan.llm)
    open_spans: dict[str, spans.Span] = {}  # per query: the span stock opens around the batches' calls

    async def batches(ctx: Any, query: QueryBundle, nodes: list) -> list:  # on the loop: it touches tasks
        out = shim.rerank_node_batches(pp, nodes)
        open_spans[ctx.query_id] = spans.rerank_span(pp, nodes, query)
        if board is not None and out:
            board.open(ctx.query_id, out, (pp, out, query.query_str))
        return out

    def failed(ctx: Any, exc: BaseException) -> None:
        if board is not None:
            board.pop(ctx.query_id)
        if (span := open_spans.pop(ctx.query_id, None)) is not None:
            span.drop(exc)

    async def choose(ctx: Any, query: QueryBundle, batch: list) -> str:
        spec = board.get(ctx.query_id) if board is not None else None
        stream_cb = spec.stream_cb(ctx, batch) if spec is not None else None
        try:
            with spans.within(open_spans.get(ctx.query_id)), spans.rerank_job():
                return await llm.predict(llm_send(ctx, kind), pp.choice_select_prompt, stream_cb=stream_cb,
                                         **shim.rerank_predict_kwargs(pp, batch, query.query_str))
        except BaseException as exc:
            failed(ctx, exc)
            raise

    async def merge(ctx: Any, batches: list, raw: list[str]) -> list:
        try:
            initial = []
            for raw_response, batch in zip(raw, batches, strict=True):
                initial.extend(shim.rerank_parse(pp, raw_response, batch))
            chosen = sorted(initial, key=lambda x: x.score or 0.0, reverse=True)[: pp.top_n]
        except BaseException as exc:
            failed(ctx, exc)
            raise
        if (span := open_spans.pop(ctx.query_id, None)) is not None:
            span.exit(chosen)
        return chosen

    hooks = RerankHooks(batches=batches, choose=choose, merge=merge, engine=kind or "local")
    return Rerank(pp.top_n, module=module, hooks=hooks).build(g, name, {"query": query, "nodes": nodes})


# -- synthesis ---------------------------------------------------------------------------------

def synthesis_runner(plan: SynthesizerPlan, assign: EngineAssignment) -> Any:
    """``async (ctx, query_str, nodes) -> response text`` for a lowered synthesizer."""
    synth, llm, kind, mode = plan.obj, plan.llm, assign.llm_kind(plan.llm), plan.mode

    async def synthesize_text(ctx: Any, query_str: str, nodes: list) -> Any:
        send = llm_send(ctx, kind)

        async def predict(template: Any, /, **kwargs: Any) -> str:  # kwargs may hold "template" (accumulate)
            return await llm.predict(send, template, **kwargs)

        return await synthesis.run_synthesis(synth, mode, query_str, synthesis.source_texts(nodes), predict)

    return synthesize_text


def lower_synthesizer(g: Graph, plan: SynthesizerPlan, assign: EngineAssignment, query: str, nodes: str,
                      board: SpeculationBoard | None = None) -> str:
    synth = plan.obj
    if plan.mode is None:
        async def run_opaque(ctx: Any, query: QueryBundle, nodes: list) -> Any:
            return await call_stock(synth.synthesize, synth.asynthesize, query=query, nodes=nodes)

        return Opaque(run_opaque, "synthesizer", takes_ctx=True, resources=None, cost=1.0, reason=plan.reason).build(
            g, "synthesize", {"query": query, "nodes": nodes})
    kind, mode = assign.llm_kind(plan.llm), plan.mode
    synthesize_text = synthesis_runner(plan, assign)

    async def run(ctx: Any, query: QueryBundle, nodes: list) -> Any:
        spec = board.pop(ctx.query_id, cancel=False) if board is not None else None
        event = events.Synthesis(synth, query, nodes)
        if len(nodes) == 0:
            if spec is not None:
                spec.cancel()
            return event.end(synthesis.empty_response(synth))
        event.begin()
        with event.failing():
            return event.end(await synthesize_or_take(ctx, query, nodes, spec))

    async def synthesize_or_take(ctx: Any, query: QueryBundle, nodes: list, spec: Any) -> Any:
        used, text = await board.take(spec, nodes) if board is not None else (False, None)
        if not used:
            text = await synthesize_text(ctx, query.query_str, nodes)
        return shim.prepare_response_output(synth, text, list(nodes))  # BaseSynthesizer's own

    if mode in synthesis.LOCAL_MODES:  # no_text / context_only make no LLM call: a local node
        return Transform(run, "synthesizer", takes_ctx=True).build(g, "synthesize", {"query": query, "nodes": nodes})
    hooks = SynthesisHooks(run=run, engine=kind or "local", prefix=prefill.prefix_spec(plan, assign))
    return Synthesis(mode, module="synthesizer", hooks=hooks).build(g, "synthesize", {"query": query, "nodes": nodes})
