"""Prefill splitting (paper: "prefilling splitting").

Needs: DECODE nodes with ``meta["prefix"] = PrefixSpec(early_inputs, build)``.

Guarantees: for each such decode with at least one late input (one produced by
a non-INPUT node and not in ``early_inputs``), a PARTIAL_PREFILL node that
depends only on the early inputs and awaits ``build(ctx, **early)`` (which
prefills a token prefix of the final request, warming the engine's prefix
cache). Nothing consumes it and it is ``optional`` (the query does not wait
for it), so results are unchanged. Idempotent.

Example::

    before: question ==> synth <== chunks(retrieval)
    after:  question ==> synth <== chunks;  question ==> synth.prefill
            (the template + question prefix is computed while retrieval runs)
"""

from __future__ import annotations

import inspect
from typing import Any

from ayo_core.graph import Graph, Node, Op, PrefixSpec
from ayo_core.passes.base import PassResult


class PrefixFn:
    """Node fn of a PARTIAL_PREFILL node: awaits the spec's build; the value is unused."""

    def __init__(self, build: Any):
        self.build = build

    async def __call__(self, ctx: Any, /, **early: Any) -> None:
        result = self.build(ctx, **early)
        if inspect.isawaitable(result):
            await result


def prefill_splitting(g: Graph) -> PassResult:
    """Add a PARTIAL_PREFILL node per decode with a PrefixSpec and late inputs."""
    out = g.copy()
    changed = False
    for name in g.topo_order():
        node = g.nodes[name]
        spec = node.meta.get("prefix")
        if node.op is not Op.DECODE or not isinstance(spec, PrefixSpec) or node.meta.get("prefill_node"):
            continue
        late = [kw for kw in node.inputs if kw not in spec.early_inputs]
        if not any(g.nodes[node.inputs[kw]].op is not Op.INPUT for kw in late if node.inputs[kw] in g.nodes):
            continue  # everything is known at once: nothing to prefill early
        prefill_name = f"{name}.prefill"
        if prefill_name in out.nodes:
            continue
        out.add(Node(prefill_name, Op.PARTIAL_PREFILL, fn=PrefixFn(spec.build),
                     inputs={kw: node.inputs[kw] for kw in spec.early_inputs}, engine=node.engine, module=node.module,
                     cost=node.cost * 0.1, meta={"optional": True, "warms": name, "resources": frozenset()}))
        out.replace(node.with_meta(prefill_node=prefill_name))
        changed = True
    return PassResult(out, changed)
