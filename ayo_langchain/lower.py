"""Lowering: a captured module tree + one input -> the query's primitive graph.

Every node calls LangChain's own code for its module (``prompt.ainvoke``, the user's
parser, the user's lambda, a routed copy of the user's model), under a child config of
the query's chain run; only *when* and *how batched* things run changes. Independent
branches (a ``RunnableParallel``'s values) are independent nodes, so the runtime runs
them concurrently. A ``RunnableBranch`` or a routing function (a lambda that returns a
runnable) returns :class:`~ayo_core.runtime.context.Expand`: the chosen runnable is
captured and lowered when the choice is known, and the graph grows.

Node names are structural (``"3.prompt"``, ``"5.llm/0.parser"``), so the same chain
gives the same names for every query: the runtime's cost model learns per name.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import (
    acall_func_with_variable_args,
    call_func_with_variable_args,
    ensure_config,
    patch_config,
    run_in_executor,
)
from langchain_core.runnables.utils import AddableDict, is_async_generator

from ayo_core.graph import Graph
from ayo_core.modules import TypeDispatch
from ayo_core.runtime.chunks import PacedQueue, aadd_chunks, add_chunks
from ayo_core.runtime.context import Expand
from ayo_core.templates import Opaque, Route, StepLLMCall, Transform
from ayo_core.templates.builder import GraphBuilder
from ayo_langchain import capture as cap
from ayo_langchain import routing
from ayo_langchain.callbacks import PlannedChainRun, child, leaf_config, start_chain_run, step_config
from ayo_langchain.prefill import early_inputs
from ayo_shims import langchain as shims
from ayo_shims import openai_client

log = logging.getLogger(__name__)

# Rough seconds per module, only to rank slack before the runtime has measured anything.
SECONDS_PER_TOKEN = 0.03
COST = {"prompt": 0.001, "parser": 0.001, "lambda": 0.002, "opaque": 0.05, "embed": 0.02, "search": 0.01,
        "branch": 0.5}  # a branch usually expands into model calls


@dataclass
class ChainCall:
    """One input's call of an optimized chain: the state its node functions close over (the core's
    ``ayo_core.runtime.query.QueryRun`` is the runtime's state of one graph run, a different thing)."""

    cfg: RunnableConfig  # child config of the query's chain run
    run_manager: Any  # the query's chain run (for step tags)
    stream_to: Any = None  # the Model module whose chunks go to ``sink`` (astream)
    sink: asyncio.Queue | None = None  # a PacedQueue under astream: the caller paces the model
    tail_from: int | None = None  # top-level sequence steps from here run outside the graph (astream)
    sync: bool = False  # the user called a sync method: user objects run their sync code, as in stock
    streaming: bool = False  # the user called stream/astream: stock runs every step's transform
    open_runs: list[Any] = field(default_factory=list)  # composites' runs started and not ended (PlannedChainRun)
    # the chunks stock's stream gives the graph's output in (its last composite's); None: the value, one chunk
    out_chunking: Callable[[Any], list[Any]] | None = None

    async def fail_open_runs(self, error: BaseException) -> None:
        """End the composites' runs a failure left open with the error, innermost first, as stock's
        exception ends them while it propagates out."""
        while self.open_runs:
            await self.open_runs.pop().fail(error)


async def stream_user(run: ChainCall, runnable: Any, value: Any, cfg: RunnableConfig) -> Any:
    """What a model step gives inside stock's ``stream``: its ``transform`` (``atransform`` under an
    async call) over the one-chunk input, the chunks added up (an ``AIMessageChunk`` with the
    streamed answer's metadata, not the ``AIMessage`` of ``invoke``)."""
    if run.sync:
        return await asyncio.to_thread(_transform_once, runnable, value, cfg)

    async def one() -> Any:
        yield value

    return await aadd_chunks(runnable.atransform(one(), cfg))


async def call_user(run: ChainCall, runnable: Any, value: Any, cfg: RunnableConfig) -> Any:
    """Invoke a user object the way the stock chain would in this call: ``invoke`` (in a worker
    thread) under a sync call, ``ainvoke`` under an async one (a sync-only object keeps working,
    an async-only one fails, exactly as stock)."""
    if run.sync:
        return await asyncio.to_thread(runnable.invoke, value, cfg)
    return await runnable.ainvoke(value, cfg)


