"""One query's execution inside the graph scheduler (see :mod:`ayo_core.runtime.scheduler`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime.context import Expand, NodeContext
from ayo_core.runtime.drain import doomed_by
from ayo_core.runtime.errors import AyoError, NodeFailed
from ayo_core.runtime.execute import grow, input_value, invoke, node_failure, parts_of
from ayo_core.runtime.owned import QueryTasks, reset_owner, set_owner
from ayo_core.runtime.states import NodeState, node_transition
from ayo_core.runtime.streams import PartChannel
from ayo_core.trace import NodeSpan, Trace, report_started

if TYPE_CHECKING:
    from ayo_core.runtime.scheduler import Runtime


def is_stream_consumer(node: Node) -> bool:
    """A per-part consumer that decode pipelining marked to start on its producer's first part."""
    return bool(node.meta.get("pipelined")) and node.meta.get("per_part") is not None


def stream_sources(g: Graph) -> set[str]:
    """Nodes that must publish parts because a pipelined consumer reads them."""
    return {n.inputs[n.meta["per_part"]] for n in g.nodes.values() if is_stream_consumer(n)}


class QueryRun:
    """State of one running query: a task per node, their values, part channels, the trace."""

    def __init__(self, rt: Runtime, graph: Graph, inputs: Mapping[str, Any]):
        self.rt, self.graph, self.inputs = rt, graph, inputs
        loop = asyncio.get_running_loop()
        self.trace = Trace(graph.query_id, loop.time())
        self.trace.graph = graph
        report_started(self.trace)
        for kind, seconds in graph.meta.get("overhead", {}).items():
            self.trace.add_overhead(kind, seconds)
        self.values: dict[str, Any] = {}
        self.states: dict[str, NodeState] = {}
        self.done: dict[str, asyncio.Future] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.part_tasks: set[asyncio.Task] = set()
        self.owned = QueryTasks(self.trace)  # background tasks its nodes start (start_owned)
        self.channels = {name: PartChannel() for name in stream_sources(graph)}
        self.remaining = 0
        self.failure: NodeFailed | None = None
        self.expanded_to: dict[str, str] = {}  # expanded node -> its expansion's output
        self.grown_by: dict[str, str] = {}  # a node an expansion added -> the expanded node
        self.doomed: set[str] | None = None  # draining after a failure: the nodes that will not run
        self.finished: asyncio.Future = loop.create_future()
        self.depths, self.slacks = rt.costs.analyse(graph)

    # ---- lifecycle ------------------------------------------------------------------
    async def execute(self) -> Any:
        with self.trace.measure("scheduling"):
            output = self.graph.output_name()
            for name in self.graph.topo_order():
                self._spawn(self.graph.nodes[name])
            if self.remaining == 0:
                self.finished.set_result(None)
        await self.finished
        self.trace.status = "done"
        self.trace.end = asyncio.get_running_loop().time()
        return self.values[output]

    async def release(self) -> None:
        """Cancel whatever this query still runs (optional nodes, or everything after a failure)."""
        pending = [t for t in [*self.tasks.values(), *self.part_tasks] if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.owned.cancel_all()
        for t in [*self.tasks.values(), *self.part_tasks]:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved here: the failure is reported once, by the query, not again at GC
        if self.trace.status == "running":
            self.trace.status = "failed" if self.failure else "cancelled"
        if self.trace.end <= self.trace.start:
            self.trace.end = asyncio.get_running_loop().time()

    def running_nodes(self) -> list[str]:
        return sorted(n for n, s in self.states.items() if s in (NodeState.RUNNING, NodeState.EXPANDED))

    def _spawn(self, node: Node) -> None:
        loop = asyncio.get_running_loop()
        self.done[node.name] = loop.create_future()
        self.states[node.name] = NodeState.PENDING
        if not node.meta.get("optional"):
            self.remaining += 1
        self.tasks[node.name] = loop.create_task(self._node_task(node), name=f"{self.graph.query_id}:{node.name}")
        if self.doomed is not None and node.deps & self.doomed:  # an expansion grown while draining
            self.doomed.add(node.name)
            self.tasks[node.name].cancel()

    def _set_state(self, name: str, state: NodeState) -> None:
        self.states[name] = node_transition(self.states[name], state, f"node {name!r} of {self.graph.query_id!r}")

    def _complete(self, node: Node, value: Any) -> None:
        self.values[node.name] = value
        self._set_state(node.name, NodeState.DONE)
        channel = self.channels.get(node.name)
        if channel is not None:
            channel.close(parts_of(node, value))
        self.done[node.name].set_result(None)
        if not node.meta.get("optional"):
            self.remaining -= 1
            if self.remaining == 0 and self.failure is None and not self.finished.done():
                self.finished.set_result(None)

    def _fail(self, exc: NodeFailed) -> None:
        draining = bool(self.graph.meta.get("drain_on_failure"))
        if self.failure is None or (draining and self._earlier(exc.node, self.failure.node)):
            # draining, the error raised is the one of the first failing step in the graph's order (its
            # lowering's, stock's: a sync parallel raises its first failing branch's, a batch its first
            # failing input's), whichever failed first in time
            self.failure = exc
            self.trace.status = "failed"
            self.trace.error = str(exc)
        if draining:
            self._drain(exc.node)
        elif not self.finished.done():
            self.finished.set_exception(self.failure)

    def _earlier(self, node: str, than: str) -> bool:
        """``node`` comes before ``than`` in the lowering's order: a node an expansion added stands where
        the expanded node stands (the graph lists it last), then in the expansion's own order."""
        order = {name: i for i, name in enumerate(self.graph.nodes)}

        def position(name: str) -> tuple[int, ...]:
            path = [order.get(name, len(order))]
            while name in self.grown_by:
                name = self.grown_by[name]
                path.append(order.get(name, len(order)))
            return tuple(reversed(path))

        return position(node) < position(than)

    def _drain(self, failed: str) -> None:
        """Cancel what ``failed`` dooms (``ayo_core.runtime.drain``); the rest runs to its end first."""
        if self.doomed is None:
            self.doomed = set()
        new = doomed_by(self.graph, failed, self.expanded_to) - self.doomed
        self.doomed |= new
        me = asyncio.current_task()
        for name in new:
            task = self.tasks.get(name)
            if task is not None and task is not me and not task.done():
                task.cancel()
        self._settle()

    def _settle(self) -> None:
        """Raise the failure once every node it did not doom has ended (draining only)."""
        if self.failure is None or self.doomed is None or self.finished.done():
            return
        if all(n in self.doomed or self.states[n] >= NodeState.DONE for n in self.tasks):
            self.finished.set_exception(self.failure)

    # ---- one node -------------------------------------------------------------------
    async def _node_task(self, node: Node) -> None:
        name = node.name
        try:
            deps = node.deps
            if is_stream_consumer(node):
                deps = deps - {node.inputs[node.meta["per_part"]]}
            for dep in deps:
                # shielded: a cancelled waiter (doomed while draining) must not cancel the future its
                # producer completes later, which then failed with InvalidStateError
                await asyncio.shield(self.done[dep])
            self._set_state(name, NodeState.RUNNING)
            value = await self._execute(node)
            if isinstance(value, Expand):
                value = await self._expand(node, value)
            self._complete(node, value)
        except asyncio.CancelledError:
            if self.states.get(name, NodeState.DONE) < NodeState.DONE:
                self._set_state(name, NodeState.CANCELLED)
            raise
        except Exception as exc:  # the node's failure fails its query, not the runtime
            if self.states.get(name, NodeState.DONE) < NodeState.DONE:
                self._set_state(name, NodeState.FAILED)
            self._fail(node_failure(self.graph.query_id, node, exc))
        finally:
            self._settle()

    async def _expand(self, node: Node, expansion: Expand) -> Any:
        with self.trace.measure("scheduling"):
            new = grow(self.graph, node, expansion)
            self.depths, self.slacks = self.rt.costs.analyse(self.graph)
            for n in new:
                self.grown_by[n.name] = node.name
                self._spawn(n)
            self._set_state(node.name, NodeState.EXPANDED)
            self.expanded_to[node.name] = expansion.output
        await asyncio.shield(self.done[expansion.output])
        return self.values[expansion.output]

    async def _execute(self, node: Node) -> Any:
        if node.op is Op.INPUT:
            return input_value(node, self.inputs, self.graph.query_id)
        if node.op is Op.OUTPUT:
            return self.values[next(iter(node.inputs.values()))]
        per_part = node.meta.get("per_part")
        kwargs = {kw: self.values[src] for kw, src in node.inputs.items() if kw != per_part}
        if per_part is None:
            return await self._call(node, kwargs, None)
        if is_stream_consumer(node):
            return await self._consume_stream(node, kwargs)
        source = node.inputs[per_part]
        parts = parts_of(self.graph.nodes[source], self.values[source])
        tasks = [self._start_part(node, i, part, kwargs) for i, part in enumerate(parts)]
        return list(await asyncio.gather(*tasks))

    async def _call(self, node: Node, kwargs: dict[str, Any], part: int | None) -> Any:
        loop = asyncio.get_running_loop()
        span = NodeSpan(self.graph.query_id, node.name, node.module, node.op.value, node.engine, loop.time(),
                        part=part)
        self.trace.nodes.append(span)
        channel = self.channels.get(node.name) if part is None else None
        ctx = NodeContext(query_id=self.graph.query_id, node=node, dispatchers=self.rt.schedulers, trace=self.trace,
                          span=span, depth=self.depths.get(node.name, 0), slack=self.slacks.get(node.name, 0.0),
                          query_start=self.trace.start, emit=channel.append if channel is not None else None,
                          streaming=channel is not None or bool(node.meta.get("early_stop")))
        owner = set_owner(self.owned, node.name)  # what the node starts with start_owned is this query's
        try:
            value = await invoke(node, ctx, kwargs, self.rt.inline_sync)
        except asyncio.CancelledError:
            span.status = "cancelled"
            raise
        except Exception:
            span.status = "failed"
            raise
        finally:
            reset_owner(owner)
            span.end = loop.time()
        if part is None:
            self.rt.costs.observe(node.name, max(0.0, span.duration - span.queued))
        return value

    # ---- per-part consumers ---------------------------------------------------------
    def _start_part(self, node: Node, index: int, part: Any, kwargs: dict[str, Any]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self._run_part(node, index, part, kwargs))
        self.part_tasks.add(task)
        task.add_done_callback(self.part_tasks.discard)
        return task

    async def _run_part(self, node: Node, index: int, part: Any, kwargs: dict[str, Any]) -> Any:
        try:
            value = await self._call(node, {**kwargs, node.meta["per_part"]: part}, index)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # fail fast: do not wait for the other parts
            failure = node_failure(self.graph.query_id, node, exc)
            self._fail(failure)
            raise failure from exc
        if isinstance(value, Expand):
            failure = node_failure(self.graph.query_id, node, AyoError("a per-part node cannot return Expand"))
            self._fail(failure)
            raise failure
        channel = self.channels.get(node.name)
        if channel is not None:
            channel.put(index, value)
        return value

    async def _consume_stream(self, node: Node, kwargs: dict[str, Any]) -> list[Any]:
        """Run ``node`` once per part of its producer as parts arrive; values re-joined in order."""
        channel = self.channels[node.inputs[node.meta["per_part"]]]
        started: dict[int, tuple[Any, asyncio.Task]] = {}
        while True:
            version = channel.version
            for i, part in list(channel.parts.items()):
                current = started.get(i)
                if current is None or current[0] is not part:  # new part, or the final text changed it
                    if current is not None:
                        current[1].cancel()
                    started[i] = (part, self._start_part(node, i, part, kwargs))
            if channel.closed:
                break
            await channel.wait(version)
        for i in [i for i in started if i >= (channel.length or 0)]:
            started.pop(i)[1].cancel()
        return [await started[i][1] for i in range(channel.length or 0)]
