"""``explain()`` for LlamaIndex: the plan's modules put into the core's :class:`~ayo_core.explain.Explanation`."""

from __future__ import annotations

from typing import Any

from ayo_core.explain import Explanation, explanation
from ayo_llamaindex import accumulate
from ayo_llamaindex.capture import QueryEnginePlan, describe

__all__ = ["Explanation", "explain_call", "explain_query_engine", "lowered_modules"]


def lowered_modules(plan: QueryEnginePlan) -> list[tuple[str, str]]:
    """``(module, template)`` for every module of ``plan`` Ayo lowered (opaque ones are listed apart)."""
    if plan.kind == "opaque":
        return []
    out = [(type(plan.obj).__name__, "QueryEngine")]
    for part in plan.parts():
        template = part.template
        if template != "Opaque":
            out.append((type(part.obj).__name__, template))
    return out


def speculation_lines(graph: Any) -> list[str]:
    board = graph.meta.get("speculation") if graph is not None else None
    if board is None:
        return []
    return [f"speculative synthesis (starts while LLMRerank decodes; kept only if the rerank picks the same "
            f"chunks): {board.hits} used, {board.misses} discarded"]


def explain_query_engine(plan: QueryEnginePlan, graph: Any, trace: Any) -> Explanation:
    return explanation(f"Ayo plan for {type(plan.obj).__name__}", graph=graph, trace=trace,
                       modules=lowered_modules(plan), opaque=plan.opaque_modules(),
                       module_lines=describe(plan), notes=speculation_lines(graph) + accumulate.explain_lines(plan, trace))


def explain_call(module_lines: list[str], lowered: list[tuple[str, str]], notes: list[str], graph: Any,
                 trace: Any) -> Explanation:
    """A doc-QA function's last call: what tracing followed (lowered), what ran stock (``"name: reason"``)."""
    opaque = [tuple(n.split(": ", 1)) if ": " in n else (n, "ran stock") for n in notes]
    lines = module_lines or ["(no LlamaIndex call Ayo follows was seen: the function ran stock)"]
    return explanation("Ayo trace of the last call", graph=graph, trace=trace, modules=lowered,
                       opaque=opaque, module_lines=lines, notes=speculation_lines(graph))
