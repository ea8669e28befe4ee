"""LangChain config and callback plumbing, done the way LangChain's own runnables do it.

The optimized runnable opens one chain run per input (like ``RunnableSequence``), and
every leaf the graph calls (prompt, model, parser, lambda, opaque step) runs under a
child config of that run, so user callbacks, tags, metadata and run names see the
same runs they see with the stock chain. Retrievers Ayo lowers to embed+search open
their retriever run here, exactly as ``BaseRetriever.ainvoke`` does.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

from langchain_core.callbacks import AsyncCallbackManager, BaseCallbackManager
from langchain_core.callbacks.manager import AsyncCallbackManagerForChainRun, AsyncCallbackManagerForRetrieverRun
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, merge_configs, patch_config

from ayo_shims import langchain as shims


def leaf_config(cfg: RunnableConfig, wrappers: tuple[Any, ...], runnable: Any) -> RunnableConfig:
    """``cfg`` with the config of enclosing ``with_config`` bindings merged in.

    A binding's ``run_name`` names the run of the runnable it wraps directly; when it wraps
    a composite Ayo splits into nodes, the leaves inside must not take that name.
    """
    for w in reversed(wrappers):
        own = dict(w.config)
        if w.bound is not runnable:
            own.pop("run_name", None)
            own.pop("run_id", None)
        cfg = merge_configs(own, cfg)  # call-time config wins, as in RunnableBinding._merge_configs
    return cfg


def child(cfg: RunnableConfig, run_manager: Any, tag: str | None = None) -> RunnableConfig:
    """Config for a child step of ``run_manager``'s run."""
    return patch_config(cfg, callbacks=run_manager.get_child(tag))


def step_config(cfg: RunnableConfig, run_manager: Any, tag: str) -> RunnableConfig:
    """Config for the step ``tag`` of a composite that reports no run of its own (a nested
    sequence or parallel): a child of the nearest run that does report (the one ``cfg``'s
    callbacks hang under: the query's run, a branch's, a retriever's), tagged as stock tags it.
    """
    parent = cfg.get("callbacks")
    if not isinstance(parent, BaseCallbackManager) or parent.parent_run_id is None:
        return child(cfg, run_manager, tag)
    # what ``get_child(tag)`` of that run gives: its inheritable handlers, tags and metadata
    manager = AsyncCallbackManager(handlers=[], parent_run_id=parent.parent_run_id)
    manager.set_handlers(parent.inheritable_handlers)
    manager.add_tags(parent.inheritable_tags)
    manager.add_metadata(parent.inheritable_metadata)
    manager.add_tags([tag], inherit=False)
    return patch_config(cfg, callbacks=manager)


def run_of(kind: type, m: AsyncCallbackManager, run_id: UUID) -> Any:
    """The run manager ``m.on_*_start(..., run_id=run_id)`` will return, made before the run starts
    (a planned run's children name it as their parent while the graph is built)."""
    return kind(run_id=run_id, handlers=m.handlers, inheritable_handlers=m.inheritable_handlers,
                parent_run_id=m.parent_run_id, tags=m.tags, inheritable_tags=m.inheritable_tags,
                metadata=m.metadata, inheritable_metadata=m.inheritable_metadata)


@dataclass
class PlannedRetrieverRun:
    """A retriever run whose id is chosen when the query's graph is built.

    A retriever Ayo splits into nodes (MultiQuery, Ensemble) starts its run at run time, but
    the configs of the runs inside it (its query chain, its sub-retrievers) are made while
    lowering: with the id fixed up front they name the retriever's run as their parent, as in
    stock. Nodes using :meth:`child` configs must run after :meth:`start`.
    """

    retriever: Any
    cfg: RunnableConfig
    ls_params: bool = True  # False: the retriever opens its run itself, without them (EnsembleRetriever)
    run_id: UUID = field(default_factory=uuid4)

    def __post_init__(self) -> None:
        self.manager = retriever_manager(self.retriever, self.cfg, self.ls_params)
        given = ensure_config(self.cfg).get("run_id")
        if given is not None:  # the caller's run id (``invoke(q, {"run_id": ...})``) names this run, as in stock
            self.run_id = given

    def child(self, cfg: RunnableConfig, tag: str | None = None) -> RunnableConfig:
        """``cfg`` for a run inside this retriever's run (``run_manager.get_child(tag)`` in stock)."""
        return patch_config(cfg, callbacks=run_of(AsyncCallbackManagerForRetrieverRun, self.manager,
                                                  self.run_id).get_child(tag))

    async def start(self, query: Any) -> Any:
        """Open the run (as ``BaseRetriever.ainvoke`` does); returns its run manager."""
        name = self.cfg.get("run_name") or self.retriever.get_name()
        return await self.manager.on_retriever_start(None, query, name=name, run_id=self.run_id)


