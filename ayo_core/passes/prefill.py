"""Prefill splitting (paper: "prefilling splitting").

Needs: DECODE nodes with ``meta["prefix"] = PrefixSpec(early_inputs, build)``.

Guarantees: for each such decode with at least one late input (one produced by
a non-INPUT node and not in ``early_inputs``), a PARTIAL_PREFILL node that
depends only on the early inputs and awaits ``build(ctx, **early)`` (which
prefills a token prefix of the final request, warming the engine's prefix
cache). Nothing consumes it and it is ``optional`` (the query does not wait
for it), so results are unchanged. Idempotent. Each such node is recorded in
``meta["optimizations"]`` (``prefill_splitting``), and so is every progressive
prefill node a template added (:func:`progressive_prefill`: a PARTIAL_PREFILL
run per part of a streamed input, warming the prompt as its late value grows).
Whether a warm-up is sent at run time is the core's rule
(:mod:`ayo_core.engines.prefix_warming`: never on CPU servers, the device rule).

Example::

    before: question ==> synth <== chunks(retrieval)
    after:  question ==> synth <== chunks;  question ==> synth.prefill
            (the template + question prefix is computed while retrieval runs)
"""

from __future__ import annotations

import inspect
from typing import Any

from ayo_core.explain import record_optimization
from ayo_core.graph import Graph, Node, Op, PrefixSpec
from ayo_core.passes.base import PassResult

PROGRESSIVE = "progressive"  # node meta flag: a per-part PARTIAL_PREFILL (see progressive_prefill)


class PrefixFn:
    """Node fn of a PARTIAL_PREFILL node: awaits the spec's build; the value is unused."""

    def __init__(self, build: Any):
        self.build = build

    async def __call__(self, ctx: Any, /, **early: Any) -> None:
        result = self.build(ctx, **early)
        if inspect.isawaitable(result):
            await result


def progressive_prefill(fn: Any, part_source: str, early_inputs: dict[str, str], warms: str = "",
                        engine: str = "llm") -> dict[str, Any]:
    """The node fields (``op``, ``fn``, ``inputs``, ``engine``, ``cost``, ``meta``) of a progressive
    prefill: ``fn(ctx, part, **early)`` runs once per part of ``part_source``'s streamed value
    (decode pipelining) and warms the prompt of ``warms`` up to the late value known so far.
    Optional (the query never waits for it); recorded by :func:`prefill_splitting`."""
    return {"op": Op.PARTIAL_PREFILL, "fn": fn, "inputs": {"part": part_source, **early_inputs},
            "engine": engine, "cost": 0.0,
            "meta": {"per_part": "part", "optional": True, PROGRESSIVE: True, "warms": warms}}


def _record_progressive(g: Graph, out: Graph) -> None:
    for node in g.nodes.values():
        if node.op is Op.PARTIAL_PREFILL and node.meta.get(PROGRESSIVE):
            source = node.inputs.get(node.meta.get("per_part", ""), "?")
            record_optimization(out, "progressive_prefill", node.name,
                                f"warms the prompt as the parts of {source} arrive")


def prefill_splitting(g: Graph) -> PassResult:
    """Add a PARTIAL_PREFILL node per decode with a PrefixSpec and late inputs."""
    out = g.copy()
    _record_progressive(g, out)
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
        early = ", ".join(node.inputs[kw] for kw in spec.early_inputs)
        record_optimization(out, "prefill_splitting", prefill_name,
                            f"prefills the prompt prefix of {name} known from {early} while its other inputs run")
        changed = True
    return PassResult(out, changed)