@dataclass
class Lowerer(GraphBuilder):
    """Builds the nodes of one query (names, ready times: the core's builder); ``sub()`` gives a
    lowerer for a run-time expansion."""

    plan: Any  # ayo_langchain.runnable.Plan (engines, routed models, options)
    run: ChainCall
    # dict-building node -> {key: producer node, "__base__": assign input}: prefill splitting reads it
    dict_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    # inside an object stock invokes even in a stream (a retriever's query chain): its models do not stream
    invoked: bool = False
    # node -> how to approximate its value from a pipelined retrieval's parts (progressive prefill)
    progress: dict[str, Any] = field(default_factory=dict)
    # node -> the chunks stock's stream of that value comes in (a composite's; absent: the value, one chunk)
    chunkings: dict[str, Chunking] = field(default_factory=dict)

    def sub(self, parent: str) -> Lowerer:
        return Lowerer(self.plan, self.run, prefix=f"{parent}/", ready=dict(self.ready), progress=dict(self.progress),
                       invoked=self.invoked)

    def streams_models(self) -> bool:
        """Models lowered now stream, as every model of a chain does under stock's ``stream``."""
        return self.run.streaming and not self.invoked

    # ---- dispatch -------------------------------------------------------------------------
    def lower(self, m: cap.Module, src: str, cfg: RunnableConfig) -> str:
        """Add the nodes computing ``m`` applied to ``src``'s value; return the node holding the result."""
        lower = LOWERINGS.find(m)
        if lower is None:
            raise TypeError(f"no lowering for captured module {type(m).__name__} ({m.label()}): register one in "
                            "ayo_langchain.lower.LOWERINGS")
        return lower(self, m, src, cfg)

    def _lower_sequence(self, m: cap.Sequence, src: str, cfg: RunnableConfig) -> str:
        top = m is self.plan.root and not self.prefix
        steps = m.steps
        if top and self.run.tail_from is not None:
            steps = steps[: self.run.tail_from + 1]
        planned, src = self.composite_run(m, src, cfg)
        outs = [src]
        fused_to = -1  # parsers up to this step run inside the model's node, over its chunks
        for i, step in enumerate(steps):
            if i <= fused_to:
                outs.append(outs[-1])
                continue
            step_cfg = self.composite_step_config(planned, cfg, f"seq:step:{i + 1}")
            early = None
            if isinstance(step, cap.Model) and i >= 2 and self.plan.prefill_split:
                early = early_inputs(self, steps[i - 1], step, self.dict_sources.get(outs[i - 1]))
            then = [(p, self.composite_step_config(planned, cfg, f"seq:step:{j + 1}"))
                    for j, p in enumerate(steps[i + 1:self.streamed_parsers_end(steps, i)], start=i + 1)]
            if early is not None or then:
                outs.append(self._lower_model(step, outs[-1], step_cfg, early=early, then=then))
                fused_to = i + len(then)
            else:
                outs.append(self.lower(step, outs[-1], step_cfg))
        return self.composite_end(planned, m, outs[-1], self.chunkings.get(outs[-1]))

    def streamed_parsers_end(self, steps: list[cap.Module], i: int) -> int:
        """Past the parsers right after ``steps[i]`` when it is a model streamed inside the graph:
        stock's stream runs their ``transform`` over the model's chunks (a text parser streams one
        ``on_parser_stream`` per token, a cumulative one each partial value), so they run in the model's
        node over its chunks; ``i + 1`` when there are none."""
        j = i + 1
        if not (self.streams_models() and isinstance(steps[i], cap.Model) and steps[i] is not self.run.stream_to
                and id(steps[i]) in self.plan.routed):
            return j
        while j < len(steps) and isinstance(steps[j], cap.Parser):
            j += 1
        return j

    def _lower_parallel(self, m: cap.Parallel, src: str, cfg: RunnableConfig) -> str:
        planned, src = self.composite_run(m, src, cfg)
        keys = list(m.branches)
        inputs = {}
        for i, key in enumerate(keys):
            branch_cfg = self.composite_step_config(planned, cfg, f"map:key:{key}")
            inputs[f"v{i}"] = self.lower(m.branches[key], src, branch_cfg)

        async def as_dict(ctx: Any, **values: Any) -> dict[str, Any]:
            return {key: values[f"v{i}"] for i, key in enumerate(keys)}

        out = self.build(Transform(as_dict, m.label(), takes_ctx=True), inputs, "dict")
        self.dict_sources[out] = dict(zip(keys, inputs.values(), strict=True))
        branches = {key: self.chunkings.get(inputs[f"v{i}"]) for i, key in enumerate(keys)}
        return self.composite_end(planned, m, out, branches=branches)

    def _lower_assign(self, m: cap.Assign, src: str, cfg: RunnableConfig) -> str:
        async def must_be_dict(ctx: Any, value: Any) -> Any:
            if not isinstance(value, dict):
                raise ValueError("The input to RunnablePassthrough.assign() must be a dict.")
            return value

        # the check runs inside the assign's run, before the mapper's, as in RunnableAssign._ainvoke
        upstream = self.chunkings.get(src)  # the input's chunks: stock's assign passes each one on
        planned, src = self.composite_run(m, src, cfg)
        checked = self.build(Transform(must_be_dict, m.label(), takes_ctx=True), {"value": src}, "assign_input")
        mapped = self._lower_parallel(m.mapper, checked, planned.child() if planned is not None else cfg)

        async def merge(ctx: Any, base: dict, new: dict) -> dict:
            return {**base, **new}

        out = self.build(Transform(merge, m.label(), takes_ctx=True), {"base": checked, "new": mapped}, "assign")
        self.dict_sources[out] = {**self.dict_sources[mapped], "__base__": checked}
        return self.composite_end(planned, m, out, upstream, mapper=self.chunkings.get(mapped))

    def _lower_identity(self, m: cap.Identity, src: str, cfg: RunnableConfig) -> str:
        """``RunnablePassthrough()``: no node, unless a handler sees its run (then one opens and ends it)."""
        planned = self.planned_run(m, cfg)
        if planned is None:
            return src

        async def passthrough(ctx: Any, value: Any) -> Any:
            await planned.start(value)
            await planned.end(value)
            return value

        out = self.build(Transform(passthrough, m.label(), takes_ctx=True), {"value": src}, "passthrough")
        self._same_value(src, out)
        return out

    # ---- the runs of composites -----------------------------------------------------------
    def composite_step_config(self, planned: PlannedChainRun | None, cfg: RunnableConfig, tag: str) -> RunnableConfig:
        """Config of a composite's step: a child of the composite's run; with no run reported, of the
        nearest run that is (the query's, a branch's, a retriever's), tagged as stock tags it."""
        if planned is not None:
            return planned.child(tag)
        return step_config(cfg, self.run.run_manager, tag)

    def composite_run(self, m: cap.Module, src: str, cfg: RunnableConfig) -> tuple[PlannedChainRun | None, str]:
        """Composite ``m``'s run, opened by a node once ``src`` is ready, if a handler would see it:
        the run (or None) and the node its steps read (``src``'s value, passed on). The root's run
        is the query's own (``ChainCall.run_manager``): no other."""
        planned = self.planned_run(m, cfg)
        if planned is None:
            return None, src
        return planned, self.start_run(planned, src, m.label(), "run_start")

    def planned_run(self, m: cap.Module, cfg: RunnableConfig) -> PlannedChainRun | None:
        """Composite ``m``'s own run if a handler would see it; None for the root (its run is the
        query's, ``ChainCall.run_manager``) or where nothing is listening."""
        if m is self.plan.root and not self.prefix:
            return None
        planned = PlannedChainRun(m.runnable, leaf_config(cfg, m.wrappers, m.runnable), streamed=self.streams_models())
        return planned if planned.reported else None

    def composite_end(self, planned: PlannedChainRun | None, m: cap.Module, out: str,
                      upstream: Chunking | None = None, **parts: Any) -> str:
        """``m``'s value at ``out``; its run ended there when a handler sees it. ``upstream``, ``parts``:
        how the parts of its value were streamed (see :func:`stream_chunks`)."""
        chunks = stream_chunks(m, upstream, **parts)
        if planned is not None:
            out = self.end_run(planned, out, m.label(), "run_end", chunks=chunks)
        if chunks is not None:
            self.chunkings[out] = chunks
        return out

    def start_run(self, planned: PlannedChainRun, src: str, label: str, name: str,
                  check: Callable[[Any], None] | None = None) -> str:
        """A node that opens ``planned`` with ``src``'s value (after ``check`` of it) and passes the
        value on. Until a node of :meth:`end_run` ends it, a failure of the query ends it with the
        error (``ChainCall.fail_open_runs``: innermost first, as stock's exception does)."""
        call = self.run

        async def start(ctx: Any, value: Any) -> Any:
            if check is not None:
                check(value)
            await planned.start(value)
            call.open_runs.append(planned)
            return value

        node = self.build(Transform(start, label, takes_ctx=True), {"value": src}, name)
        self._same_value(src, node)
        return node

    def end_run(self, planned: PlannedChainRun, out: str, label: str, name: str,
                chunks: Callable[[Any], list[Any]] | None = None) -> str:
        """A node that ends ``planned`` with ``out``'s value and passes it on (streamed: ``chunks`` of
        the value are the run's stream)."""
        call = self.run

        async def end(ctx: Any, value: Any) -> Any:
            call.open_runs.remove(planned)
            await planned.end(value, chunks(value) if chunks is not None else None)
            return value

        node = self.build(Transform(end, label, takes_ctx=True), {"value": out}, name)
        self._same_value(out, node)
        return node

    def _same_value(self, src: str, node: str) -> None:
        """``node`` holds ``src``'s value: what prefill splitting and progressive prefill know of it carries over."""
        if src in self.dict_sources:
            self.dict_sources[node] = self.dict_sources[src]
        if src in self.progress:
            self.progress[node] = self.progress[src]
        if src in self.chunkings:
            self.chunkings[node] = self.chunkings[src]

    # ---- leaves that call the user's object ---------------------------------------------
    def _call_node(self, label: str, m: cap.Module, src: str, cfg: RunnableConfig, cost: float,
                   model: bool = False, kind: type[Transform] = Transform) -> str:
        """A node that calls the user's object (a prompt, a parser: a Transform; else Opaque)."""
        runnable = m.runnable
        run_cfg = leaf_config(cfg, m.wrappers, runnable)
        method = stream_user if model and self.streams_models() else call_user

        async def call(ctx: Any, value: Any) -> Any:
            return await method(self.run, runnable, value, run_cfg)

        return self.build(kind(call, m.label(), takes_ctx=True, cost=cost), {"value": src}, label)

    def _lower_opaque(self, m: cap.Module, src: str, cfg: RunnableConfig) -> str:
        return self._call_node("opaque", m, src, cfg, COST["opaque"], model=is_language_model(m),
                               kind=Opaque)

    def _lower_lambda(self, m: cap.Lambda, src: str, cfg: RunnableConfig) -> str:
        lam = m.runnable
        run_cfg = leaf_config(cfg, m.wrappers, lam)
        func = getattr(lam, "afunc", None) or lam.func
        if is_async_generator(func) or inspect.isgeneratorfunction(func):
            return self._call_node("lambda", m, src, cfg, COST["lambda"])
        name_box: list[str] = []

        async def call(ctx: Any, value: Any) -> Any:
            if self.run.sync:
                if not hasattr(lam, "func"):  # async-only lambda under a sync call: stock's error
                    if self.run.streaming:  # stock's sync stream calls transform, which words it differently
                        return await asyncio.to_thread(_transform_once, lam, value, run_cfg)
                    return await asyncio.to_thread(lam.invoke, value, run_cfg)
                out = await routing.call_sync(lam, _lambda_body_sync(lam), value, run_cfg)
            elif self.streams_models():  # stock's stream runs the lambda's transform: its run streams the value
                out = await shims.atransform_with_config(lam, _lambda_body(lam, m.inline), value, run_cfg)
                if isinstance(out, Runnable):
                    return self._expand_routed(name_box[0], out, src, run_cfg, lam, value)
            else:
                out = await routing.call_async(lam, _lambda_body(lam, m.inline), value, run_cfg)
            if not isinstance(out, routing.RoutedRun):
                return out
            # the routed runnable runs inside the lambda's run, as stock's RunnableLambda invokes it
            self.run.open_runs.append(out)
            cfg = patch_config(run_cfg, callbacks=out.callbacks, recursion_limit=out.recursion_limit)
            return _end_routed(self._expand(name_box[0], out.runnable, src, cfg), out, self.run, name_box[0])

        name_box.append(self.build(Route(call, m.label(), takes_ctx=True, cost=COST["lambda"]), {"value": src},
                                   "lambda"))
        if src in self.progress:
            follow = self.progress[src].then(lam)
            if follow is not None:
                self.progress[name_box[0]] = follow
        return name_box[0]

    def _expand_routed(self, parent: str, out: Any, src: str, run_cfg: RunnableConfig, lam: Any, value: Any) -> Expand:
        """A runnable a lambda returned under a stream (its run already ended), run after it."""
        routing.check_depth(lam, value, out, run_cfg)
        return self._expand(parent, out, src, patch_config(run_cfg, recursion_limit=run_cfg["recursion_limit"] - 1))

    def _expand(self, parent: str, runnable: Any, src: str, cfg: RunnableConfig) -> Expand:
        """Capture ``runnable`` now that it is known and grow the graph with its nodes."""
        sub = self.sub(parent)
        module = self.plan.capture(runnable)
        out = sub.lower(module, src, cfg)
        if out == src:  # the chosen runnable is a passthrough: still give the expansion a node
            async def same(ctx: Any, value: Any) -> Any:
                return value

            out = sub.build(Transform(same, module.label(), takes_ctx=True), {"value": src}, "identity")
        return Expand(nodes=list(sub.graph.nodes.values()), output=out)

    def _lower_branch(self, m: cap.Branch, src: str, cfg: RunnableConfig) -> str:
        br = m.runnable
        run_cfg = leaf_config(cfg, m.wrappers, br)
        name_box: list[str] = []

        async def choose(ctx: Any, value: Any) -> Expand:
            run_manager = await start_chain_run(br, value, run_cfg)
            try:
                chosen, tag = br.default, "branch:default"
                for idx, (condition, runnable) in enumerate(br.branches):
                    if await call_user(self.run, condition, value, child(run_cfg, run_manager, f"condition:{idx + 1}")):
                        chosen, tag = runnable, f"branch:{idx + 1}"
                        break
            except BaseException as exc:
                await run_manager.on_chain_error(exc)
                raise
            expansion = self._expand(name_box[0], chosen, src, child(run_cfg, run_manager, tag))
            return _close_run(expansion, run_manager, name_box[0])

        name_box.append(self.build(Route(choose, m.label(), takes_ctx=True, cost=COST["branch"]), {"value": src},
                                   "branch"))
        return name_box[0]

    # ---- models ---------------------------------------------------------------------------
    def _lower_model(self, m: cap.Model, src: str, cfg: RunnableConfig, early: Any = None,
                     parts: Callable[[str], list] | None = None, finished: asyncio.Event | None = None,
                     then: list[tuple[cap.Module, RunnableConfig]] = ()) -> str:
        """A model's decode on the LLM engine; ``then``: the parsers after it (with their step
        configs) that transform its chunks in this node, as under stock's stream."""
        routed = self.plan.routed.get(id(m))
        if routed is None:  # an endpoint the engine does not serve: call the model as-is
            return self._call_node("model", m, src, cfg, COST["opaque"], model=True, kind=Opaque)
        run_cfg = leaf_config(cfg, m.wrappers, m.runnable)
        streaming = m is self.run.stream_to
        # under stock's stream every model of the chain streams (a branch's, a parallel's): same value type
        streamed = parts is None and self.streams_models()
        sink = self.run.sink
        transforms = [(p.runnable, leaf_config(p_cfg, p.wrappers, p.runnable)) for p, p_cfg in then]
        streamed_chunks: list[Any] = []  # what the node's last step streamed: its composite streams them too

        sync_code = self.run.sync and is_completion_model(m)  # its _generate, as stock's invoke (SyncClientShim)

        async def decode(ctx: Any, prompt: Any) -> Any:
            route = openai_client.Route(ctx.llm, on_delta=ctx.stream_cb, loop=asyncio.get_running_loop())
            with openai_client.route(route):
                if not (streaming or streamed):
                    try:
                        if sync_code:
                            return await asyncio.to_thread(routed.invoke, prompt, run_cfg)
                        return await routed.ainvoke(prompt, run_cfg)
                    finally:
                        if finished is not None:
                            finished.set()
                if not streaming:
                    chunks = routed.astream(prompt, run_cfg)
                    for runnable, transform_cfg in transforms:
                        chunks = runnable.atransform(chunks, transform_cfg)
                    streamed_chunks.clear()
                    return await aadd_chunks(chunks, streamed_chunks.append)
                # the caller's asks pace the model's stream: each token's events after the previous token's
                # way through the steps after the model, as in stock's stream
                chunks = routed.astream(prompt, run_cfg)
                return await aadd_chunks(sink.paced(chunks) if isinstance(sink, PacedQueue) else chunks,
                                         sink.put_nowait)

        inputs = {"prompt": src}
        if early is not None:
            inputs.update(early.inputs)
        call = StepLLMCall(_the_prompt, m.label(), call=decode, parts=parts, cost=self.plan.decode_cost(m),
                           prefix_spec=early.spec if early is not None else None)
        node = self.build(call, inputs, "llm")
        if streamed and not streaming:
            self.chunkings[node] = lambda value: list(streamed_chunks) if streamed_chunks else [value]
        return node


