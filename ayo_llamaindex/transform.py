"""``TransformQueryEngine`` lowered: the query transform, then the engine it feeds, as one graph.

Stock ``TransformQueryEngine._query`` runs ``query_transform.run(query_bundle)`` and passes the new
bundle to its engine's ``query``; ``_aquery`` runs the same *synchronous* transform (a blocking
``llm.predict`` on the caller's event loop) before ``await engine.aquery``. Here::

    query ─┬─ transform (DECODE: HyDEQueryTransform's predict through Ayo's engine;
           │             any other transform: the user's object, in a worker thread)
           ├─ transform.prefetch (the original query's embedding, HyDE with include_original=True
           │                      and a lowered vector retriever: computed while the document decodes)
           └─ answer (TOOL_CALL: the engine, optimized, on the new bundle) ── output

The hypothetical document's prompt and parsing are the transform's own (``LLMBinding.predict`` with
its ``_hyde_prompt``); its bundle is the one ``HyDEQueryTransform._run`` builds. The retrieval that
embeds the bundle's strings takes the prefetched vector (``embedding.prefetched``) and emits the
stock ``EMBEDDING`` events for it where stock does, so handlers count the same embeddings.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from llama_index.core.indices.query.query_transform.base import HyDEQueryTransform
from llama_index.core.query_engine import TransformQueryEngine
from llama_index.core.schema import QueryBundle

from ayo_core.explain import explanation, record_optimization
from ayo_core.graph import Graph
from ayo_core.introspect import overrides_reason
from ayo_core.pipeline import Options
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_core.templates import LLMCall, Opaque, ToolCall, Transform
from ayo_llamaindex import embedding, events, spans
from ayo_llamaindex.composed import ComposedQueryEngine, ToolQueryEngine, tool_engine
from ayo_llamaindex.embedding import EmbedBinding
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.runtime import EngineAssignment, assign_engines, embed_send, llm_send
from ayo_shims import llamaindex_engines as eng


@dataclass
class TransformPlan:
    """What capture found in a ``TransformQueryEngine``."""

    obj: Any
    transform: Any
    metadata: dict | None
    hyde_llm: LLMBinding | None  # None: the transform runs as the user's object
    transform_reason: str
    engine: ToolQueryEngine
    prefetch: EmbedBinding | None  # the engine's query embedding, when it can start with the decode
    kind: str = "transform"

    def llm_bindings(self) -> list[LLMBinding]:
        return [self.hyde_llm] if self.hyde_llm is not None else []

    def embed_bindings(self) -> list[EmbedBinding]:
        return [self.prefetch] if self.prefetch is not None else []

    def opaque_modules(self) -> list[tuple[str, str]]:
        out = []
        if self.hyde_llm is None:
            out.append(("query_transform", self.transform_reason))
        elif not self.hyde_llm.recognized:
            out.append((self.hyde_llm.label, f"LLM called as the user's object: {self.hyde_llm.reason}"))
        out.extend((f"query_engine.{m.name}", m.reason) for m in self.engine.explain().opaque)
        return out


def not_lowered_reason(engine: Any) -> str | None:
    """Why ``engine`` (a ``TransformQueryEngine``) runs as the user's object; None when Ayo lowers it."""
    return overrides_reason(engine, TransformQueryEngine, eng.TRANSFORM_MIRRORED)


def _hyde_binding(transform: Any) -> tuple[LLMBinding | None, str]:
    if isinstance(transform, HyDEQueryTransform):
        if over := overrides_reason(transform, HyDEQueryTransform, eng.HYDE_MIRRORED):
            return None, over
        return LLMBinding(eng.hyde_parts(transform)["llm"]), ""
    return None, (f"{type(transform).__name__} is a query transform Ayo does not lower (HyDEQueryTransform is): "
                  "it runs as the user's object; the engine it feeds is still optimized")


def _prefetch_binding(transform: Any, hyde: LLMBinding | None, engine: ToolQueryEngine) -> EmbedBinding | None:
    """The engine's embedding model when the original query's embedding can start with the decode: HyDE with
    ``include_original=True`` in front of a lowered vector retriever whose model Ayo's engines serve."""
    if hyde is None or not eng.hyde_parts(transform)["include_original"]:
        return None
    retriever = getattr(engine.plan, "retriever", None)
    if retriever is None or retriever.kind != "vector" or retriever.embed is None or not retriever.embed.recognized:
        return None
    return retriever.embed


def capture_transform(engine: Any, options: Options) -> TransformPlan:
    parts = eng.transform_parts(engine)
    transform = parts["transform"]
    hyde, reason = _hyde_binding(transform)
    inner = tool_engine(parts["query_engine"], options)
    return TransformPlan(engine, transform, parts["metadata"], hyde, reason, inner,
                         _prefetch_binding(transform, hyde, inner))


# -- lowering --------------------------------------------------------------------------------

