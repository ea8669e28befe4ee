"""Templates for how values flow between modules: Aggregate, Route, Warmup.

They are :class:`~ayo_core.templates.local.Transform` s that differ in what the node
means to the passes, the runtime and ``explain()``: an ``Aggregate`` joins the values
of several branches (a union of retrievals, a rank fusion), a ``Route`` chooses at run
time what runs next and returns :class:`~ayo_core.runtime.context.Expand` (the graph
grows by the chosen module's nodes), a ``Warmup`` prefills a prompt prefix on the LLM
engine and is optional (the query never waits for it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ayo_core.graph import Graph, Op
from ayo_core.templates.local import Transform


class Aggregate(Transform):
    """Join several inputs into one value: ``fn(**inputs)`` (a union, a fusion, a re-join)."""

    kind = "aggregate"
    op = Op.AGGREGATE


class Route(Transform):
    """A run-time choice: ``fn(**inputs)`` returns the value, or an ``Expand`` with the nodes of
    the module it chose (captured and lowered once the choice is known) and the node holding
    its result. Cost estimates should cover the expected expansion."""

    kind = "route"


class Warmup(Transform):
    """An optional prefill on the LLM engine: ``fn(**inputs)`` warms the prefix cache with a token
    prefix of a later request (``per_part="kw"``: once per part of a streaming producer). Its value
    is never used and the query does not wait for it."""

    kind = "warmup"
    op = Op.PARTIAL_PREFILL

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        node = g.nodes[super().build(g, name, inputs, after)]
        g.replace(node.replace(engine="llm").with_meta(optional=True))  # the last node: order unchanged
        return name
