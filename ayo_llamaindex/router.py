"""``RouterQueryEngine`` lowered: the selector's decode, then the chosen engine(s), then the summarizer.

::

    query ── select (DECODE: LLMSingleSelector / LLMMultiSelector predict + parse, through Ayo's engine)
               └─ route (TOOL_CALL: the chosen query engines, optimized, all at once; several answers are
                  combined by the router's TreeSummarize, lowered) ── output

Stock's sync ``query`` runs a multi selection's engines one after another; here they always run
concurrently on the shared engine schedulers (their retrievals and decodes batch). The selector's
prompt is its own (``_build_choices_text``, its template, ``LLMBinding.predict``), its result its own
output parser's; ``selector_result`` lands in the response's metadata as in stock. Selectors Ayo does
not reproduce (``PydanticSingleSelector`` / ``PydanticMultiSelector``, which need tool calling, a
subclass, another class) run as the user's object in the ``select`` node; the chosen engines are
still optimized.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.query_engine.router_query_engine import acombine_responses
from llama_index.core.schema import QueryBundle
from llama_index.core.utils import print_text

from ayo_core.explain import explanation, record_optimization
from ayo_core.graph import Graph
from ayo_core.introspect import overrides_reason
from ayo_core.pipeline import Options
from ayo_core.templates import LLMCall, Opaque, ToolCall
from ayo_llamaindex import retrieval, selectors, synthesis
from ayo_llamaindex.capture import SynthesizerPlan, capture_synthesizer
from ayo_llamaindex.composed import ComposedQueryEngine, ToolQueryEngine, tool_engine
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.runtime import EngineAssignment, llm_send
from ayo_shims import llamaindex_engines as eng

# stock logs "Selecting query engine ..." on its own module's logger: so do we
stock_log = logging.getLogger("llama_index.core.query_engine.router_query_engine")


@dataclass
class RouterPlan:
    obj: Any
    parts: dict[str, Any]
    selector_llm: LLMBinding | None  # None: the selector runs as the user's object
    selector_reason: str
    engines: list[ToolQueryEngine]
    summarizer: SynthesizerPlan
    kind: str = "router"

    def llm_bindings(self) -> list[LLMBinding]:
        return [b for b in (self.selector_llm, self.summarizer.llm) if b is not None]

    def opaque_modules(self) -> list[tuple[str, str]]:
        out = []
        if self.selector_llm is None:
            out.append(("selector", self.selector_reason))
        elif not self.selector_llm.recognized:
            out.append((self.selector_llm.label, f"LLM called as the user's object: {self.selector_llm.reason}"))
        if self.summarizer.mode is None:
            out.append(("summarizer", self.summarizer.reason))
        for i, qe in enumerate(self.engines):
            out.extend((f"engine[{i}].{m.name}", m.reason) for m in qe.explain().opaque)
        return out


def not_lowered_reason(engine: Any) -> str | None:
    """Why ``engine`` (a ``RouterQueryEngine``) runs as the user's object; None when Ayo lowers it."""
    return overrides_reason(engine, RouterQueryEngine, eng.ROUTER_MIRRORED)


def capture_router(engine: Any, options: Options) -> RouterPlan:
    parts = eng.router_parts(engine)
    binding, reason = selectors.selector_binding(parts["selector"])
    seen: dict[int, ToolQueryEngine] = {}
    engines = []
    for qe in parts["query_engines"]:
        if id(qe) not in seen:
            seen[id(qe)] = tool_engine(qe, options)
        engines.append(seen[id(qe)])
    return RouterPlan(engine, parts, binding, reason, engines, capture_synthesizer(parts["summarizer"]))


def build_router_graph(plan: RouterPlan, assign: EngineAssignment) -> Graph:
    g = Graph(query_id="q")
    g.input("query")
    selected = _lower_selector(g, plan, assign)
    g.output(ToolCall(_route_fn(plan, assign), "router", takes_ctx=True, side_effect=False, resources=None,
                      cost=2.0).build(g, "route", {"query": "query", "result": selected}))
    record_optimization(g, "concurrent_routes", "route",
                        "the chosen query engines run at once on the shared engine schedulers")
    return g


