"""Building one query's graph module by module: structural names and ready-time estimates.

What every adapter's lowering does around its templates: each module's nodes get the next
structural name (``"3.prompt"``, ``"5.llm/0.parser"`` under a run-time expansion), so the same
pipeline gives the same names for every query and the runtime's cost model learns per name;
and each node gets an estimate of when its value exists (its inputs' latest estimate plus
the cost of the nodes its template added), which decisions made while lowering read
(prefill splitting: is an input early or late?).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ayo_core.explain import record_optimization
from ayo_core.graph import Graph
from ayo_core.templates.base import Template


@dataclass(kw_only=True)
class GraphBuilder:
    """Adds templates to ``graph`` under structural names, tracking each value's estimated ready time."""

    prefix: str = ""  # the names of a run-time expansion start with its parent's name and "/"
    graph: Graph = field(default_factory=Graph)  # where the templates add this builder's nodes
    # estimated seconds after the query's start at which each node's value exists
    ready: dict[str, float] = field(default_factory=dict)
    _n: int = 0

    def name(self, label: str) -> str:
        """The next structural name for a module labelled ``label``."""
        self._n += 1
        return f"{self.prefix}{self._n}.{label}"

    def build(self, template: Template, inputs: Mapping[str, str], label: str = "", name: str = "") -> str:
        """Add ``template``'s nodes under the next structural name (``"3.prompt"``, or ``name``);
        returns the node holding its value, with its estimated ready time."""
        before = len(self.graph.nodes)
        out = template.build(self.graph, name or self.name(label), inputs)
        start = max((self.ready.get(src, 0.0) for src in inputs.values()), default=0.0)
        self.ready[out] = start + sum(n.cost for n in list(self.graph.nodes.values())[before:])
        return out

    def record(self, optimization: str, node: str, detail: str) -> None:
        """Note an optimization the lowering set up (``explain()`` lists ``graph.meta["optimizations"]``)."""
        record_optimization(self.graph, optimization, node, detail)