# captured module class -> its lowering (by type through the MRO: a module class without one fails loudly)
LOWERINGS: TypeDispatch[Callable[..., str]] = TypeDispatch("LangChain lowering")


def _calls(label: str, cost: float) -> Callable[..., str]:
    """The lowering of a leaf whose node calls the user's object (a prompt, a parser, a pick)."""
    return lambda lw, m, src, cfg: lw._call_node(label, m, src, cfg, cost)


for _cls, _lower in ((cap.Sequence, Lowerer._lower_sequence), (cap.Parallel, Lowerer._lower_parallel),
                     (cap.Identity, Lowerer._lower_identity), (cap.Assign, Lowerer._lower_assign),
                     (cap.Lambda, Lowerer._lower_lambda), (cap.Branch, Lowerer._lower_branch),
                     (cap.Model, Lowerer._lower_model), (cap.Opaque, Lowerer._lower_opaque),
                     (cap.Prompt, _calls("prompt", COST["prompt"])), (cap.Parser, _calls("parser", COST["parser"])),
                     (cap.Pick, _calls("pick", COST["parser"]))):
    LOWERINGS.add(_cls, _lower)
# the retrievers' lowerings are registered by ayo_langchain.retrieval, the chat history's by ayo_langchain.history


Chunking = Callable[[Any], list[Any]]


