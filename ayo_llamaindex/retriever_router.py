"""``RetrieverRouterQueryEngine`` (deprecated in LlamaIndex) lowered: one retrieved node picks the engine.

::

    query ── retrieve (Opaque: the user's retriever, its sync retrieve as stock calls it on both paths)
               └─ route (TOOL_CALL: the user's node_to_query_engine_fn on the one node, then that engine,
                  optimized, on the same bundle) ── output

Stock ``_query`` retrieves, raises ``ValueError`` for more than one node (an ``IndexError`` for none),
maps ``nodes[0].node`` to an engine with the user's function and returns that engine's sync ``query``;
``_aquery`` just calls ``_query``, so stock takes the sync path under ``aquery()`` too. The graph does
the same on both paths: it runs without the caller's loop (every node takes the sync path), and the
chosen engine runs as an optimized :class:`~ayo_llamaindex.composed.ToolQueryEngine` whose spans are
its sync ``query`` ones. Stock opens no ``QUERY`` event of its own (the chosen engine's query does).

The retriever stays the user's object in an Opaque node (as ``ToolRetrieverRouterQueryEngine``'s), not
lowered through :mod:`ayo_llamaindex.retrieval` even when it is a ``VectorIndexRetriever``: it may be any
``BaseRetriever``, it searches a handful of engine descriptions, and its query embedding is left on the
``QueryBundle`` (stock's retriever sets ``bundle.embedding``), where the chosen engine's lowered vector
retrieval reuses it as stock's does. Lowering it would move that one embedding onto Ayo's engine and
gain nothing measurable, while the Opaque node keeps its spans, events and errors the retriever's own.

The chosen engine's stand-in is built on first use and kept in a bounded LRU
(:class:`~ayo_core.identity_cache.IdentityLRU`), which holds the engine itself beside it: a function that
builds a new engine per call can neither grow the cache without limit nor, once an engine is collected,
hand its reused ``id()`` the wrong stand-in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.query_engine import RetrieverRouterQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle

from ayo_core.explain import explanation, record_optimization
from ayo_core.graph import Graph
from ayo_core.identity_cache import IdentityLRU
from ayo_core.introspect import overrides_reason
from ayo_core.pipeline import Options
from ayo_llamaindex import events, spans
from ayo_llamaindex.composed import ComposedQueryEngine, ToolQueryEngine, retrieve_then_route, tool_engine
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.query_engine import spanned_elsewhere
from ayo_llamaindex.runtime import LOOP, EngineAssignment
from ayo_shims import llamaindex_engines as eng

RETRIEVER_REASON = ("the engine's retriever (of nodes that stand for query engines) runs as the user's object "
                    "(stock calls its sync retrieve on both paths)")
ENGINE_CACHE_SIZE = 64  # distinct chosen engines kept optimized; a routing function has a handful


@dataclass
class RetrieverRouterPlan:
    obj: Any
    parts: dict[str, Any]
    options: Options
    # the stand-ins of the engines ``node_to_query_engine_fn`` returned, least recently used first
    engines: IdentityLRU[ToolQueryEngine] = field(init=False, default_factory=lambda: IdentityLRU(ENGINE_CACHE_SIZE))
    kind: str = "retriever_router"

    def standin(self, query_engine: Any) -> ToolQueryEngine:
        """``query_engine``'s optimized stand-in, built on first use (runs on Ayo's loop: no lock needed)."""
        return self.engines.get(query_engine, lambda engine: tool_engine(engine, self.options))

    def llm_bindings(self) -> list[LLMBinding]:
        return []  # the engine has no model of its own: the chosen engines' stand-ins bind theirs

    def opaque_modules(self) -> list[tuple[str, str]]:
        return [("retriever", RETRIEVER_REASON)]


def not_lowered_reason(engine: Any) -> str | None:
    """Why ``engine`` (a ``RetrieverRouterQueryEngine``) runs as the user's object; None when Ayo lowers it."""
    return overrides_reason(engine, RetrieverRouterQueryEngine, eng.RETRIEVER_ROUTER_MIRRORED)


def capture_retriever_router(engine: Any, options: Options) -> RetrieverRouterPlan:
    return RetrieverRouterPlan(engine, eng.retriever_router_parts(engine), options)


def build_retriever_router_graph(plan: RetrieverRouterPlan, _assign: EngineAssignment) -> Graph:
    g = retrieve_then_route(plan.parts["retriever"], RETRIEVER_REASON, _route_fn(plan), "nodes")
    record_optimization(g, "optimized_route", "route",
                        "the engine the retrieved node maps to runs optimized on the shared engine schedulers")
    return g


def chosen_node(nodes: list[NodeWithScore]) -> Any:
    """``nodes[0].node`` with stock's checks: ``ValueError`` for more than one, ``IndexError`` for none."""
    if len(nodes) > 1:
        raise ValueError("Retrieved more than one node.")  # stock's message
    return nodes[0].node


def _route_fn(plan: RetrieverRouterPlan) -> Any:
    to_engine = plan.parts["node_to_query_engine"]

    async def route(ctx: Any, query: QueryBundle, nodes: list[NodeWithScore]) -> RESPONSE_TYPE:
        """``RetrieverRouterQueryEngine._query`` after the retrieval (its errors, then the engine's query)."""
        node = chosen_node(nodes)
        # the user's function may build an engine (or do I/O): a worker thread keeps the shared loop free
        engine = plan.standin(await asyncio.to_thread(to_engine, node))
        return await engine.aquery_in_graph(query, async_call=False)  # stock's sync query(), its spans

    return route


class OptimizedRetrieverRouterQueryEngine(ComposedQueryEngine):
    """A ``RetrieverRouterQueryEngine`` run as an Ayo graph: the same response and errors, the chosen engine
    optimized."""

    capture = staticmethod(capture_retriever_router)
    build = staticmethod(build_retriever_router_graph)

    # stock's _aquery returns self._query(...): its _query span inside _aquery's, and the sync path throughout
    @spanned_elsewhere
    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with spans.opened(self._stock, ["_aquery", "_query"], query_bundle) as inner:
            return inner.set(await LOOP.arun(self._run(query_bundle)))  # no caller loop: stock's sync path

    def _query_event(self, query_bundle: QueryBundle) -> Any:
        # RetrieverRouterQueryEngine._query opens no QUERY event of its own (the chosen engine's query does)
        return events.query_event(self, query_bundle, lowered=False)

    def explain(self) -> Any:
        to_engine = self._plan.parts["node_to_query_engine"]
        lines = [f"query_engine: {type(self._stock).__name__}",
                 f"  retriever: Opaque ({type(self._plan.parts['retriever']).__name__})",
                 f"  engine: ToolCall ({getattr(to_engine, '__name__', type(to_engine).__name__)} on the one "
                 "retrieved node, then that engine, optimized)"]
        if chosen := self._plan.engines.values():  # known only once queries ran: the function picks them
            lines.append(f"  engines chosen so far: {', '.join(type(e.stock).__name__ for e in chosen)}")
        return explanation(f"Ayo plan for {type(self._stock).__name__}", graph=self.graph, trace=self.last_trace,
                           modules=[(type(self._stock).__name__, "QueryEngine")], opaque=self._plan.opaque_modules(),
                           module_lines=lines)

    def __repr__(self) -> str:
        return f"OptimizedRetrieverRouterQueryEngine({type(self._stock).__name__})"
