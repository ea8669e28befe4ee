"""Query engines that compose others (``SubQuestionQueryEngine``, ``RouterQueryEngine``), run as one Ayo graph.

:class:`ComposedQueryEngine` is the stand-in both share (capture, engine assignment, the graph built and
optimized once); :class:`ToolQueryEngine` is a tool's query engine inside such a graph (or inside a
workflow step), awaited on the loop the composed query already runs on. The engines themselves are
lowered in :mod:`ayo_llamaindex.sub_question` and :mod:`ayo_llamaindex.router`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.schema import QueryBundle

from ayo_core.graph import Graph
from ayo_core.pipeline import Options
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_core.templates import Opaque, ToolCall
from ayo_llamaindex import events, spans
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.runtime import EngineAssignment, assign_engines


class ToolQueryEngine(OptimizedQueryEngine):
    """A tool's query engine inside a composed engine's graph (SubQuestion, Router): its own optimized graph,
    awaited on the loop the composed query already runs on (``aquery`` would hop to that same loop)."""

    async def aquery_in_graph(self, question: str | QueryBundle, async_call: bool | None = None) -> Any:
        """``query(question)`` or ``aquery(question)`` as the composed engine's stock code calls it: the same
        response and query events, run from a node of another graph. ``async_call=None``: the path the
        composed query came in on (stock's ``_query`` calls ``query``, ``_aquery`` calls ``aquery``); True:
        ``aquery`` even inside a sync query (SubQuestion's ``use_async=True``)."""
        bundle = QueryBundle(question) if isinstance(question, str) else question
        loop = CALLER_LOOP.get()
        if loop is None and async_call:  # stock runs the coroutine on a loop of its own: ours stands for it
            loop = asyncio.get_running_loop()
        if self._stock_query:  # the stock engine's own query() emits its events inside the opaque node
            return await self._run(bundle, loop)
        # the stock engine's spans, as its query()/aquery() opens them (``RetrieverQueryEngine.query`` >
        # ``._query``): the inner query's nodes start inside this node, so they nest under them
        name = "aquery" if async_call else spans.sync_or_async("query")
        with spans.opened(self._stock, [name], question) as outer:
            with events.QueryCall(self, question).span() as done:  # BaseQueryEngine.aquery's events
                with spans.opened(self._stock, [f"_{name}"], bundle) as inner, self._query_event(bundle) as event:
                    response = inner.set(await self._run(bundle, loop))
                    event.on_end(payload={EventPayload.RESPONSE: response})
                return outer.set(done(response))


def tool_engine(query_engine: Any, options: Options) -> ToolQueryEngine:
    """The stand-in of a tool's (or a step's) query engine, run with the composed engine's ``options``."""
    stock = query_engine.stock if isinstance(query_engine, OptimizedQueryEngine) else query_engine
    return ToolQueryEngine(stock, options=options)


class ComposedQueryEngine(OptimizedQueryEngine):
    """A query engine that composes others (SubQuestion, Router) run as one Ayo graph: the pipeline of
    :class:`OptimizedQueryEngine`, whose plan and graph a subclass names (its ``capture`` and ``build``)."""

    capture: Callable[[Any, Options], Any]
    build: Callable[[Any, EngineAssignment], Graph]

    def capture_plan(self, query_engine: Any) -> tuple[Any, EngineAssignment]:
        plan = type(self).capture(query_engine, self._options)
        return plan, assign_engines(plan.llm_bindings(), [])

    def build_graph(self, captured: tuple[Any, EngineAssignment], _call: Any) -> Graph:
        return type(self).build(*captured)


def retrieve_then_route(retriever: Any, reason: str, route: Callable[..., Any], retrieved: str) -> Graph:
    """``query ── retrieve_<retrieved> ── route ── output``: the user's ``retriever`` (Opaque: its sync
    ``retrieve`` off the loop, as stock calls it on both paths; ``reason`` says why), then
    ``route(ctx, query, <retrieved>)`` (a ToolCall: the engines the retrieval picked)."""
    g = Graph(query_id="q")
    g.input("query")

    async def retrieve(ctx: Any, query: QueryBundle) -> list[Any]:
        return await asyncio.to_thread(retriever.retrieve, query)  # stock's sync call, off the loop

    found = Opaque(retrieve, "retriever", takes_ctx=True, resources=None, cost=0.1,
                   reason=reason).build(g, f"retrieve_{retrieved}", {"query": "query"})
    g.output(ToolCall(route, "router", takes_ctx=True, side_effect=False, resources=None,
                      cost=2.0).build(g, "route", {"query": "query", retrieved: found}))
    return g
