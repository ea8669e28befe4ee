"""Query engines and retrievers a workflow step calls, lowered.

A step of an optimized workflow that awaits ``query_engine.aquery(q)`` or ``retriever.aretrieve(q)``
(the way LlamaIndex's workflow examples retrieve and answer inside steps) gets Ayo's lowered graph
of that engine or retriever: its
query embedding, retrieval, reranking and synthesis go through the shared engine schedulers on the
workflow's own loop, so the sub-queries of concurrent step invocations batch with each other and
with the steps' direct model calls. The response and the query's events are those of
``optimize(query_engine).aquery(q)`` (identical to stock's; see
:class:`~ayo_llamaindex.composed.ToolQueryEngine`; a ``SubQuestionQueryEngine`` or
``RouterQueryEngine`` runs as its own composed graph, sub-questions started from the generator's
stream); a retrieval's nodes and events are stock
``aretrieve``'s, with the query embedded by Ayo's embedding engine (batched across the concurrent
step invocations, off the loop: stock's HuggingFace embedding runs on the loop and blocks the
other steps) and, for a ``QueryFusionRetriever``, its generated queries searched as their lines
are decoded.

Left to stock: a sync ``query()``/``retrieve()`` in an async step (it blocks the loop in stock
too), an engine or retriever Ayo does not lower (it would run whole anyway), an engine already
optimized by the user, and any call outside a step Ayo scheduled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from ayo_core.graph import Graph
from ayo_core.identity_cache import IdentityLRU
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_llamaindex.capture import QueryEnginePlan, capture_retriever
from ayo_llamaindex.composed import ToolQueryEngine, tool_engine
from ayo_llamaindex.composed_engines import optimize_composed
from ayo_llamaindex.lowering import lower_retriever
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.runtime import EngineAssignment, assign_engines, runtime_for

log = logging.getLogger(__name__)

# engines a workflow's steps may build per call (``index.as_query_engine()`` inside the step): the
# lowered stand-ins of the most recent ones are kept, not every engine a long-lived workflow met
_KEPT_ENGINES = 32


class StepRetriever:
    """A retriever's lowered graph (input ``query``: a ``QueryBundle``; output: its nodes), run per call:
    a facade over the core's :class:`~ayo_core.pipeline.OptimizedPipeline` (one static shape)."""

    def __init__(self, retriever: Any, plan: Any, options: Options) -> None:
        self.retriever, self._options = retriever, options
        parts = QueryEnginePlan(retriever, "retriever", retriever=plan)
        self.assign: EngineAssignment = assign_engines(parts.llm_bindings(), parts.embed_bindings())
        self._pipeline: OptimizedPipeline[Any] = OptimizedPipeline(
            lambda: plan, self._lower, options, runtime=self._runtime, static=True, query_prefix="wr")

    def _lower(self, plan: Any, _call: Any) -> Graph:
        g = Graph(query_id="retrieve")
        g.input("query")
        g.output(lower_retriever(g, plan, self.assign, "query", frozenset()))
        return g

    def _runtime(self) -> Any:
        return runtime_for(self.assign, self._options.policy, self._options.llm_inflight)

    @property
    def graph(self) -> Graph | None:
        """The optimized retrieval graph (a template: each call runs a copy)."""
        return self._pipeline.template

    @property
    def last_trace(self) -> Any:
        return self._pipeline.last_trace

    async def aretrieve(self, query: Any) -> list[Any]:
        """``retriever.aretrieve(query)``: the same nodes and events, on the running loop's shared schedulers."""
        from llama_index.core.schema import QueryBundle

        bundle = QueryBundle(query) if isinstance(query, str) else query
        token = CALLER_LOOP.set(asyncio.get_running_loop())  # stock's async paths (a copied bundle, aretrieve)
        try:
            with self.retriever.callback_manager.as_trace("query"):  # as stock aretrieve opens it
                return await self._pipeline.run({"query": bundle})
        finally:
            CALLER_LOOP.reset(token)


class StepQueryEngines:
    """One optimized workflow's lowered stand-ins for the query engines and retrievers its steps call."""

    def __init__(self, options: Options) -> None:
        self._options = options
        self._by_engine: IdentityLRU[Any] = IdentityLRU(_KEPT_ENGINES)  # object -> its stand-in or None
        self.served: dict[str, int] = {}  # step -> queries and retrievals Ayo's graphs answered
        self.not_lowered: dict[str, str] = {}  # engine or retriever type -> why its calls run as stock

    def lowered(self, engine: Any) -> Any:
        """The lowered stand-in of ``engine`` (None: its queries run as stock)."""
        if isinstance(engine, OptimizedQueryEngine):
            return None  # already the user's optimized engine: its own aquery runs it
        return self._by_engine.get(engine, self._capture)

    def lowered_retriever(self, retriever: Any) -> StepRetriever | None:
        """The lowered stand-in of ``retriever`` (None: its retrievals run as stock)."""
        return self._by_engine.get(retriever, self._capture_retriever)

    def _capture_retriever(self, retriever: Any) -> StepRetriever | None:
        name = type(retriever).__name__
        try:
            plan = capture_retriever(retriever)
            if plan.kind == "opaque":
                self.not_lowered[name] = plan.reason
                return None
            return StepRetriever(retriever, plan, self._options)
        except Exception as exc:  # noqa: BLE001 - a retriever Ayo cannot capture runs as the user's object
            log.info("%s called in a workflow step runs as stock: capture failed (%s)", name, exc)
            self.not_lowered[name] = f"capture failed: {exc}"
            return None

    def _capture(self, engine: Any) -> Any:
        name = type(engine).__name__
        try:  # a SubQuestion / Router engine: its own composed graph; any other: the query engine's
            tool = optimize_composed(engine, self._options.policy, self._options) or tool_engine(engine, self._options)
        except Exception as exc:  # noqa: BLE001 - an engine Ayo cannot capture runs as the user's object
            log.info("%s called in a workflow step runs as stock: capture failed (%s)", name, exc)
            self.not_lowered[name] = f"capture failed: {exc}"
            return None
        if tool.not_lowered_reason is not None:
            self.not_lowered[name] = tool.not_lowered_reason
            return None
        return tool

    def answer(self, step: str, tool: Any, query: Any) -> Awaitable[Any]:
        """``tool``'s answer to ``query``: a lowered retrieval, a lowered engine on this loop, or a composed
        engine (SubQuestion, Router) through its own ``aquery``."""
        self.served[step] = self.served.get(step, 0) + 1
        if isinstance(tool, StepRetriever):
            return tool.aretrieve(query)
        return tool.aquery_in_graph(query, async_call=True) if isinstance(tool, ToolQueryEngine) else tool.aquery(query)

    def explain_lines(self) -> list[str]:
        """The query engines met in steps whose calls ran as stock, and why."""
        return [f"  {name} called in a step ran as stock: {why}" for name, why in sorted(self.not_lowered.items())]
