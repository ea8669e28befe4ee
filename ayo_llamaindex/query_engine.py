"""The drop-in query engine: ``optimize(query_engine)`` returns an ``OptimizedQueryEngine``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import EventPayload
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from ayo_core.introspect import overridden
from ayo_core.passes import optimize_graph
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_core.runtime.errors import unwrap_node_failure
from ayo_llamaindex import events
from ayo_llamaindex import explain as explain_mod
from ayo_llamaindex.capture import QueryEnginePlan, capture_query_engine
from ayo_llamaindex.runtime import LOOP, assign_engines, runtime_for
from ayo_shims import llamaindex as shim

# LlamaIndex's DispatcherSpanMixin opens a span around every override of a spanned base method; a
# method that only delegates to a spanned one would open two (one SpanDropEvent more than stock)
spanned_elsewhere = shim.mark_spanned_elsewhere
_ids = itertools.count()


def _bundle(query: str | QueryBundle) -> QueryBundle:
    return QueryBundle(query) if isinstance(query, str) else query


class OptimizedQueryEngine(BaseQueryEngine):
    """A ``BaseQueryEngine`` running the user's query engine as an optimized Ayo graph.

    ``query`` / ``aquery`` return the same ``Response`` as the stock engine (text and
    source nodes); ``explain()`` shows the module graph, the primitive graph and what
    stayed opaque; ``last_trace`` is the ``ayo_core.trace.Trace`` of the last query.
    """

    def __init__(self, query_engine: BaseQueryEngine, policy: str = "critical_path") -> None:
        t0 = time.perf_counter()
        self._stock = query_engine
        self._policy = policy
        self._plan: QueryEnginePlan = capture_query_engine(query_engine)
        self._assign = assign_engines(self._plan.llm_bindings(), self._plan.embed_bindings())
        from ayo_llamaindex.lowering import build_query_graph

        self._graph = build_query_graph(self._plan, self._assign)
        self._graph.lint()
        self._graph = optimize_graph(self._graph)
        self._capture_s = time.perf_counter() - t0
        self.last_trace: Any = None
        # an engine defining query() itself (CustomQueryEngine) runs it whole: no query events of ours
        self._stock_query = self._plan.kind == "opaque" and bool(
            overridden(query_engine, BaseQueryEngine, ("query", "aquery")))
        super().__init__(callback_manager=query_engine.callback_manager)

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
        return self._graph

    def _get_prompt_modules(self) -> PromptMixinType:
        return shim.prompt_modules(self._stock)

    async def _run(self, query_bundle: QueryBundle, caller_loop: asyncio.AbstractEventLoop | None = None) -> Any:
        CALLER_LOOP.set(caller_loop)  # this task's own context: opaque nodes take stock's async path in aquery
        rt = runtime_for(self._assign, self._policy)
        graph = self._graph.for_query(f"li{next(_ids)}")
        graph.meta["overhead"] = {"capture": self._capture_s} if self.last_trace is None else {}
        try:
            value, trace = await rt.run(graph, {"query": query_bundle})
        except Exception as exc:
            raise unwrap_node_failure(exc) from None
        self.last_trace = trace
        return value

    # query/aquery and the delegating API below are marked spanned_elsewhere: the span is the one
    # of the method they call (BaseQueryEngine.query, the stock engine's), not a second one
    @spanned_elsewhere
    def query(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        if self._stock_query:  # the stock engine's own query() emits what it emits, in the opaque node
            return self._answer(_bundle(str_or_query_bundle))
        return super().query(str_or_query_bundle)

    @spanned_elsewhere
    async def aquery(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        if self._stock_query:
            return await self._aanswer(_bundle(str_or_query_bundle))
        return await super().aquery(str_or_query_bundle)

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return self._answer(query_bundle)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return await self._aanswer(query_bundle)

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
        return explain_mod.explain_query_engine(self._plan, self._graph, self.last_trace)

    def __repr__(self) -> str:
        return f"OptimizedQueryEngine({type(self._stock).__name__})"
