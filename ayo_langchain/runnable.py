"""The drop-in runnable: ``optimize(chain)`` -> :class:`OptimizedRunnable`.

Per input it opens the chain run (as ``RunnableSequence`` does, so callbacks, tags,
metadata and run names behave), lowers the captured module tree into a primitive
graph, optimizes it with the core passes and runs it on the runtime: the lifecycle is the core's
:class:`~ayo_core.pipeline.OptimizedPipeline` (a call's graph is lowered for that call: its nodes
close over the call's run managers and configs). All inputs of
``batch``/``abatch`` (and concurrent calls on one event loop) share one runtime, so
the engine schedulers batch and prioritize across them. Async methods run on the
caller's event loop, as stock does (the user's async objects stay on their loop);
sync methods run on the core's background loop (:mod:`ayo_core.runtime.bridge`, shared with
the LlamaIndex adapter). Every chain's runtime schedules on the core's shared engine
schedulers, so separately optimized chains (and LlamaIndex queries) on one server meet
there, ranked by a policy that never sends a priority worse than a foreign client's.
Errors raised by the user's objects (a prompt missing a
variable, a parser failing on the model's text, a retriever raising) come out as the
very exception the stock chain raises.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableSequence
from langchain_core.runnables.base import RunnableBindingBase, RunnableEachBase, coerce_to_runnable
from langchain_core.runnables.config import (
    ensure_config,
    get_config_list,
    patch_config,
)
from langchain_core.runnables.fallbacks import RunnableWithFallbacks

from ayo_core.graph import Graph
from ayo_core.identity_cache import IdentityLRU
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.pipeline.engines import EMBED, LLM, EngineSet
from ayo_core.runtime import LoopRuntimes, Runtime, SchedulerConfig, bridge, caller_thread
from ayo_core.runtime.batching import gather_batch
from ayo_core.runtime.chunks import PacedQueue, drain_while_running, merge_chunk
from ayo_langchain import capture as cap
from ayo_langchain import engines as eng
from ayo_langchain.callbacks import leaf_config, reported, start_chain_run, step_config
from ayo_langchain.explain import explain
from ayo_langchain.history import stream_twin
from ayo_langchain.lower import SECONDS_PER_TOKEN, ChainCall, Lowerer, is_language_model
from ayo_shims import langchain as shims
from ayo_shims import openai_client, python_runtime

log = logging.getLogger(__name__)
DYNAMIC_CACHE = 256  # runnables met at run time whose capture is kept
LLM_INFLIGHT = 128  # Options.llm_inflight's default here: LLM requests Ayo keeps at the server (vLLM batches them)
# sync calls run the user's objects in the bridge loop's worker threads: daemon ones, so a user
# thread still calling invoke after the main thread ended is served (see ayo_shims.python_runtime)
bridge.use_executor(python_runtime.daemon_pool)
# a sync handler's events under a sync invoke/stream run on the caller's thread, as in stock
caller_thread.route(shims.is_sync_handler_event)


def _events_unsupported(runnable: Any) -> bool:
    """``runnable`` (inside its bindings) is a ``RunnableEach``, whose ``astream_events`` stock refuses."""
    while isinstance(runnable, RunnableBindingBase):
        runnable = runnable.bound
    return isinstance(runnable, RunnableEachBase)


def routed_copy(model: Any) -> Any:
    """A copy of a ``ChatOpenAI`` / ``OpenAI`` whose async client (an ``OpenAI``'s sync client too) sends
    its requests to the LLM engine of the current :class:`ayo_shims.openai_client.Route` (the one the
    model's graph node sets)."""
    from langchain_openai import OpenAI

    from ayo_core.engines.llm_client import LLMEngineError

    completion = isinstance(model, OpenAI)
    shim = openai_client.CompletionsShim if completion else openai_client.ChatCompletionsShim
    # a completion model's sync code too: stock's invoke runs its _generate (see SyncClientShim)
    sync_shim = openai_client.SyncClientShim if completion else None
    return shims.with_async_client(model, lambda client: shim(client, engine_errors=(LLMEngineError,)), sync_shim)


def rebind(runnable: Any, leaf: Any, copy: Any) -> Any:
    """``runnable`` (the model, bindings around it, or a sequence ending in those) with the model
    replaced by ``copy``."""
    if runnable is leaf:
        return copy
    if isinstance(runnable, RunnableBindingBase):  # bindings, and RunnableRetry (its retries kept)
        return runnable.model_copy(update={"bound": rebind(runnable.bound, leaf, copy)})
    if isinstance(runnable, RunnableWithFallbacks):  # the primary routed; the fallbacks as they are
        return runnable.model_copy(update={"runnable": rebind(runnable.runnable, leaf, copy)})
    if isinstance(runnable, RunnableSequence):
        return RunnableSequence(*runnable.steps[:-1], rebind(runnable.last, leaf, copy), name=runnable.name)
    raise TypeError(f"cannot reach the model inside {type(runnable).__name__}")


class Plan:
    """Everything fixed per optimized chain: the module tree, engines, routed models, runtime."""

    def __init__(self, runnable: Any, options: Options, runtime: Runtime | None = None) -> None:
        self.options = options
        self.capturer = cap.Capturer()
        self.root = self.capturer.capture(runnable)
        # bindings around the whole chain configure its top run (as stock), not each leaf again
        self.top_wrappers = self.root.wrappers
        for m in cap.walk(self.root):
            m.wrappers = m.wrappers[len(self.top_wrappers):]
        self.routed: dict[int, Any] = {}
        # runnables met at run time: a routing function may build a new one per call, so only the
        # most recent captures are kept (and their models forgotten from ``routed`` when dropped)
        self._dynamic: IdentityLRU[cap.Module] = IdentityLRU(DYNAMIC_CACHE, on_evict=self._forget)
        self.llm_endpoint: tuple[str, str] | None = None
        self.embed_folder: Any = None  # engines.embedding_identity of the embeddings self.embed serves
        # the one LLM and one embedding engine the chain's own runtime serves (first met; models at
        # other endpoints are called as-is), or the given runtime's
        self.llm: Any = None
        self.embed: Any = None
        self.engine_set = EngineSet()  # the own runtime's engines by kind ("llm", "embed")
        self.own_runtime = runtime is None
        self.given_runtime = runtime
        # the chain's own runtime per event loop, all learning one cost model (per node, all loops)
        self.runtimes = LoopRuntimes(options.policy, runtime.costs if runtime is not None else None)
        if runtime is None:
            self._register(self.root, discover=True)
        else:
            self.llm, self.embed = runtime.engines.llm, runtime.engines.embed
            self._register(self.root, discover=False)
        self.modules = cap.module_graph(self.root, self.opaque_reason)

    def opaque_reason(self, m: cap.Module) -> str:
        """Why a recognized module still runs as the user's object ('' when it is lowered)."""
        if isinstance(m, cap.Model) and id(m) not in self.routed:
            return "a model at an endpoint Ayo's LLM engine does not serve: called as-is"
        if isinstance(m, cap.VectorRetriever) and not self.serves_embeddings(m.embeddings):
            return "embeddings Ayo's embedding engine does not serve: the retriever is called as-is"
        return ""

    def runtime(self) -> Runtime:
        """The chain's runtime on the running event loop: its own (it grows when a routing function
        picks a model met at run time, see :meth:`capture`), on the loop's shared engine schedulers."""
        if self.given_runtime is not None:
            return self.given_runtime
        return self.runtimes.get(self.engines(), self.scheduler_configs())

    def engines(self) -> dict[str, Any]:
        return dict(self.engine_set.engines)

    def scheduler_configs(self) -> dict[str, SchedulerConfig]:
        # The LLM scheduler admits as many requests as stock would have in flight: vLLM batches
        # them (a small cap would shrink its batches) and orders them by the priority Ayo passes.
        return self.engine_set.configs(self.options.llm_inflight or LLM_INFLIGHT)

    def _discovered(self, family: str, key: Hashable, make: Callable[[], Any]) -> Any:
        """The own runtime's engine for ``key`` (``make()`` makes it), named by the core's engine set."""
        return self.engine_set.engines[self.engine_set.kind(family, key, make)]

    @property
    def policy(self) -> str:
        return self.given_runtime.policy.name if self.given_runtime is not None else self.options.policy

    # ---- options the lowerers read ------------------------------------------------------
    @property
    def prefill_split(self) -> bool:
        return self.options.prefill_split and self.llm is not None

    @property
    def min_prefill_tokens(self) -> int:
        return self.options.min_prefill_tokens

    def decode_cost(self, m: cap.Model) -> float:
        tokens = getattr(m.model, "max_tokens", None) or 256
        return tokens * SECONDS_PER_TOKEN

    def serves_embeddings(self, emb: Any) -> bool:
        return (self.embed is not None and not cap.embeddings_supported(emb)
                and eng.embedding_identity(emb) == self.embed_folder)

    # ---- discovery ------------------------------------------------------------------
    def capture(self, runnable: Any) -> cap.Module:
        """Capture a runnable met at run time (a branch arm, a routing function's choice)."""
        return self._dynamic.get(runnable, self._capture_new)

    def _capture_new(self, runnable: Any) -> cap.Module:
        module = self.capturer.capture(runnable)
        had = (self.llm, self.embed)
        self._register(module, discover=self.own_runtime)
        if (self.llm, self.embed) != had:  # first engines met at run time (a routing function's choice)
            self.runtimes.add_engines(self.engines(), self.scheduler_configs())
        return module

    def _forget(self, _runnable: Any, module: cap.Module) -> None:
        for m in cap.walk(module):
            self.routed.pop(id(m), None)

    def _register(self, module: cap.Module, discover: bool) -> None:
        for m in cap.walk(module):
            if isinstance(m, cap.Model):
                self._register_model(m, discover)
            elif isinstance(m, cap.VectorRetriever) and discover and self.embed is None:
                folder = eng.embedding_identity(m.embeddings)  # a model folder, or a server's settings
                if folder and not cap.embeddings_supported(m.embeddings):
                    engine = self._discovered(EMBED, folder, functools.partial(eng.embedding_engine_for, m.embeddings))
                    self.embed_folder, self.embed = folder, engine
            elif isinstance(m, cap.Branch) and discover:
                for _cond, arm in m.runnable.branches:
                    self._register(self.capture(arm), discover)
                self._register(self.capture(m.runnable.default), discover)

    def _register_model(self, m: cap.Model, discover: bool) -> None:
        endpoint = eng.model_endpoint(m.model)
        if endpoint is None:
            return
        if getattr(m.model, "include_response_headers", False):
            # the message carries the server's HTTP headers, which only the model's own client sees
            self.capturer.opaque.append((m.label(), "include_response_headers: the model's own client calls"))
            return
        if self.llm is None and discover:
            make = functools.partial(eng.llm_engine, *endpoint, api_key=eng.model_api_key(m.model))
            self.llm_endpoint, self.llm = endpoint, self._discovered(LLM, endpoint, make)
        if self.llm_endpoint is None and self.llm is not None:
            self.llm_endpoint = (eng.normalize_url(self.llm.base_url), self.llm.model)
        if endpoint == self.llm_endpoint and id(m) not in self.routed:
            self.routed[id(m)] = rebind(m.runnable, m.model, routed_copy(m.model))


class OptimizedRunnable(Runnable):
    """A ``Runnable`` that computes what the wrapped chain computes, on Ayo's runtime."""

    def __init__(self, runnable: Any, options: Options | None = None, runtime: Runtime | None = None) -> None:
        self.wrapped = runnable if isinstance(runnable, Runnable) else coerce_to_runnable(runnable)
        self.options = options or Options()
        self.pipeline: OptimizedPipeline[Plan] = OptimizedPipeline(
            lambda: Plan(self.wrapped, self.options, runtime), _lower_call, self.options,
            runtime=lambda: self.plan.runtime())
        self.plan = self.pipeline.plan
        self.last_trace: Any = None
        self.last_traces: list[Any] = []
        # the chain inside a history runnable's stream (its StreamTwin): streamed as stock streams a child
        self.streams_as_child = False

    @property
    def last_graph(self) -> Graph | None:
        """The primitive graph of the last call (lowered for it, optimized)."""
        return self.pipeline.last_graph

    # ---- Runnable surface -----------------------------------------------------------
    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return self.wrapped.get_name(suffix, name=name)

    @property
    def InputType(self) -> Any:  # noqa: N802 - Runnable's API
        return self.wrapped.InputType

    @property
    def OutputType(self) -> Any:  # noqa: N802 - Runnable's API
        return self.wrapped.OutputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.wrapped.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.wrapped.get_output_schema(config)

    @property
    def config_specs(self) -> list[Any]:
        return self.wrapped.config_specs

    def get_graph(self, config: RunnableConfig | None = None) -> Any:
        return self.wrapped.get_graph(config)

    def as_is(self, kwargs: dict[str, Any] | None = None) -> bool:
        """Run the user's object itself for this call.

        When the whole chain is one opaque node, Ayo has nothing to schedule, and wrapping it
        would add a chain run of its own and replace the object's own ``stream`` (an
        ``AgentExecutor`` streams its steps, a LangGraph graph its state). Call-time kwargs
        (``invoke(x, stop=[...])``) go to the wrapped object's own methods, which Ayo does not model.
        """
        return bool(kwargs) or isinstance(self.plan.root, cap.Opaque)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if self.as_is(kwargs):
            return self.wrapped.invoke(input, config, **kwargs)
        self.last_traces = []
        return bridge.run_sync(self._invoke(input, config, sync=True), "invoke()", serve_caller=True)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if self.as_is(kwargs):
            return await self.wrapped.ainvoke(input, config, **kwargs)
        self.last_traces = []
        return await self._invoke(input, config)

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        if self.as_is(kwargs):
            return self.wrapped.batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        if not inputs:
            return []
        self.last_traces = []
        return bridge.run_sync(self._batch(inputs, config, return_exceptions, sync=True), "batch()")

    async def abatch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        if self.as_is(kwargs):
            return await self.wrapped.abatch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        if not inputs:
            return []
        self.last_traces = []
        return await self._batch(inputs, config, return_exceptions)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        twin = None if self.as_is(kwargs) else self._stream_twin()
        if twin is not None:
            yield from twin.runnable.stream(input, _bound_config(config, twin.outer))
            self.last_trace = twin.chain.last_trace
            return
        if self.as_is(kwargs) or self.streams_as_is():
            yield from self.wrapped.stream(input, config, **kwargs)
            return
        yield from bridge.iter_sync(self._astream(input, config, sync=True), serve_caller=True)

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        twin = None if self.as_is(kwargs) else self._stream_twin()
        if twin is not None:
            async for chunk in twin.runnable.astream(input, _bound_config(config, twin.outer)):
                yield chunk
            self.last_trace = twin.chain.last_trace
            return
        as_is = self.as_is(kwargs) or self.streams_as_is()
        source = self.wrapped.astream(input, config, **kwargs) if as_is else self._astream(input, config)
        async for chunk in source:
            yield chunk

    async def astream_events(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
                             ) -> AsyncIterator[Any]:
        twin = None if self.as_is() else self._stream_twin()
        if _events_unsupported(self.wrapped):  # stock's error, as stock raises it (RunnableEach's)
            async for event in self.wrapped.astream_events(input, config, **kwargs):
                yield event
            return
        if twin is None:
            async for event in super().astream_events(input, config, **kwargs):
                yield event
            return
        # stock's bindings hand astream_events inward to the history runnable, whose own binding names the
        # root run (v1 names it from the config, not from the run)
        async for event in twin.runnable.astream_events(input, _bound_config(config, twin.outer), **kwargs):
            yield event
        self.last_trace = twin.chain.last_trace

    def _stream_twin(self) -> Any:
        """A root ``RunnableWithMessageHistory`` streams through stock's own stream around Ayo's chain
        (see :class:`ayo_langchain.history.StreamTwin`); None for any other root."""
        if not hasattr(self, "_twin"):
            self._twin = stream_twin(self.plan.root, self.plan.top_wrappers, self._twin_chain)
        return self._twin

    def _twin_chain(self, chain: Any) -> OptimizedRunnable:
        optimized = OptimizedRunnable(chain, self.options, self.plan.given_runtime)
        optimized.streams_as_child = True
        return optimized

    def streams_as_is(self) -> bool:
        """A root other than a sequence or a model whose stream yields a model's tokens (a parallel
        of chains, an ``.assign``, a branch, a routing lambda) streams as the user's object: its own
        ``astream`` yields stock's per-key / per-arm chunks as they come. (``invoke``/``batch`` still
        run on Ayo; a stream has one input and its value is the same either way.)"""
        root = self.plan.root
        return not isinstance(root, (cap.Sequence, cap.Model)) and _stream_source([root]) is not None

    # ---- execution ------------------------------------------------------------------
    def _top_config(self, config: RunnableConfig | None) -> RunnableConfig:
        return _bound_config(config, self.plan.top_wrappers)

    def reports_own_run(self) -> bool:
        """The root module opens its run itself (a model, a retriever, a branch...): stock's
        ``llm.invoke(x)`` reports one chat-model run, so Ayo opens no chain run around it."""
        return isinstance(self.plan.root, _SELF_REPORTING) or getattr(self.plan.root, "opens_own_run", False)

    async def _query_run(self, input: Any, config: RunnableConfig, sync: bool, streaming: bool = False) -> ChainCall:
        """This call's run state: under a chain run Ayo opens, unless the root reports its own."""
        if self.reports_own_run():
            return ChainCall(cfg=config, run_manager=None, sync=sync, streaming=streaming)
        run_manager = await start_chain_run(self, input, config)
        # patch_config drops the caller's run_id and run_name: they name the chain run, not its children
        return ChainCall(cfg=patch_config(config, callbacks=run_manager.get_child()), run_manager=run_manager,
                        sync=sync, streaming=streaming)

    async def _invoke(self, input: Any, config: RunnableConfig | None, sync: bool = False) -> Any:
        run = await self._query_run(input, self._top_config(config), sync)
        return await reported(run.run_manager, self._execute(input, run))

    async def _batch(self, inputs: list[Any], config: Any, return_exceptions: bool, sync: bool = False) -> list[Any]:
        configs = get_config_list(config, len(inputs))
        # stock's abatch raises the first error in time (asyncio.gather); its sync batch maps over
        # a thread pool: the error it raises is the first in input order
        return await gather_batch(lambda i: self._invoke(inputs[i], configs[i], sync), len(inputs),
                                  max_concurrency=configs[0].get("max_concurrency"),
                                  return_exceptions=return_exceptions, first_in_order=sync)

    async def _execute(self, input: Any, run: ChainCall) -> Any:
        # the pipeline raises a node's failure as the user's own exception (the stock chain's)
        try:
            value, trace = await self.pipeline.run_traced({"input": input}, run)
        except BaseException as exc:
            await run.fail_open_runs(exc)
            raise
        self.last_trace = trace
        self.last_traces = [*self.last_traces[-1023:], trace]  # this batch's traces (reset per call)
        return value

    async def _astream(self, input: Any, config: RunnableConfig | None, sync: bool = False) -> AsyncIterator[Any]:
        top = self._top_config(config)
        if self.streams_as_child and _streamed_as_a_child(top) and not self.reports_own_run():
            async for chunk in self._astream_as_child(input, top, sync):
                yield chunk
            return
        run = await self._query_run(input, top, sync, streaming=True)
        final: Any = None
        try:
            async for chunk in self._stream_chunks(input, run):
                final = merge_chunk(final, chunk)
                yield chunk
        except BaseException as exc:
            if run.run_manager is not None:
                await run.run_manager.on_chain_error(exc)
            raise
        if run.run_manager is not None:
            await run.run_manager.on_chain_end(final)

    def _astream_as_child(self, input: Any, config: RunnableConfig, sync: bool) -> AsyncIterator[Any]:
        """Streamed inside another run's stream (the chain in a ``RunnableWithMessageHistory``'s): the
        chain's run opens, streams and ends as stock's transform runs a child's (no input at the start,
        each chunk given to astream_events' and astream_log's handler, the input and the merged output at
        the end)."""
        async def transformer(chunks: AsyncIterator[Any], run_manager: Any, config: RunnableConfig) -> Any:
            value = None
            async for chunk in chunks:
                value = chunk
            run = ChainCall(cfg=config, run_manager=run_manager, sync=sync, streaming=True)
            async for out in self._stream_chunks(value, run):
                yield out

        return shims.atransform_stream(self, input, transformer, config)

    async def _stream_chunks(self, input: Any, run: ChainCall) -> AsyncIterator[Any]:
        """Stock streaming: the last model of the top sequence streams, later steps transform its chunks."""
        root = self.plan.root
        steps = root.steps if isinstance(root, cap.Sequence) else [root]
        at = _stream_source(steps)
        if at is None:  # nothing streams token by token: the value is the one chunk, as stock
            yield await self._execute(input, run)
            return
        top = isinstance(root, cap.Sequence)

        def cfg_of(j: int) -> RunnableConfig:
            # no run of its own (a graph node's sequence, flattened into the node's run): steps of the caller's
            cfg = step_config(run.cfg, run.run_manager, f"seq:step:{j + 1}") if top else run.cfg
            return leaf_config(cfg, steps[j].wrappers, steps[j].runnable)

        model = steps[at]
        first: Any = None
        if id(model) in self.plan.routed:
            run.stream_to, run.sink, run.tail_from = model, PacedQueue(), at
            source: AsyncIterator[Any] | None = drain_while_running(lambda: self._execute(input, run), run.sink)
        else:  # a model (or step) Ayo does not route: the graph computes its input, it streams as-is
            run.tail_from = at - 1
            # the step gets its input in the chunks stock's previous step streams it in (a parallel's: one per key)
            prefix = await self._execute(input, run) if at > 0 else input
            given = run.out_chunking(prefix) if at > 0 and run.out_chunking is not None else [prefix]
            source = None if run.sync else _astream_over(model.runnable, given, cfg_of(at))
            first = (lambda: _stream_over(model.runnable, given, cfg_of(at))) if run.sync else None
        if run.sync:  # the user's steps run their sync transform, in a worker thread, as in stock
            def pipeline(chunks: Iterator[Any]) -> Iterator[Any]:
                it = first() if first is not None else chunks
                for j in range(at + 1, len(steps)):
                    it = steps[j].runnable.transform(it, cfg_of(j))
                return it

            chunks: AsyncIterator[Any] = bridge.in_thread(source, pipeline)
        else:
            chunks = source
            for j in range(at + 1, len(steps)):
                chunks = steps[j].runnable.atransform(chunks, cfg_of(j))
        async for chunk in chunks:
            yield chunk

    # ---- introspection --------------------------------------------------------------
    def explain(self) -> Any:
        """What Ayo made of the chain (an ``ayo_core.explain.Explanation``; ``str()`` is the human view):
        modules, what stayed opaque and why, engines, the last graph, passes, optimizations and trace."""
        return explain(self)


def _lower_call(plan: Plan, run: ChainCall) -> Graph:
    """One call's primitive graph: the captured tree lowered for ``run`` (its configs and run managers)."""
    # a sync RunnableParallel waits for all its branches before it raises (its thread pool's exit):
    # on a failure the query lets what does not need the failed node finish too
    g = Graph(meta={"drain_on_failure": run.sync})
    g.input("input")
    lowerer = Lowerer(plan, run, graph=g)
    out = lowerer.lower(plan.root, "input", run.cfg)
    run.out_chunking = lowerer.chunkings.get(out)  # a stream's tail step gets the output in these chunks
    g.output(out)
    return g


def _streamed_as_a_child(config: RunnableConfig) -> bool:
    """The call's callbacks are a parent run's child manager: the caller is another runnable's run."""
    return getattr(config.get("callbacks"), "parent_run_id", None) is not None


def _bound_config(config: RunnableConfig | None, wrappers: tuple[Any, ...]) -> RunnableConfig:
    """The call's config as the bindings ``wrappers`` (outermost first) hand it inward, as stock's do."""
    config = ensure_config(config)
    for w in wrappers:
        config = shims.binding_config(w, config)
    return config


# Root modules whose lowering opens their own run, as the stock object does when called alone.
# (A lambda's expansions hang under the chain run, and composites report no run: those keep it.)
_SELF_REPORTING = (cap.Model, cap.Prompt, cap.Parser, cap.Pick, cap.VectorRetriever, cap.MultiQuery, cap.Ensemble,
                   cap.Branch)


def _astream_over(runnable: Runnable, chunks: list[Any], cfg: RunnableConfig) -> AsyncIterator[Any]:
    """Stock's stream of ``runnable`` over its input's ``chunks`` (``astream`` of a lone one)."""
    if len(chunks) == 1:
        return runnable.astream(chunks[0], cfg)

    async def given() -> AsyncIterator[Any]:
        for chunk in chunks:
            yield chunk

    return runnable.atransform(given(), cfg)


def _stream_over(runnable: Runnable, chunks: list[Any], cfg: RunnableConfig) -> Iterator[Any]:
    return runnable.stream(chunks[0], cfg) if len(chunks) == 1 else runnable.transform(iter(chunks), cfg)


def _stream_source(steps: list[cap.Module]) -> int | None:
    """The step stock's stream gets its chunks from, or None when nothing streams token by token.

    The last top-level step that is a model, holds one (a ``RunnableParallel`` / ``.assign`` /
    nested sequence whose branch streams a model's tokens as ``{key: chunk}``), or may route to
    one (a lambda or branch streams the runnable it picks); without any, the last step Ayo calls
    as-is (``llm.with_fallbacks(...)``, a configurable model: their own ``astream`` streams as
    stock's does). Steps after it run their ``transform`` on its chunks (a ``RunnableGenerator`` too).
    """
    def model(s: cap.Module) -> bool:
        return isinstance(s, cap.Model) or (isinstance(s, cap.Opaque) and is_language_model(s))

    def streams(s: cap.Module) -> bool:
        return isinstance(s, (cap.Lambda, cap.Branch)) or any(model(m) for m in cap.walk(s))

    for wanted in (streams, lambda s: isinstance(s, cap.Opaque)):
        for i in range(len(steps) - 1, -1, -1):
            if wanted(steps[i]):
                return _model_before_router(steps, i)
    return None


def _model_before_router(steps: list[cap.Module], at: int) -> int:
    """``at``, or the model feeding it when ``steps[at]`` is a lambda / branch reached from that model
    through parsers and lambdas only: stock's stream runs the model's tokens through those steps'
    ``transform`` (the parser streams them, the lambda or branch gathers them, then routes), so the model
    is where the chunks come from (``prompt | model | parser | lambda``, a LangGraph node's chain)."""
    if not isinstance(steps[at], (cap.Lambda, cap.Branch)):
        return at
    j = at - 1
    while j >= 0 and isinstance(steps[j], (cap.Parser, cap.Lambda)):
        j -= 1
    return j if j >= 0 and isinstance(steps[j], cap.Model) else at

