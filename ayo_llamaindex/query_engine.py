"""The drop-in query engine: ``optimize(query_engine)`` returns an ``OptimizedQueryEngine``.

A facade over the core's :class:`~ayo_core.pipeline.OptimizedPipeline`: the engine is captured,
lowered and optimized once (one static shape, copied per query); this class keeps LlamaIndex's
API (``query``/``aquery`` and their events and spans, the stock engine's other methods) and hops
to the core's background loop, where every optimized LlamaIndex pipeline runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import EventPayload
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from ayo_core.graph import Graph
from ayo_core.introspect import overridden
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_llamaindex import events, spans
from ayo_llamaindex import explain as explain_mod
from ayo_llamaindex.capture import QueryEnginePlan, capture_query_engine
from ayo_llamaindex.lowering import build_query_graph
from ayo_llamaindex.runtime import LOOP, EngineAssignment, assign_engines, runtime_for
from ayo_shims import llamaindex as shim

# LlamaIndex's DispatcherSpanMixin opens a span around every override of a spanned base method; a
# method that only delegates to a spanned one would open two (one SpanDropEvent more than stock)
spanned_elsewhere = shim.mark_spanned_elsewhere


def _bundle(query: str | QueryBundle) -> QueryBundle:
    return QueryBundle(query) if isinstance(query, str) else query


class OptimizedQueryEngine(BaseQueryEngine):
    """A ``BaseQueryEngine`` running the user's query engine as an optimized Ayo graph.

    ``query`` / ``aquery`` return the same ``Response`` as the stock engine (text and
    source nodes); ``explain()`` shows the module graph, the primitive graph and what
    stayed opaque; ``last_trace`` is the ``ayo_core.trace.Trace`` of the last query.
    """

    def __init__(self, query_engine: BaseQueryEngine, policy: str = "critical_path", options: Options | None = None) -> None:
        self._stock = query_engine
        self._options = options or Options(policy=policy)
        self._policy = self._options.policy
        self._pipeline = OptimizedPipeline(lambda: self.capture_plan(query_engine), self.build_graph, self._options,
                                           runtime=self._runtime, static=True, query_prefix="li")
        self._plan, self._assign = self._pipeline.plan
        # an engine defining query() itself (CustomQueryEngine) runs it whole: no query events of ours
        self._stock_query = self._plan.kind == "opaque" and bool(
            overridden(query_engine, BaseQueryEngine, ("query", "aquery")))
        BaseQueryEngine.__init__(self, callback_manager=query_engine.callback_manager)

    # -- what the pipeline is made of (a composed engine names its own) --------------------------
    def capture_plan(self, query_engine: BaseQueryEngine) -> tuple[QueryEnginePlan, EngineAssignment]:
        plan = capture_query_engine(query_engine, self._options.batch_cross_encoder)
        return plan, assign_engines(plan.llm_bindings(), plan.embed_bindings())

    @staticmethod
    def build_graph(captured: tuple[Any, EngineAssignment], _call: Any) -> Graph:
        return build_query_graph(*captured)

    def _runtime(self) -> Any:
        return runtime_for(self._assign, self._policy, self._options.llm_inflight)

    @property
    def last_trace(self) -> Any:
        """The ``ayo_core.trace.Trace`` of the last query (None before the first)."""
        return self._pipeline.last_trace

    @property
    def plan(self) -> Any:
        """What capture found in the user's engine (a ``QueryEnginePlan``, or a composed engine's plan)."""
        return self._plan

    @property
    def stock(self) -> BaseQueryEngine:
        """The user's original query engine."""
        return self._stock

    @property
    def not_lowered_reason(self) -> str | None:
        """Why the whole engine runs as the user's object in one node (None: Ayo lowers its modules)."""
        return (self._plan.reason or "nothing in it that Ayo lowers") if self._plan.kind == "opaque" else None

    @property
    def graph(self) -> Any:
        """The per-query primitive graph (a template: each query runs a copy)."""
        return self._pipeline.template

    def _get_prompt_modules(self) -> PromptMixinType:
        return shim.prompt_modules(self._stock)

    async def _run(self, query_bundle: QueryBundle, caller_loop: asyncio.AbstractEventLoop | None = None) -> Any:
        CALLER_LOOP.set(caller_loop)  # this task's own context: opaque nodes take stock's async path in aquery
        with events.failing_open_events():
            return await self._pipeline.run({"query": query_bundle})

    # query/aquery and the delegating API below are marked spanned_elsewhere: the span is the one
    # of the method they call (BaseQueryEngine.query, the stock engine's), not a second one
    # query/aquery open the stock engine's spans (``RetrieverQueryEngine.query`` > ``._query``, as
    # BaseQueryEngine.query opens them around the stock engine) and emit BaseQueryEngine.query's events
    @spanned_elsewhere
    def query(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        if self._stock_query:  # the stock engine's own query() emits what it emits, in the opaque node
            return self._answer(_bundle(str_or_query_bundle))
        with spans.opened(self._stock, ["query"], str_or_query_bundle) as outer:
            with events.QueryCall(self, str_or_query_bundle).span() as done:
                return outer.set(done(self._query(_bundle(str_or_query_bundle))))

    @spanned_elsewhere
    async def aquery(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        if self._stock_query:
            return await self._aanswer(_bundle(str_or_query_bundle))
        with spans.opened(self._stock, ["aquery"], str_or_query_bundle) as outer:
            with events.QueryCall(self, str_or_query_bundle).span() as done:
                return outer.set(done(await self._aquery(_bundle(str_or_query_bundle))))

    # the stock engine's _query span, as its own method opens it: inside query(), and where a wrapping
    # engine calls _query directly (RetryQueryEngine calls its inner engine's _query)
    @spanned_elsewhere
    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        if self._stock_query:
            return self._answer(query_bundle)
        with spans.opened(self._stock, ["_query"], query_bundle) as inner:
            return inner.set(self._answer(query_bundle))

    @spanned_elsewhere
    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        if self._stock_query:
            return await self._aanswer(query_bundle)
        with spans.opened(self._stock, ["_aquery"], query_bundle) as inner:
            return inner.set(await self._aanswer(query_bundle))

    # _answer/_aanswer carry no span (only _query/_aquery, which LlamaIndex's mixin spans, stand
    # for the stock engine's _query): an engine defining query() itself has only its own spans
    def _answer(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with self._query_event(query_bundle) as event:
            response = LOOP.run_sync(self._run(query_bundle))  # the caller's context (event stack, span) goes along
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response

    async def _aanswer(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with self._query_event(query_bundle) as event:
            response = await LOOP.arun(self._run(query_bundle, asyncio.get_running_loop()))
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response

    def _query_event(self, query_bundle: QueryBundle) -> contextlib.AbstractContextManager[Any]:
        """Stock ``RetrieverQueryEngine._query``'s ``QUERY`` event; an opaque engine emits its own."""
        return events.query_event(self, query_bundle, lowered=self._plan.kind != "opaque")

    # -- the rest of the stock engine's API (retrieve, synthesize, retriever, ...) is the stock
    # engine's own: BaseQueryEngine's defaults would raise NotImplementedError where stock works
    @spanned_elsewhere
    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._stock.retrieve(query_bundle)

    @spanned_elsewhere
    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await self._stock.aretrieve(query_bundle)

    @spanned_elsewhere
    def synthesize(self, *args: Any, **kwargs: Any) -> RESPONSE_TYPE:
        return self._stock.synthesize(*args, **kwargs)

    @spanned_elsewhere
    async def asynthesize(self, *args: Any, **kwargs: Any) -> RESPONSE_TYPE:
        return await self._stock.asynthesize(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # only reached for names this class lacks (``retriever``, ``with_retriever``, private
        # attributes users read): the stock engine's; never during __init__ (no recursion)
        stock = self.__dict__.get("_stock")
        if stock is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(stock, name)

    def explain(self) -> explain_mod.Explanation:
        """Module graph, primitive graph, passes and optimizations that fired, what stayed opaque (and why);
        ``str()`` of the result is the human view."""
        return explain_mod.explain_query_engine(self._plan, self.graph, self.last_trace)

    def __repr__(self) -> str:
        return f"OptimizedQueryEngine({type(self._stock).__name__})"
