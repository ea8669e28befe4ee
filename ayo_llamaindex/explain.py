"""``explain()``: the module graph, the primitive graph, the passes that fired, what stayed opaque."""

from __future__ import annotations

import logging
from typing import Any

from ayo_llamaindex.capture import QueryEnginePlan, describe

log = logging.getLogger(__name__)


def apply_passes(graph: Any) -> Any:
    """The core's optimization passes (``ayo_core.passes.optimize_graph``), in the paper's order."""
    from ayo_core.passes import optimize_graph

    return optimize_graph(graph)


def passes_line(graph: Any) -> str:
    history = graph.meta.get("passes") or []
    if not history:
        return "passes: none ran"
    return "passes: " + ", ".join(f"{name}{' (fired)' if changed else ' (no change)'}" for name, changed in history)


def trace_lines(trace: Any) -> list[str]:
    """Where the last query's time went (from its trace)."""
    if trace is None:
        return ["last query: none yet"]
    lines = [f"last query {trace.query_id}: {trace.latency:.3f}s, critical-path bound "
             f"{trace.critical_path_bound():.3f}s, status {trace.status}"]
    for op, stats in trace.stage_breakdown().items():
        lines.append(f"  {op:<16} busy {stats['busy']:.3f}s  wall {stats['wall']:.3f}s  x{int(stats['count'])}")
    overhead = {k: v for k, v in trace.overhead.items() if v}
    if overhead:
        lines.append("  ayo overhead: " + ", ".join(f"{k} {v * 1000:.1f}ms" for k, v in overhead.items()))
    return lines


def opaque_lines(opaque: list[tuple[str, str]]) -> list[str]:
    if not opaque:
        return ["opaque: nothing (every module was lowered)"]
    return ["opaque (called as the user's object, still scheduled as one node):"] + [
        f"  {name}: {reason}" for name, reason in opaque]


def speculation_lines(graph: Any) -> list[str]:
    board = graph.meta.get("speculation")
    if board is None:
        return []
    return [f"speculative synthesis (starts while LLMRerank decodes; kept only if the rerank picks the same "
            f"chunks): {board.hits} used, {board.misses} discarded"]


def explain_query_engine(plan: QueryEnginePlan, graph: Any, trace: Any) -> str:
    lines = ["== module graph ==", *describe(plan), "", "== primitive graph ==", graph.format(),
             passes_line(graph), *speculation_lines(graph), "", *opaque_lines(plan.opaque_modules()), "",
             *trace_lines(trace)]
    return "\n".join(lines)
