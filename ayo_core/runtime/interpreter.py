"""The reference interpreter: the source of truth every pass and policy is tested against.

It runs a graph sequentially in topological order, one node at a time, each
engine call straight to its engine; a per-part consumer maps over the whole
list of its producer's parts; a node that returns :class:`Expand` grows the
graph and the new nodes take their place in the order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime.context import Engines, Expand, NodeContext
from ayo_core.runtime.engine_scheduler import DirectDispatcher
from ayo_core.runtime.errors import AyoError
from ayo_core.runtime.execute import grow, input_value, invoke, node_failure, parts_of
from ayo_core.trace import NodeSpan, Trace


async def reference_run(graph: Graph, inputs: Mapping[str, Any] | None = None, engines: Engines | None = None, *,
                        query_id: str | None = None, inline_sync: bool = False) -> tuple[Any, Trace]:
    """Run ``graph`` sequentially; return ``(value of the output node, trace)``.

    Raises :class:`~ayo_core.runtime.errors.NodeFailed` naming the node and module that failed.
    """
    loop = asyncio.get_running_loop()
    g = graph.copy(query_id)
    inputs = inputs or {}
    engines = engines or Engines()
    trace = Trace(g.query_id, loop.time())
    trace.graph = g
    for kind, seconds in g.meta.get("overhead", {}).items():
        trace.add_overhead(kind, seconds)
    dispatchers = {kind: DirectDispatcher(kind, eng) for kind, eng in engines.items()}
    values: dict[str, Any] = {}
    output = g.output_name()
    order = g.topo_order()
    i = 0
    try:
        while i < len(order):
            name = order[i]
            i += 1
            node = g.nodes[name]
            value = await _run_node(g, node, values, inputs, dispatchers, trace, inline_sync)
            if isinstance(value, Expand):
                try:
                    grow(g, node, value)
                except Exception as exc:
                    raise node_failure(g.query_id, node, exc) from exc
                done = set(values) | {name}
                order = [n for n in g.topo_order() if n not in done]
                i = 0
                # the expanding node's value is its expansion's output, set once that ran
                trace.graph = g
                values[name] = _Pending(value.output)
            else:
                values[name] = value
            _resolve_pending(values)
    except BaseException:
        trace.status = "failed"
        trace.end = loop.time()
        raise
    trace.status = "done"
    trace.end = loop.time()
    return values[output], trace


class _Pending:
    def __init__(self, output: str):
        self.output = output


def _resolve_pending(values: dict[str, Any]) -> None:
    changed = True
    while changed:  # an expansion's output may itself have expanded
        changed = False
        for name, v in list(values.items()):
            if isinstance(v, _Pending) and v.output in values and not isinstance(values[v.output], _Pending):
                values[name] = values[v.output]
                changed = True


async def _run_node(g: Graph, node: Node, values: dict[str, Any], inputs: Mapping[str, Any], dispatchers: dict,
                    trace: Trace, inline_sync: bool) -> Any:
    if node.op is Op.INPUT:
        return input_value(node, inputs, g.query_id)
    kwargs = {kw: values[src] for kw, src in node.inputs.items()}
    if node.op is Op.OUTPUT:
        return next(iter(kwargs.values()))
    per_part = node.meta.get("per_part")
    if per_part is None:
        return await _call(g, node, kwargs, dispatchers, trace, inline_sync, None)
    parts = parts_of(g.nodes[node.inputs[per_part]], kwargs[per_part])
    out = []
    for idx, part in enumerate(parts):
        value = await _call(g, node, {**kwargs, per_part: part}, dispatchers, trace, inline_sync, idx)
        if isinstance(value, Expand):
            raise node_failure(g.query_id, node, AyoError("a per-part node cannot return Expand"))
        out.append(value)
    return out


async def _call(g: Graph, node: Node, kwargs: dict[str, Any], dispatchers: dict, trace: Trace, inline_sync: bool,
                part: int | None) -> Any:
    loop = asyncio.get_running_loop()
    span = NodeSpan(g.query_id, node.name, node.module, node.op.value, node.engine, loop.time(), part=part)
    trace.nodes.append(span)
    ctx = NodeContext(query_id=g.query_id, node=node, dispatchers=dispatchers, trace=trace, span=span)
    try:
        return await invoke(node, ctx, kwargs, inline_sync)
    except asyncio.CancelledError:
        span.status = "cancelled"
        raise
    except Exception as exc:
        span.status = "failed"
        raise node_failure(g.query_id, node, exc) from exc
    finally:
        span.end = loop.time()