@dataclass
class PlannedChainRun:
    """A chain run (as ``Runnable._acall_with_config`` / a composite's ``ainvoke`` opens it) whose id
    is fixed while lowering: the run of a composite Ayo splits into nodes (a nested sequence, a
    parallel, an ``.assign``, a passthrough) or of a runnable whose steps it lowers (the message
    history's). The configs of the steps inside (:meth:`child`, made while lowering) name it as
    their parent before it starts; a node opens it once its input is ready and another ends it.
    ``reported`` false: no handler would see it (no callbacks, tracer or event stream), and
    composites are lowered without those nodes.
    """

    runnable: Any
    cfg: RunnableConfig
    streamed: bool = False  # under stock's stream: opened as a transform opens it, its value streamed
    run_id: UUID = field(default_factory=uuid4)
    run_manager: Any = None
    value_in: Any = None

    def __post_init__(self) -> None:
        from langchain_core.runnables.config import get_async_callback_manager_for_config

        self.cfg = ensure_config(self.cfg)
        self.manager = get_async_callback_manager_for_config(self.cfg)
        self.name = self.cfg.get("run_name") or self.runnable.get_name()
        if self.cfg.get("run_id") is not None:  # the caller's run id names this run, as in stock
            self.run_id = self.cfg["run_id"]

    @property
    def reported(self) -> bool:
        return bool(self.manager.handlers)

    def child(self, tag: str | None = None) -> RunnableConfig:
        """The run's config for a step inside it (``run_manager.get_child(tag)`` in stock)."""
        return patch_config(self.cfg, callbacks=run_of(AsyncCallbackManagerForChainRun, self.manager,
                                                       self.run_id).get_child(tag))

    async def start(self, value: Any) -> None:
        if not self.streamed:
            self.run_manager = await self.manager.on_chain_start(None, value, name=self.name, run_id=self.run_id)
            return
        # Runnable._atransform_stream_with_config: the input is not known when a transform starts
        self.value_in = value
        self.run_manager = await self.manager.on_chain_start(None, {"input": ""}, run_type=None, name=self.name,
                                                             run_id=self.run_id, defers_inputs=False)

    async def end(self, value: Any, chunks: list[Any] | None = None) -> None:
        """End the run with ``value``; streamed, its ``chunks`` (default: the value) go out first."""
        run, self.run_manager = self.run_manager, None
        if run is None:
            return
        if not self.streamed:
            await run.on_chain_end(value)
            return
        await shims.tap_stream(run, [value] if chunks is None else chunks)
        await run.on_chain_end(value, inputs=self.value_in)

    async def fail(self, error: BaseException) -> None:
        run, self.run_manager = self.run_manager, None
        if run is not None:
            await run.on_chain_error(error)


def retriever_manager(retriever: Any, cfg: RunnableConfig, with_ls_params: bool = True) -> AsyncCallbackManager:
    """The callback manager ``BaseRetriever.ainvoke`` opens its run with (``with_ls_params=False``:
    without the LangSmith metadata, as retrievers overriding ``ainvoke`` open theirs)."""
    cfg = ensure_config(cfg)
    try:
        ls_params = shims.retriever_ls_params(retriever) if with_ls_params else {}
    except Exception:  # noqa: BLE001 - tracing metadata must never fail retrieval
        ls_params = {}
    return AsyncCallbackManager.configure(
        cfg.get("callbacks"),
        None,
        verbose=False,
        inheritable_tags=cfg.get("tags"),
        local_tags=retriever.tags,
        inheritable_metadata={**(cfg.get("metadata") or {}), **ls_params},
        local_metadata=retriever.metadata,
    )


async def start_retriever_run(retriever: Any, query: Any, cfg: RunnableConfig) -> Any:
    """Open a retriever run the way ``BaseRetriever.ainvoke`` does; returns its run manager."""
    manager, cfg = retriever_manager(retriever, cfg), ensure_config(cfg)
    return await manager.on_retriever_start(None, query, name=cfg.get("run_name") or retriever.get_name(),
                                            run_id=cfg.get("run_id"))


async def start_chain_run(runnable: Any, value: Any, cfg: RunnableConfig, name: str | None = None) -> Any:
    """Open a chain run for ``runnable`` (as ``Runnable._acall_with_config`` does)."""
    from langchain_core.runnables.config import get_async_callback_manager_for_config

    cfg = ensure_config(cfg)
    manager = get_async_callback_manager_for_config(cfg)
    return await manager.on_chain_start(None, value, name=name or cfg.get("run_name") or runnable.get_name(),
                                        run_id=cfg.pop("run_id", None))


async def reported(run_manager: Any, work: Awaitable[Any]) -> Any:
    """Await ``work`` and end ``run_manager``'s run (a chain's or a retriever's) with its value or its
    error, as stock ends a run around its own work; with no run (``None``) just await it."""
    if run_manager is None:
        return await work
    retriever = isinstance(run_manager, AsyncCallbackManagerForRetrieverRun)
    try:
        value = await work
    except BaseException as exc:
        await (run_manager.on_retriever_error if retriever else run_manager.on_chain_error)(exc)
        raise
    await (run_manager.on_retriever_end if retriever else run_manager.on_chain_end)(value)
    return value