def stream_chunks(m: cap.Module, upstream: Chunking | None = None, branches: dict[str, Chunking | None] | None = None,
                  mapper: Chunking | None = None) -> Chunking | None:
    """The chunks composite ``m`` streams for its value under stock's stream, once every part is done;
    None: the value, one chunk. A parallel: per key, ``{key: chunk}`` for each chunk its branch streamed
    (``branches``; one when None). An ``.assign``: each chunk its input was streamed in (``upstream``; one
    when None), less the assigned keys, then its mapper's chunks (``mapper``, a parallel's; one per
    assigned key when None) (``RunnableAssign._atransform``). A sequence: its last step's (``upstream``)."""
    if isinstance(m, cap.Parallel):
        def parallel_chunks(value: dict) -> list[Any]:
            return [AddableDict({k: chunk}) for k, v in value.items()
                    for chunk in (_chunks_of(v, (branches or {}).get(k)))]

        return parallel_chunks
    if isinstance(m, cap.Assign) and m.mapper is not None:
        keys = list(m.mapper.branches)

        def assign_chunks(value: dict) -> list[Any]:
            rest = AddableDict({k: v for k, v in value.items() if k not in keys})
            passed = [c for c in (upstream(rest) if upstream is not None and rest else [rest]) if c]
            assigned = {k: value[k] for k in keys}
            if mapper is None:
                return passed + [AddableDict({k: v}) for k, v in assigned.items()]
            return passed + mapper(assigned)

        return assign_chunks
    if isinstance(m, cap.Sequence):
        return upstream
    return None


