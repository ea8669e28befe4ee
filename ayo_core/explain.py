"""What Ayo made of a pipeline: one :class:`Explanation` type for every adapter's ``explain()``.

An explanation is data: the modules that were lowered (name and core template) and the
ones left opaque (name and why), the passes that ran and whether each changed the graph
(the graph's ``meta["passes"]``), the optimizations that fired (``meta["optimizations"]``),
the primitive graph (nodes, ops, edges) and a digest of the last query's trace. ``str()``
is the human view. Tests assert on the fields; people read the text.

Passes and templates record what fired with :func:`record_optimization`; it writes a new
list into ``graph.meta`` instead of appending in place, because ``Graph.copy`` shares the
meta values of the graph it copies (a per-query copy must not add to its template's list).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ayo_core.graph import Graph

OPTIMIZATIONS = "optimizations"  # graph.meta key: list of {"name", "node", "detail"} dicts


def record_optimization(graph: Graph, name: str, node: str, detail: str = "") -> None:
    """Note in ``graph.meta["optimizations"]`` that optimization ``name`` fired at ``node``.

    Idempotent per ``(name, node)`` (a pass run twice records once); never mutates a list
    another copy of the graph may share.
    """
    entries = list(graph.meta.get(OPTIMIZATIONS) or [])
    if any(e.get("name") == name and e.get("node") == node for e in entries):
        return
    graph.meta[OPTIMIZATIONS] = [*entries, {"name": name, "node": node, "detail": detail}]


@dataclass(frozen=True)
class LoweredModule:
    """A module Ayo split into primitives: its name and the core template it became."""

    name: str
    template: str


@dataclass(frozen=True)
class OpaqueModule:
    """A module Ayo calls as the user's object (one node, still scheduled), and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class PassRun:
    name: str
    changed: bool


@dataclass(frozen=True)
class Optimization:
    """One optimization that fired: its name, the node it concerns, what it does there."""

    name: str
    node: str
    detail: str = ""
    engine_calls: int | None = None  # requests its node sent in the last query (None: no query yet)


@dataclass(frozen=True)
class PrimitiveNode:
    name: str
    op: str
    engine: str
    module: str
    inputs: Mapping[str, str] = field(default_factory=dict)
    after: tuple[str, ...] = ()