def build_transform_graph(plan: TransformPlan, assign: EngineAssignment) -> Graph:
    g = Graph(query_id="q")
    g.input("query")
    inputs = {"query": "query", "bundle": _lower_transform(g, plan, assign)}
    if plan.prefetch is not None:
        inputs["ready"] = _lower_prefetch(g, plan, assign)
        record_optimization(g, "hyde_prefetch", "transform.prefetch",
                            "the original query is embedded while the hypothetical document decodes")
    g.output(ToolCall(_answer_fn(plan), "query_engine", takes_ctx=True, side_effect=False, resources=None,
                      cost=2.0).build(g, "answer", inputs))
    return g


def _lower_transform(g: Graph, plan: TransformPlan, assign: EngineAssignment) -> str:
    transform, metadata = plan.transform, plan.metadata
    if plan.hyde_llm is None:
        async def run(ctx: Any, query: QueryBundle) -> QueryBundle:
            # stock calls the synchronous run() on both paths
            return await asyncio.to_thread(transform.run, query, metadata=metadata)

        return Opaque(run, "query_transform", takes_ctx=True, resources=None, cost=1.0,
                      reason=plan.transform_reason).build(g, "transform", {"query": "query"})
    binding, kind = plan.hyde_llm, assign.llm_kind(plan.hyde_llm)
    hyde = eng.hyde_parts(transform)

    async def call(ctx: Any, query: QueryBundle) -> QueryBundle:
        # HyDEQueryTransform._run (in its span, as run() opens it): the hypothetical document, then its bundle
        # stock's run() is synchronous on both paths: its predict's spans are the sync ones, even under aquery
        token = CALLER_LOOP.set(None)  # this node's own context
        try:
            with spans.opened(transform, ["_run"], query, metadata) as span:
                document = await binding.predict(llm_send(ctx, kind), hyde["prompt"], context_str=query.query_str)
                strs = [document, *query.embedding_strs] if hyde["include_original"] else [document]
                return span.set(QueryBundle(query_str=query.query_str, custom_embedding_strs=strs))
        finally:
            CALLER_LOOP.reset(token)

    return LLMCall(lambda query: query, "query_transform", call=call, cost=1.0).build(
        g, "transform", {"query": "query"})


def _lower_prefetch(g: Graph, plan: TransformPlan, assign: EngineAssignment) -> str:
    binding = plan.prefetch
    kind = assign.embed_kind(binding)

    async def run(ctx: Any, query: QueryBundle) -> dict[str, list[float]]:
        send = embed_send(ctx, kind)
        return await binding.raw_query_embeddings(send, list(query.embedding_strs)) if send is not None else {}

    return Transform(run, "query_transform", takes_ctx=True, resources=None).build(
        g, "transform.prefetch", {"query": "query"})


def _answer_fn(plan: TransformPlan) -> Any:
    engine, model = plan.engine, plan.prefetch.model if plan.prefetch is not None else None

    async def answer(ctx: Any, query: QueryBundle, bundle: QueryBundle, ready: dict | None = None) -> Any:
        """``await self._query_engine.aquery(query_bundle)`` on the transformed bundle."""
        with embedding.prefetched(model, ready or {}):
            return await engine.aquery_in_graph(bundle)

    return answer


class OptimizedTransformQueryEngine(ComposedQueryEngine):
    """A ``TransformQueryEngine`` run as an Ayo graph: the same response; the HyDE decode on Ayo's engine
    (never blocking the caller's loop), the original query embedded meanwhile, then the engine optimized."""

    capture = staticmethod(capture_transform)
    build = staticmethod(build_transform_graph)

    def capture_plan(self, query_engine: Any) -> tuple[Any, EngineAssignment]:
        plan = capture_transform(query_engine, self._options)
        return plan, assign_engines(plan.llm_bindings(), plan.embed_bindings())

    def _query_event(self, query_bundle: QueryBundle) -> Any:
        # TransformQueryEngine._query opens no QUERY event of its own (its engine's query does)
        return events.query_event(self, query_bundle, lowered=False)

    def explain(self) -> Any:
        transform = type(self._plan.transform).__name__
        lines = [f"query_engine: {type(self._stock).__name__}",
                 f"  query_transform: {'LLMCall' if self._plan.hyde_llm else 'Opaque'} ({transform})",
                 f"  query_engine: {type(self._plan.engine.stock).__name__}"]
        modules = [(type(self._stock).__name__, "QueryEngine")]
        if self._plan.hyde_llm is not None:
            modules.append((transform, "LLMCall"))
        return explanation(f"Ayo plan for {type(self._stock).__name__}", graph=self.graph, trace=self.last_trace,
                           modules=modules, opaque=self._plan.opaque_modules(), module_lines=lines)

    def __repr__(self) -> str:
        return f"OptimizedTransformQueryEngine({type(self._stock).__name__})"
