"""Node execution shared by the reference interpreter and the graph scheduler."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from ayo_core.graph import Graph, GraphError, Node
from ayo_core.runtime.context import Expand, NodeContext
from ayo_core.runtime.errors import AyoError, NodeFailed


def is_async_callable(fn: Any) -> bool:
    """An ``async def`` function, method or partial of one, or an object with an ``async def __call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    # an instance: its class's __call__ (looked up in the class dicts, as Python calls it)
    call = next((vars(k)["__call__"] for k in type(fn).__mro__ if "__call__" in vars(k)), None)
    return call is not None and inspect.iscoroutinefunction(call)


async def invoke(node: Node, ctx: NodeContext, kwargs: Mapping[str, Any], inline_sync: bool = False) -> Any:
    """Call ``node.fn(ctx, **kwargs)``: awaited if async, else in a thread (or inline when asked)."""
    fn = node.fn
    if is_async_callable(fn):
        return await fn(ctx, **kwargs)
    result = fn(ctx, **kwargs) if inline_sync else await asyncio.to_thread(fn, ctx, **kwargs)
    if inspect.isawaitable(result):  # a plain function or lambda that returned a coroutine
        result = await result
    return result


def input_value(node: Node, inputs: Mapping[str, Any], query_id: str) -> Any:
    key = node.meta.get("key") or node.name
    try:
        return inputs[key]
    except KeyError:
        raise AyoError(f"query {query_id!r}: the graph needs input {key!r} (INPUT node {node.name!r}); "
                       f"pass inputs={{{key!r}: ...}} to run(), got keys {sorted(inputs)}") from None


def parts_of(source: Node, value: Any) -> list[Any]:
    """The list a per-part consumer of ``source`` maps over: ``meta["parts"](value)`` or the value itself."""
    parser = source.meta.get("parts")
    if parser is not None and not isinstance(value, (list, tuple)):
        return list(parser(value))
    if isinstance(value, (list, tuple)):
        return list(value)
    raise AyoError(f"node {source.name!r} produced {type(value).__name__}, but a per-part consumer maps over it: "
                   "give it meta['parts'] (a parser) or make it return a list")


def node_failure(query_id: str, node: Node, exc: BaseException) -> NodeFailed:
    if isinstance(exc, NodeFailed):
        return exc
    failed = NodeFailed(query_id, node.name, node.module, node.op.value, exc)
    failed.__cause__ = exc
    return failed


def grow(g: Graph, node: Node, expansion: Expand) -> list[Node]:
    """Add ``expansion``'s nodes to ``g`` for the expanding ``node``; return them.

    The expanding node's consumers get an ``after`` edge on the expansion's
    output, so the grown graph shows the real dependency (and stays acyclic).
    """
    if not isinstance(expansion, Expand):
        raise AyoError(f"node {node.name!r} returned {type(expansion).__name__}, expected Expand")
    new = list(expansion.nodes)
    names = {n.name for n in new}
    for n in new:
        if node.name in n.deps:
            raise GraphError(f"node {n.name!r} returned by Expand from {node.name!r} depends on {node.name!r}, "
                             "whose value is the expansion's output: take the inputs it needs directly")
    if expansion.output not in names and expansion.output not in g.nodes:
        raise GraphError(f"Expand from {node.name!r} names output {expansion.output!r}, which is not among its nodes")
    for n in new:
        g.add(n)
    consumers = [g.nodes[c] for c in g.consumers(node.name) if c not in names]
    for c in consumers:
        g.replace(c.replace(after=c.after | {expansion.output}))
    missing = [f"{n.name}<-{d}" for n in new for d in n.deps if d not in g.nodes]
    if missing:
        raise GraphError(f"Expand from {node.name!r} adds nodes with missing producers: {missing}")
    g.topo_order()  # raises on a cycle
    g.meta["expansions"] = {**g.meta.get("expansions", {}), node.name: expansion.output}
    return new
