"""One run of an optimized LlamaIndex Workflow as one Ayo query whose graph grows with its events.

The workflow's own control loop runs (events, ``Context`` state, ``num_workers``,
``collect_events``, retries and the event stream are stock's by construction). What Ayo changes:

* every async step invocation the loop starts (an event delivered to a step) is added to the run's
  graph as a node while the run goes on: a ``Route`` node (``events.N``) waits for the next
  invocations and returns an ``Expand`` with one node per invocation plus the next ``Route``, so
  the graph grows by the events the steps emit (a branch decided at run time, fan-out, collect);
* the step starts when the graph scheduler starts its node, and the model calls its body makes
  through a recognized LlamaIndex ``OpenAI``/``OpenAILike`` model go through that node's LLM engine
  scheduler (cross-step and cross-query batching, the query's priority); anything else the body
  does (tools, retrieval through other objects, user code) runs as the user's code.

The step body itself runs in the workflow's own task (its context variables, cancellation and
error handling are stock's); the node's task only holds the node open until the body ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ayo_core.engines.llm_client import LLMEngineError
from ayo_core.graph import Graph
from ayo_core.introspect import once
from ayo_core.runtime import Expand
from ayo_core.templates import Opaque
from ayo_core.templates.flow import Route
from ayo_llamaindex.agent_tools import EarlyToolStarts, ObservingContext
from ayo_shims import llamaindex as li_shim
from ayo_shims import llamaindex_workflows as wf_shim
from ayo_shims import openai_client

if TYPE_CHECKING:
    from ayo_llamaindex.workflow import OptimizedWorkflow

log = logging.getLogger(__name__)

# the optimized run a workflow's tasks belong to (inherited by the tasks its control loop creates)
_RUN: contextvars.ContextVar[WorkflowRun | None] = contextvars.ContextVar("ayo_workflow_run", default=None)
# the Ayo node of the step invocation running in this task (and the tasks its body creates)
_STEP: contextvars.ContextVar[StepCall | None] = contextvars.ContextVar("ayo_workflow_step", default=None)
_run_ids = itertools.count()


@dataclass
class StepCall:
    """One step invocation: the node that holds it in the run's graph, and what it did."""

    step: str
    node: str
    started: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    finished: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    ctx: Any = None  # the node's NodeContext once the graph scheduler started it
    model_calls: int = 0
    outcome: str = "ok"

    def finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(self.outcome)


class WorkflowRun:
    """The Ayo side of one ``workflow.run(...)``: a queue of step invocations and the growing graph."""

    def __init__(self, owner: OptimizedWorkflow, runtime: Any) -> None:
        self.owner, self.runtime = owner, runtime
        self.query_id = f"workflow-{next(_run_ids)}"
        self.calls: list[StepCall] = []
        self._waiting: asyncio.Queue[StepCall | None] = asyncio.Queue()
        self._counts: dict[str, int] = {}
        self.query: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None  # held: the loop keeps only weak references to tasks
        self.graph: Graph | None = None
        self.trace: Any = None
        self.early_tools = EarlyToolStarts()  # FunctionAgent tool calls started from the model's stream

    # -- the workflow side ---------------------------------------------------------------------
    def submit(self, step: str) -> StepCall:
        n = self._counts[step] = self._counts.get(step, 0) + 1
        call = StepCall(step=step, node=f"step.{step}.{n}")
        self.calls.append(call)
        self._waiting.put_nowait(call)
        return call

    async def wait_start(self, call: StepCall) -> bool:
        """Until the graph scheduler starts ``call``'s node; False when the Ayo query ended first
        (the step then runs as stock: Ayo never holds a workflow up)."""
        if self.query is None or self.query.done():
            return False
        await asyncio.wait({call.started, self.query}, return_when=asyncio.FIRST_COMPLETED)
        return call.started.done()

    def end(self) -> None:
        self._waiting.put_nowait(None)

    async def finished(self) -> Any:
        """The run's Ayo trace, once its graph has finished (shortly after the workflow's result)."""
        if self.query is not None:
            await asyncio.shield(self.query)
        return self.trace

    # -- the graph side ------------------------------------------------------------------------
    def start(self, handler: Any) -> None:
        g = Graph(query_id=self.query_id)
        Route(self._dispatcher(0), module="workflow", reason="grows by the step invocations the events start").build(
            g, "events.0", {})
        g.output("events.0")
        self.graph = g
        # the query itself (the runtime's run of the growing graph) and its watcher: not work inside a
        # query, so no query owns them; finish() awaits the query, the watcher ends with the handler
        self.query = asyncio.ensure_future(self._run_query(g))
        self._watcher = asyncio.ensure_future(self._watch(handler))

    async def _run_query(self, g: Graph) -> None:
        try:
            _, self.trace = await self.runtime.run(g, {}, query_id=self.query_id)
            self.owner.last_trace, self.owner.last_graph = self.trace, getattr(self.trace, "graph", None) or g
            self._note_model_calls(self.trace)
        except Exception:  # noqa: BLE001 - the workflow goes on as stock; Ayo's failure is logged
            log.warning("Ayo's graph for workflow run %s failed; the rest of the run goes on unscheduled",
                        self.query_id, exc_info=True)

    def _note_model_calls(self, trace: Any) -> None:
        """Per step: model calls the engine served (the trace's engine calls of its nodes) and calls
        its model made through its own client (requests the engine does not speak, e.g. with tools)."""
        served: dict[str, int] = {}
        for c in trace.engine_calls:
            served[c.node] = served.get(c.node, 0) + 1
        for call in self.calls:
            engine = served.get(call.node, 0)
            self.owner.note_model_calls(call.step, engine, max(call.model_calls - engine, 0))

    async def _watch(self, handler: Any) -> None:
        try:
            await handler.stop_event_result()
        except BaseException:  # noqa: BLE001 - the user sees the run's outcome through the handler itself
            pass
        finally:
            self.end()

    def _dispatcher(self, n: int) -> Callable[[], Awaitable[Any]]:
        async def next_events() -> Any:
            first = await self._waiting.get()
            if first is None:
                return len(self.calls)
            batch = [first]
            while not self._waiting.empty():
                call = self._waiting.get_nowait()
                if call is None:
                    self.end()  # after this expansion
                    break
                batch.append(call)
            sub = Graph(query_id=self.query_id)
            for call in batch:
                Opaque(_step_node(call), module=f"step:{call.step}", takes_ctx=True, side_effect=False,
                       resources=None, reason="the step's own code; its model calls go to Ayo's LLM engine").build(
                    sub, call.node, {})
            nxt = f"events.{n + 1}"
            Route(self._dispatcher(n + 1), module="workflow").build(sub, nxt, {})
            return Expand(list(sub.nodes.values()), output=nxt)

        return next_events