def _chunks_of(value: Any, chunking: Chunking | None) -> list[Any]:
    return chunking(value) if chunking is not None else [value]


def is_language_model(m: cap.Module) -> bool:
    """``m`` is a model (or bindings around one) that Ayo calls as-is."""
    from langchain_core.language_models import BaseLanguageModel

    return isinstance(_unbound(m), BaseLanguageModel)


def is_completion_model(m: cap.Module) -> bool:
    """``m`` is a text-completion model (``OpenAI``), whose sync and async code differ in what they report."""
    from langchain_openai import OpenAI

    return isinstance(_unbound(m), OpenAI)


def _unbound(m: cap.Module) -> Any:
    """``m``'s runnable inside its bindings (``with_config``, ``bind``)."""
    from langchain_core.runnables import RunnableBinding

    inner = m.runnable
    while isinstance(inner, RunnableBinding):
        inner = inner.bound
    return inner


def _lambda_body(lam: Any, inline: bool) -> Callable[..., Any]:
    """``RunnableLambda._ainvoke`` minus its last step: a returned runnable is handed back, not invoked."""

    async def body(value: Any, run_manager: Any, config: RunnableConfig) -> Any:
        if hasattr(lam, "afunc"):
            return await acall_func_with_variable_args(lam.afunc, value, config, run_manager)
        if inline:  # operator.itemgetter & co: pure, cheap, no thread hop
            return lam.func(value)
        return await run_in_executor(config, call_func_with_variable_args, lam.func, value, ensure_config(config),
                                     run_manager.get_sync())

    return body


