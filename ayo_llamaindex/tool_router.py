"""``ToolRetrieverRouterQueryEngine`` lowered: the retrieved tools' query engines at once, then the summarizer.

::

    query ── retrieve_tools (the user's ObjectRetriever, its sync retrieve as stock calls it on both paths)
               └─ route (TOOL_CALL: each retrieved tool's query engine, optimized, all at once; several answers
                  combined by the engine's TreeSummarize, lowered) ── output

Stock's sync ``query`` runs the retrieved engines one after another (each a retrieval and an LLM
synthesis); here they run at once on the shared engine schedulers, on both paths (the sync path's after
the first's query embedding, which stock's loop shares: :func:`retrieval.one_bundle_at_once`). The
response's ``retrieved_tools`` metadata, its ``QUERY`` event and its errors are stock's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llama_index.core.query_engine import ToolRetrieverRouterQueryEngine
from llama_index.core.schema import QueryBundle

from ayo_core.explain import explanation, record_optimization
from ayo_core.graph import Graph
from ayo_core.introspect import overrides_reason
from ayo_core.pipeline import Options
from ayo_llamaindex import retrieval
from ayo_llamaindex.capture import SynthesizerPlan, capture_synthesizer
from ayo_llamaindex.composed import ComposedQueryEngine, ToolQueryEngine, retrieve_then_route, tool_engine
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.router import combiner
from ayo_llamaindex.runtime import EngineAssignment
from ayo_shims import llamaindex_engines as eng

RETRIEVER_REASON = ("the engine's ObjectRetriever of tools runs as the user's object (stock calls its sync "
                    "retrieve on both paths)")


@dataclass
class ToolRouterPlan:
    obj: Any
    parts: dict[str, Any]
    summarizer: SynthesizerPlan
    options: Options
    engines: dict[int, ToolQueryEngine] = field(default_factory=dict)  # by the tool's engine: known at run time
    kind: str = "tool_router"

    def engine_for(self, query_engine: Any) -> ToolQueryEngine:
        """The optimized stand-in of a retrieved tool's engine (one per engine, built on first use)."""
        if (found := self.engines.get(id(query_engine))) is None:
            found = self.engines[id(query_engine)] = tool_engine(query_engine, self.options)
        return found

    def llm_bindings(self) -> list[LLMBinding]:
        return [self.summarizer.llm] if self.summarizer.llm is not None else []

    def opaque_modules(self) -> list[tuple[str, str]]:
        out = [("retriever", RETRIEVER_REASON)]
        if self.summarizer.mode is None:
            out.append(("summarizer", self.summarizer.reason))
        return out


def not_lowered_reason(engine: Any) -> str | None:
    """Why ``engine`` (a ``ToolRetrieverRouterQueryEngine``) runs as the user's object; None when Ayo lowers it."""
    return overrides_reason(engine, ToolRetrieverRouterQueryEngine, eng.TOOL_ROUTER_MIRRORED)


def capture_tool_router(engine: Any, options: Options) -> ToolRouterPlan:
    parts = eng.tool_router_parts(engine)
    return ToolRouterPlan(engine, parts, capture_synthesizer(parts["summarizer"]), options)


def build_tool_router_graph(plan: ToolRouterPlan, assign: EngineAssignment) -> Graph:
    g = retrieve_then_route(plan.parts["retriever"], RETRIEVER_REASON, _route_fn(plan, assign), "tools")
    record_optimization(g, "concurrent_routes", "route",
                        "the retrieved tools' query engines run at once on the shared engine schedulers")
    return g


def _route_fn(plan: ToolRouterPlan, assign: EngineAssignment) -> Any:
    combine = combiner(plan.summarizer, assign)

    async def route(ctx: Any, query: QueryBundle, tools: list[Any]) -> Any:
        """``ToolRetrieverRouterQueryEngine._query`` after the retrieval (its errors and metadata)."""
        engines = [plan.engine_for(tool.query_engine) for tool in tools]
        responses = await retrieval.one_bundle_at_once([qe.aquery_in_graph for qe in engines], query)
        final = await combine(ctx, responses, query) if len(responses) > 1 else responses[0]
        final.metadata = final.metadata or {}
        final.metadata["retrieved_tools"] = tools
        return final

    return route


class OptimizedToolRetrieverRouterQueryEngine(ComposedQueryEngine):
    """A ``ToolRetrieverRouterQueryEngine`` run as an Ayo graph: same answers and ``retrieved_tools`` metadata."""

    capture = staticmethod(capture_tool_router)
    build = staticmethod(build_tool_router_graph)

    def explain(self) -> Any:
        lines = [f"query_engine: {type(self._stock).__name__}",
                 f"  retriever: Opaque ({type(self._plan.parts['retriever']).__name__})",
                 "  engines: ToolCall (the retrieved tools' query engines, at once)",
                 f"  summarizer: {self._plan.summarizer.template}"]
        return explanation(f"Ayo plan for {type(self._stock).__name__}", graph=self.graph, trace=self.last_trace,
                           modules=[(type(self._stock).__name__, "QueryEngine")], opaque=self._plan.opaque_modules(),
                           module_lines=lines)

    def __repr__(self) -> str:
        return f"OptimizedToolRetrieverRouterQueryEngine({type(self._stock).__name__})"