def _step_node(call: StepCall) -> Callable[..., Awaitable[str]]:
    async def step(ctx: Any) -> str:
        call.ctx = ctx
        if not call.started.done():
            call.started.set_result(True)
        return await call.finished

    return step


# -- the hooks (process-wide, inert outside an optimized run) ----------------------------------

def begin_run(run: WorkflowRun) -> contextvars.Token:
    install_hooks()
    return _RUN.set(run)


def end_run(token: contextvars.Token) -> None:
    _RUN.reset(token)


def _gate(step: str, call: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    run = _RUN.get()
    if run is None:
        return call

    async def scheduled() -> Any:
        node = run.submit(step)
        try:
            on_graph = await run.wait_start(node)
            token = _STEP.set(node if on_graph else None)
            try:
                return await call()
            finally:
                _STEP.reset(token)
        except BaseException as exc:
            node.outcome = type(exc).__name__
            raise
        finally:
            node.finish()

    return scheduled


def _route_client(llm: Any, client: Any) -> Any:
    node = _STEP.get()
    if node is None or node.ctx is None:
        return client
    run = _RUN.get()
    kind = run.owner.engine_kind(llm, run.runtime) if run is not None else None
    if kind is None:
        return client
    node.model_calls += 1
    return wf_shim.RoutedAsyncClient(client, openai_client.Route(node.ctx.engine(kind)), (LLMEngineError,))


def _query_in_step(wrapped: Any, engine: Any, args: tuple, kwargs: dict) -> Any:
    """``BaseQueryEngine.aquery``: inside a step Ayo scheduled, a query engine it lowers answers as
    Ayo's graph (:mod:`ayo_llamaindex.workflow_engines`); every other call is stock's."""
    return _lowered_in_step(wrapped, engine, args, kwargs, lambda engines: engines.lowered(engine))


def _retrieve_in_step(wrapped: Any, retriever: Any, args: tuple, kwargs: dict) -> Any:
    """``BaseRetriever.aretrieve``: as :func:`_query_in_step`, for a retriever Ayo lowers."""
    return _lowered_in_step(wrapped, retriever, args, kwargs, lambda engines: engines.lowered_retriever(retriever))


def _lowered_in_step(wrapped: Any, obj: Any, args: tuple, kwargs: dict, lowered: Callable[[Any], Any]) -> Any:
    node, run = _STEP.get(), _RUN.get()
    if node is None or node.ctx is None or run is None or len(args) + len(kwargs) != 1:
        return wrapped(*args, **kwargs)
    tool = lowered(run.owner.query_engines)
    if tool is None:
        return wrapped(*args, **kwargs)
    return _answer_in_step(run, node, tool, args[0] if args else next(iter(kwargs.values())))


async def _answer_in_step(run: WorkflowRun, node: StepCall, tool: Any, query: Any) -> Any:
    token = _STEP.set(None)  # the engine's own nodes call the user's objects: those calls are not routed again
    try:
        return await run.owner.query_engines.answer(node.step, tool, query)
    finally:
        _STEP.reset(token)


def _observe_stream(agent: Any, ctx: Any, tools: Any) -> Any:
    run = _RUN.get()
    return None if run is None else ObservingContext(ctx, run.early_tools, list(tools))


def _started_tool(tool: Any, tool_input: dict) -> Any:
    run = _RUN.get()
    return None if run is None else run.early_tools.take_tool(tool, tool_input)


@once
def install_hooks() -> None:
    wf_shim.wrap_step_calls(_gate)
    wf_shim.wrap_async_clients(_route_client)
    wf_shim.wrap_agent_tool_calls(_observe_stream, _started_tool)
    # aquery only: a sync query() in a step blocks the loop in stock too, and is left to stock
    li_shim.wrap_query_calls(None, _query_in_step)
    li_shim.wrap_aretrieve_calls(_retrieve_in_step)