@dataclass
class Explanation:
    """The structured answer of ``explain()``; ``str()`` is the human view.

    ``module_lines`` is the adapter's own picture of the module graph (a tree of the user's
    objects) and ``notes`` its extra lines (engines, speculation statistics); both only
    feed the text. ``trace`` is the last query's ``Trace.summary()`` (None before the first).
    """

    title: str = ""
    modules: list[LoweredModule] = field(default_factory=list)
    opaque: list[OpaqueModule] = field(default_factory=list)
    passes: list[PassRun] = field(default_factory=list)
    optimizations: list[Optimization] = field(default_factory=list)
    nodes: list[PrimitiveNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (producer, consumer), data and order edges
    trace: dict[str, Any] | None = None
    module_lines: list[str] = field(default_factory=list, repr=False)
    notes: list[str] = field(default_factory=list, repr=False)
    graph_text: str = field(default="", repr=False)

    # ---- queries tests and tools use ---------------------------------------------------
    @property
    def ops(self) -> list[str]:
        """The primitive graph's ops, in graph order."""
        return [n.op for n in self.nodes]

    def node(self, name: str) -> PrimitiveNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in the explained graph; it has {[n.name for n in self.nodes]}")

    def fired(self, name: str) -> list[Optimization]:
        """The optimizations named ``name`` that fired (empty when none did)."""
        return [o for o in self.optimizations if o.name == name]

    def pass_changed(self, name: str) -> bool | None:
        """Whether pass ``name`` changed the graph; None when it did not run."""
        runs = [p.changed for p in self.passes if p.name == name]
        return any(runs) if runs else None

    # ---- the human view ------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [self.title] if self.title else []
        lines += ["== module graph ==", *(self.module_lines or [f"{m.name}: {m.template}" for m in self.modules])]
        lines += ["", f"opaque ({len(self.opaque)}): " + ("none" if not self.opaque else "")]
        lines += [f"  {o.name}: {o.reason}" for o in self.opaque]
        if self.notes:
            lines += ["", *self.notes]
        if self.graph_text:
            lines += ["", "== primitive graph ==", self.graph_text, passes_line(self.passes)]
            lines += optimization_lines(self.optimizations)
        lines += ["", *trace_lines(self.trace)]
        return "\n".join(lines)

    def __contains__(self, text: object) -> bool:
        """``"x" in fast.explain()`` searches the text view (what ``explain()`` returned before it was data)."""
        return isinstance(text, str) and text in str(self)

    def count(self, text: str) -> int:
        """Occurrences of ``text`` in the text view."""
        return str(self).count(text)


def passes_line(passes: Iterable[PassRun]) -> str:
    runs = list(passes)
    if not runs:
        return "passes: none ran"
    return "passes: " + ", ".join(f"{p.name}{' (fired)' if p.changed else ' (no change)'}" for p in runs)


def optimization_lines(optimizations: Iterable[Optimization]) -> list[str]:
    opts = list(optimizations)
    if not opts:
        return ["optimizations: none fired"]
    return [f"optimizations ({len(opts)}):"] + [
        f"  {o.name} at {o.node}" + (f": {o.detail}" if o.detail else "")
        + ("" if o.engine_calls is None else f" ({o.engine_calls} engine calls in the last query)") for o in opts]


def trace_lines(summary: Mapping[str, Any] | None) -> list[str]:
    """Where the last query's time went (from ``Trace.summary()``)."""
    if summary is None:
        return ["last trace: none yet (no query ran)"]
    bound, latency = summary["critical_path_bound_s"], summary["latency_s"]
    efficiency = f"{bound / latency:.2f}" if latency > 0 else "n/a"
    lines = [f"last trace (query {summary['query']}): latency {latency:.3f}s, critical-path bound {bound:.3f}s, "
             f"efficiency {efficiency}, status {summary['status']}",
             f"  nodes executed {summary['nodes_executed']}, engine batches {summary['engine_batches']}"]
    for op, row in summary["stage_breakdown"].items():
        lines.append(f"  {op:<16} busy {row['busy']:.3f}s  wall {row['wall']:.3f}s  x{int(row['count'])}")
    overhead = {k: v for k, v in summary["overhead_s"].items() if v}
    if overhead:
        lines.append("  ayo overhead: " + ", ".join(f"{k} {v * 1000:.1f}ms" for k, v in overhead.items()))
    return lines


def graph_facts(graph: Graph | None) -> dict[str, Any]:
    """The graph part of an :class:`Explanation` (its keyword arguments) for ``graph`` (may be None)."""
    if graph is None:
        return {}
    order = graph.topo_order()
    nodes = [PrimitiveNode(n, graph.nodes[n].op.value, graph.nodes[n].engine, graph.nodes[n].module,
                           dict(graph.nodes[n].inputs), tuple(sorted(graph.nodes[n].after))) for n in order]
    edges = [(dep, n.name) for n in nodes for dep in sorted({*n.inputs.values(), *n.after})]
    passes = [PassRun(str(name), bool(changed)) for name, changed in graph.meta.get("passes") or []]
    optimizations = [Optimization(str(o.get("name", "")), str(o.get("node", "")), str(o.get("detail", "")))
                     for o in graph.meta.get(OPTIMIZATIONS) or []]
    return {"nodes": nodes, "edges": edges, "passes": passes, "optimizations": optimizations,
            "graph_text": graph.format()}


def explanation(title: str = "", *, graph: Graph | None = None, trace: Any = None,
                modules: Iterable[LoweredModule | tuple[str, str]] = (),
                opaque: Iterable[OpaqueModule | tuple[str, str]] = (),
                module_lines: Iterable[str] = (), notes: Iterable[str] = ()) -> Explanation:
    """Build an :class:`Explanation` from a graph (passes, optimizations, nodes), a ``Trace`` and
    the adapter's modules; ``(name, template)`` / ``(name, reason)`` pairs are accepted."""
    facts = graph_facts(graph)
    if trace is not None and facts:
        calls = Counter(c.node for c in getattr(trace, "engine_calls", ()))
        facts["optimizations"] = [replace(o, engine_calls=calls.get(o.node, 0)) for o in facts["optimizations"]]
    return Explanation(
        title=title,
        modules=[m if isinstance(m, LoweredModule) else LoweredModule(*m) for m in modules],
        opaque=[o if isinstance(o, OpaqueModule) else OpaqueModule(*o) for o in opaque],
        trace=trace.summary() if trace is not None else None,
        module_lines=list(module_lines), notes=list(notes), **facts)
