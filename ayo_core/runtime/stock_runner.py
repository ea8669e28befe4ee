"""A stock executor: the unoptimized graph run with the concurrency its framework gives it.

The reference interpreter (:mod:`ayo_core.runtime.interpreter`) runs one node at a time: it is
the equivalence reference for passes and policies, not a model of how fast stock runs. The
frameworks themselves run some groups concurrently with ``asyncio.gather``: LlamaIndex's
``tree_summarize`` summarizes each tree level's packs concurrently, ``QueryFusionRetriever(
use_async=True)`` retrieves its generated queries concurrently, ``SubQuestionQueryEngine(
use_async=True)`` answers its sub-questions concurrently. :func:`stock_run` runs exactly those
groups concurrently (named by a :class:`FrameworkConcurrency`) and everything else in the
reference interpreter's order, so a benchmark's stock side is stock as the framework runs it.

Two kinds of group:

- ``parts``: a per-part node whose parts the framework gathers (tree leaves, fused retrievals);
  every part is called at once instead of one after the other.
- ``expansions``: an expanding node (one returning :class:`~ayo_core.runtime.context.Expand`)
  whose grown nodes the framework runs concurrently (sub-questions); they run in waves, each
  wave every grown node whose inputs are ready, gathered.

Example: a tree level ``pack -> summarize (4 parts) -> reduce`` with
``FrameworkConcurrency(parts=("*.summarize",))`` makes the 4 summary calls together; a refine
chain ``step0 -> step1 -> step2`` runs one step after the other under any concurrency.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime.context import Engines, Expand, NodeContext
from ayo_core.runtime.engine_scheduler import DirectDispatcher
from ayo_core.runtime.errors import AyoError
from ayo_core.runtime.execute import grow, input_value, invoke, node_failure, parts_of
from ayo_core.trace import NodeSpan, Trace


@dataclass(frozen=True)
class FrameworkConcurrency:
    """What a framework runs with ``asyncio.gather``, as node-name patterns (``fnmatch``).

    ``parts``: per-part nodes whose parts run concurrently. ``expansions``: expanding nodes whose
    grown nodes run concurrently. Nothing named runs as the reference interpreter runs it.
    """

    parts: tuple[str, ...] = ()
    expansions: tuple[str, ...] = ()

    def gathers_parts(self, node: Node) -> bool:
        return any(fnmatch.fnmatchcase(node.name, p) for p in self.parts)

    def gathers_expansion(self, node: Node) -> bool:
        return any(fnmatch.fnmatchcase(node.name, p) for p in self.expansions)


SEQUENTIAL = FrameworkConcurrency()


class _Pending:
    """An expanding node's value until its expansion's output has run."""

    def __init__(self, output: str):
        self.output = output


class _StockRun:
    """The state of one :func:`stock_run`: the graph as it grows, values, and concurrent groups."""

    def __init__(self, g: Graph, inputs: Mapping[str, Any], engines: Engines, concurrency: FrameworkConcurrency,
                 trace: Trace, inline_sync: bool):
        self.g, self.inputs, self.concurrency, self.trace, self.inline_sync = g, inputs, concurrency, trace, inline_sync
        self.dispatchers = {kind: DirectDispatcher(kind, eng) for kind, eng in engines.items()}
        self.values: dict[str, Any] = {}
        self.group: dict[str, str] = {}  # grown node -> the expanding node whose expansion is gathered

    def ready(self, name: str) -> bool:
        return all(d in self.values and not isinstance(self.values[d], _Pending)
                   for d in self.g.nodes[name].deps if d in self.g.nodes)

    def next_wave(self) -> list[str]:
        """The next node in topological order, with every ready node of its gathered group ([]: all ran)."""
        todo = [n for n in self.g.topo_order() if n not in self.values]
        if not todo:
            return []
        first = next((n for n in todo if self.ready(n)), None)
        if first is None:
            raise AyoError(f"query {self.g.query_id!r}: no runnable node among {todo[:5]}; the graph's "
                           "expansions left a node waiting for a value that never came (a bug in an Expand)")
        group = self.group.get(first)
        if group is None:
            return [first]
        return [first] + [n for n in todo if n != first and self.group.get(n) == group and self.ready(n)]

    async def run_wave(self, wave: list[str]) -> None:
        results = await asyncio.gather(*(self.run_node(self.g.nodes[n]) for n in wave))
        for name, value in zip(wave, results, strict=True):
            node = self.g.nodes[name]
            if isinstance(value, Expand):
                self.expand(node, value)
            else:
                self.values[name] = value
        self.resolve_pending()

    def expand(self, node: Node, value: Expand) -> None:
        try:
            new = grow(self.g, node, value)
        except Exception as exc:
            raise node_failure(self.g.query_id, node, exc) from exc
        owner = self.group.get(node.name)
        if owner is None and self.concurrency.gathers_expansion(node):
            owner = node.name
        if owner is not None:
            for n in new:
                self.group[n.name] = owner
        self.trace.graph = self.g
        self.values[node.name] = _Pending(value.output)

    def resolve_pending(self) -> None:
        changed = True
        while changed:  # an expansion's output may itself have expanded
            changed = False
            for name, v in list(self.values.items()):
                if isinstance(v, _Pending) and v.output in self.values and not isinstance(self.values[v.output], _Pending):
                    self.values[name] = self.values[v.output]
                    changed = True

    async def run_node(self, node: Node) -> Any:
        if node.op is Op.INPUT:
            return input_value(node, self.inputs, self.g.query_id)
        kwargs = {kw: self.values[src] for kw, src in node.inputs.items()}
        if node.op is Op.OUTPUT:
            return next(iter(kwargs.values()))
        per_part = node.meta.get("per_part")
        if per_part is None:
            return await self.call(node, kwargs, None)
        parts = parts_of(self.g.nodes[node.inputs[per_part]], kwargs[per_part])
        if self.concurrency.gathers_parts(node):
            out = list(await asyncio.gather(*(self.call(node, {**kwargs, per_part: part}, idx)
                                              for idx, part in enumerate(parts))))
        else:
            out = [await self.call(node, {**kwargs, per_part: part}, idx) for idx, part in enumerate(parts)]
        if any(isinstance(v, Expand) for v in out):
            raise node_failure(self.g.query_id, node, AyoError("a per-part node cannot return Expand"))
        return out

    async def call(self, node: Node, kwargs: dict[str, Any], part: int | None) -> Any:
        loop = asyncio.get_running_loop()
        span = NodeSpan(self.g.query_id, node.name, node.module, node.op.value, node.engine, loop.time(), part=part)
        self.trace.nodes.append(span)
        ctx = NodeContext(query_id=self.g.query_id, node=node, dispatchers=self.dispatchers, trace=self.trace,
                          span=span)
        try:
            return await invoke(node, ctx, kwargs, self.inline_sync)
        except asyncio.CancelledError:
            span.status = "cancelled"
            raise
        except Exception as exc:
            span.status = "failed"
            raise node_failure(self.g.query_id, node, exc) from exc
        finally:
            span.end = loop.time()


async def stock_run(graph: Graph, inputs: Mapping[str, Any] | None = None, engines: Engines | None = None, *,
                    concurrency: FrameworkConcurrency = SEQUENTIAL, query_id: str | None = None,
                    inline_sync: bool = False) -> tuple[Any, Trace]:
    """Run the unoptimized ``graph`` as its framework does; return ``(output value, trace)``.

    With :data:`SEQUENTIAL` it runs exactly as :func:`~ayo_core.runtime.interpreter.reference_run`.
    Raises :class:`~ayo_core.runtime.errors.NodeFailed` naming the node and module that failed.
    """
    loop = asyncio.get_running_loop()
    g = graph.copy(query_id)
    trace = Trace(g.query_id, loop.time())
    trace.graph = g
    for kind, seconds in g.meta.get("overhead", {}).items():
        trace.add_overhead(kind, seconds)
    run = _StockRun(g, inputs or {}, engines or Engines(), concurrency, trace, inline_sync)
    output = g.output_name()
    try:
        while wave := run.next_wave():
            await run.run_wave(wave)
    except BaseException:
        trace.status = "failed"
        trace.end = loop.time()
        raise
    trace.status = "done"
    trace.end = loop.time()
    return run.values[output], trace