def _lower_selector(g: Graph, plan: RouterPlan, assign: EngineAssignment) -> str:
    selector, metadatas, binding = plan.parts["selector"], plan.parts["metadatas"], plan.selector_llm

    async def run(ctx: Any, query: QueryBundle) -> Any:
        send = llm_send(ctx, assign.llm_kind(binding)) if binding is not None else None
        return await selectors.select(binding, selector, metadatas, query, send)

    if binding is None:
        return Opaque(run, "selector", takes_ctx=True, resources=None, cost=1.0,
                      reason=plan.selector_reason).build(g, "select", {"query": "query"})
    return LLMCall(lambda query: query, "selector", call=run, cost=1.0).build(g, "select", {"query": "query"})


def _route_fn(plan: RouterPlan, assign: EngineAssignment) -> Any:
    engines, verbose = plan.engines, plan.parts["verbose"]
    combine = combiner(plan.summarizer, assign)

    def announce(ind: int, reason: str) -> None:
        log_str = f"Selecting query engine {ind}: {reason}."
        stock_log.info(log_str)
        if verbose:
            print_text(log_str + "\n", color="pink")

    async def route(ctx: Any, query: QueryBundle, result: Any) -> Any:
        """``RouterQueryEngine._aquery`` after the selection (its errors and metadata)."""
        if len(result.inds) > 1:
            chosen = []
            for i, engine_ind in enumerate(result.inds):
                announce(engine_ind, result.reasons[i])
                chosen.append(engines[engine_ind])
            responses = await retrieval.one_bundle_at_once([qe.aquery_in_graph for qe in chosen], query)
            final = await combine(ctx, responses, query) if len(responses) > 1 else responses[0]
        else:
            try:
                selected = engines[result.ind]
                announce(result.ind, result.reason)
            except ValueError as e:
                raise ValueError("Failed to select query engine") from e
            final = await selected.aquery_in_graph(query)
        final.metadata = final.metadata or {}
        final.metadata["selector_result"] = result
        return final

    return route


def combiner(summarizer: SynthesizerPlan, assign: EngineAssignment) -> Any:
    """``combine_responses`` for several engines' answers, with the summarizer's ``get_response`` lowered (the
    user's summarizer itself when Ayo does not reproduce it)."""
    if summarizer.mode is None:
        async def combine_stock(ctx: Any, responses: list, query: QueryBundle) -> Any:
            return await acombine_responses(summarizer.obj, responses, query)

        return combine_stock
    kind = assign.llm_kind(summarizer.llm)

    async def combine(ctx: Any, responses: list, query: QueryBundle) -> Any:
        """``acombine_responses`` with the summarizer's ``get_response`` lowered."""
        stock_log.info("Combining responses from multiple query engines.")
        source_nodes = [n for r in responses for n in r.source_nodes]
        send = llm_send(ctx, kind)

        async def predict(template: Any, /, **kwargs: Any) -> str:  # kwargs may hold "template" (accumulate)
            return await summarizer.llm.predict(send, template, **kwargs)

        summary = await synthesis.run_synthesis(summarizer.obj, summarizer.mode, query.query_str,
                                                [str(r) for r in responses], predict)
        return Response(response=summary, source_nodes=source_nodes)

    return combine


class OptimizedRouterQueryEngine(ComposedQueryEngine):
    """A ``RouterQueryEngine`` run as an Ayo graph: same results and ``selector_result`` metadata."""

    capture = staticmethod(capture_router)
    build = staticmethod(build_router_graph)

    def explain(self) -> Any:
        selector = type(self._plan.parts["selector"]).__name__
        lines = [f"query_engine: {type(self._stock).__name__}",
                 f"  selector: {'LLMCall' if self._plan.selector_llm else 'Opaque'} ({selector})",
                 *(f"  engine[{i}]: {type(qe.stock).__name__}" for i, qe in enumerate(self._plan.engines)),
                 f"  summarizer: {self._plan.summarizer.template}"]
        modules = [(type(self._stock).__name__, "QueryEngine")]
        if self._plan.selector_llm is not None:
            modules.append((selector, "LLMCall"))
        return explanation(f"Ayo plan for {type(self._stock).__name__}", graph=self.graph, trace=self.last_trace,
                           modules=modules, opaque=self._plan.opaque_modules(), module_lines=lines)

    def __repr__(self) -> str:
        return f"OptimizedRouterQueryEngine({type(self._stock).__name__})"
