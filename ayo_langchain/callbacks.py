"""LangChain config and callback plumbing, done the way LangChain's own runnables do it.

The optimized runnable opens one chain run per input (like ``RunnableSequence``), and
every leaf the graph calls (prompt, model, parser, lambda, opaque step) runs under a
child config of that run, so user callbacks, tags, metadata and run names see the
same runs they see with the stock chain. Retrievers Ayo lowers to embed+search open
their retriever run here, exactly as ``BaseRetriever.ainvoke`` does.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManager
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, merge_configs, patch_config


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


async def start_retriever_run(retriever: Any, query: Any, cfg: RunnableConfig) -> Any:
    """Open a retriever run the way ``BaseRetriever.ainvoke`` does; returns its run manager."""
    cfg = ensure_config(cfg)
    try:
        ls_params = retriever._get_ls_params()
    except Exception:  # noqa: BLE001 - tracing metadata must never fail retrieval
        ls_params = {}
    manager = AsyncCallbackManager.configure(
        cfg.get("callbacks"),
        None,
        verbose=False,
        inheritable_tags=cfg.get("tags"),
        local_tags=retriever.tags,
        inheritable_metadata={**(cfg.get("metadata") or {}), **ls_params},
        local_metadata=retriever.metadata,
    )
    return await manager.on_retriever_start(None, query, name=cfg.get("run_name") or retriever.get_name())


async def start_chain_run(runnable: Any, value: Any, cfg: RunnableConfig, name: str | None = None) -> Any:
    """Open a chain run for ``runnable`` (as ``Runnable._acall_with_config`` does)."""
    from langchain_core.runnables.config import get_async_callback_manager_for_config

    cfg = ensure_config(cfg)
    manager = get_async_callback_manager_for_config(cfg)
    return await manager.on_chain_start(None, value, name=name or cfg.get("run_name") or runnable.get_name(),
                                        run_id=cfg.pop("run_id", None))