def _transform_once(runnable: Any, value: Any, cfg: RunnableConfig) -> Any:
    """``runnable.transform`` over the one-chunk stream ``[value]``, its chunks added up."""
    return add_chunks(runnable.transform(iter([value]), cfg))


def _lambda_body_sync(lam: Any) -> Callable[..., Any]:
    """``RunnableLambda._invoke`` minus its last step (see ``_lambda_body``), for sync calls."""

    def body(value: Any, run_manager: Any, config: RunnableConfig) -> Any:
        return call_func_with_variable_args(lam.func, value, config, run_manager)

    return body


def _end_routed(expansion: Expand, routed: routing.RoutedRun, call: ChainCall, parent: str) -> Expand:
    """Append a node that hands the routed runnable's value to the lambda's open run (which ends with it)."""

    async def end(ctx: Any, value: Any) -> Any:
        call.open_runs.remove(routed)
        return await routed.end(value)

    g = Graph()
    name = Transform(end, "lambda", takes_ctx=True).build(g, f"{parent}/end", {"value": expansion.output})
    return Expand(nodes=[*expansion.nodes, *g.nodes.values()], output=name)


def _close_run(expansion: Expand, run_manager: Any, parent: str) -> Expand:
    """Append a node that ends ``run_manager``'s chain run with the expansion's value."""

    async def end(ctx: Any, value: Any) -> Any:
        await run_manager.on_chain_end(value)
        return value

    g = Graph()
    name = Transform(end, "branch", takes_ctx=True).build(g, f"{parent}/end", {"value": expansion.output})
    return Expand(nodes=[*expansion.nodes, *g.nodes.values()], output=name)


def _the_prompt(prompt: Any, **_early: Any) -> Any:
    """The decode's prompt is its ``prompt`` input: the user's prompt value, rendered by LangChain."""
    return prompt
