"""Ayo for LlamaIndex: ``fast = ayo_llamaindex.optimize(query_engine_or_function)``.

* a query engine (``index.as_query_engine(...)``, a hand-built ``RetrieverQueryEngine``,
  anything that is a ``BaseQueryEngine``) -> an :class:`OptimizedQueryEngine`: same
  ``query``/``aquery`` results, faster, plus ``explain()`` and ``last_trace``;
* a ``Workflow`` (a user's subclass, ``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``) -> an
  :class:`OptimizedWorkflow`: ``run(...)`` returns stock's handler (same result, events, ctx);
* a chat engine (``index.as_chat_engine(chat_mode="condense_plus_context" | "context" |
  "condense_question")`` or those classes built directly) -> an :class:`OptimizedChatEngine`: same
  ``chat``/``achat``/``stream_chat``/``astream_chat`` responses and memory, plus ``explain()``;
* a function in the document-QA pattern (indexes the documents it is given, then
  queries them) -> an :class:`OptimizedFunction` with the same signature, plus
  ``acall``, ``explain()`` and ``last_trace``.

``optimize`` never refuses and never changes a result: what Ayo cannot lower runs
as the user's own object (shown by ``explain()``).
"""

from __future__ import annotations

import logging
from typing import Any

from ayo_core.caller_code import running_ayo_code

log = logging.getLogger(__name__)

__all__ = ["OptimizedFunction", "OptimizedQueryEngine", "OptimizedWorkflow", "optimize"]


def optimize(target: Any, policy: str = "critical_path", *, options: Any = None) -> Any:
    """Return the optimized stand-in for a LlamaIndex query engine or a doc-QA function.

    ``policy`` names the engine schedulers' policy: ``critical_path`` (default),
    ``depth``, ``fifo`` or ``program``. ``options``, an :class:`ayo_core.pipeline.Options` (the knobs both
    adapters take), gives the policy instead, and the passes, timeout and in-flight limit too: for a
    query or chat engine, a doc-QA function, the engines a composed engine routes to, and the query
    engines a workflow's steps call; a workflow's own model calls take its policy and in-flight limit
    (its graph grows step by step: no passes, and stock's own ``timeout`` bounds a run). Optimizing an
    already optimized object optimizes its stock object again
    (same object back when the policy is the same and no options are given).
    """
    with running_ayo_code():  # capture is Ayo's time (ayo_core.caller_code)
        return _optimize(target, policy, options)


def _optimize(target: Any, policy: str, options: Any) -> Any:
    from llama_index.core.base.base_query_engine import BaseQueryEngine
    from llama_index.core.chat_engine.types import BaseChatEngine

    from ayo_llamaindex.chat_engine import OptimizedChatEngine, optimize_chat_engine
    from ayo_llamaindex.docqa import OptimizedFunction
    from ayo_llamaindex.query_engine import OptimizedQueryEngine
    from ayo_llamaindex.wrapper_engines import OptimizedWrapperEngine
    from ayo_shims import llamaindex as shim
    from ayo_shims import llamaindex_chat, llamaindex_engines, openai_sdk  # noqa: F401 - imported for their touchpoint declarations
    from ayo_shims.touchpoints import verify

    # a framework release that dropped an internal Ayo relies on fails here, naming it (once per process)
    verify(*shim.frameworks_in_use())
    if options is not None:
        policy = options.policy
    if isinstance(target, OptimizedQueryEngine | OptimizedFunction | OptimizedChatEngine | OptimizedWrapperEngine):
        # wrapping our own stand-in again would only add a layer (and a thread hop) per query
        same = target._policy == policy and options is None
        return target if same else optimize(target.stock, policy=policy, options=options)
    if isinstance(target, BaseQueryEngine):
        from ayo_llamaindex.composed_engines import optimize_composed  # SubQuestion / Router / Transform
        from ayo_llamaindex.wrapper_engines import optimize_wrapper  # Retry* / MultiStep: the inner engine

        return (optimize_composed(target, policy, options) or optimize_wrapper(target, policy, options)
                or OptimizedQueryEngine(target, policy=policy, options=options))
    if isinstance(target, BaseChatEngine):  # recognized modes are lowered; any other stays the user's
        return optimize_chat_engine(target, policy=policy, options=options)
    if (workflow := _optimize_workflow(target, policy, options)) is not None:
        return workflow
    if _is_llama_index_object(target):
        # a retriever, chat engine, index, ...: never refuse a LlamaIndex object (it runs as it is)
        log.warning("ayo_llamaindex.optimize: %s", unsupported_message(target))
        return target
    if callable(target):
        return OptimizedFunction(target, policy=policy, options=options)
    raise TypeError(f"ayo_llamaindex.optimize() takes a LlamaIndex query engine or a function, got "
                    f"{type(target).__name__}; for an index, pass index.as_query_engine(...)")


# Packages of the LlamaIndex ecosystem whose objects optimize() returns unchanged rather than refusing:
# Workflow lives in `workflows` (llama-index-workflows), re-exported as llama_index.core.workflow
_LLAMA_INDEX_PACKAGES = ("llama_index", "llama_index_instrumentation", "workflows")


def _optimize_workflow(target: Any, policy: str, options: Any) -> Any:
    """A Workflow (or agent) run by Ayo; the user's object back (with a warning) when Ayo leaves it;
    None for anything that is not a Workflow."""
    from workflows import Workflow

    from ayo_llamaindex.workflow import OptimizedWorkflow, unrecognized_reason

    if isinstance(target, OptimizedWorkflow):
        same = target._policy == policy and options is None
        return target if same else OptimizedWorkflow(target.stock, policy=policy, options=options)
    if not isinstance(target, Workflow):
        return None
    if reason := unrecognized_reason(target):
        log.warning("ayo_llamaindex.optimize: %s is returned unchanged (it runs as stock, unoptimized): %s",
                    type(target).__name__, reason)
        return target
    return OptimizedWorkflow(target, policy=policy, options=options)


def _is_llama_index_object(target: Any) -> bool:
    # the class or any base (a user's subclass of BaseRetriever is still a LlamaIndex object)
    return any(getattr(cls, "__module__", "").split(".")[0] in _LLAMA_INDEX_PACKAGES
               for cls in type(target).__mro__[:-1])


def _fixes() -> tuple[tuple[type, str], ...]:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.chat_engine.types import BaseChatEngine
    from llama_index.core.indices.base import BaseIndex

    return (
        (BaseRetriever, "a retriever: pass RetrieverQueryEngine.from_args(retriever, llm=...) (or "
                        "index.as_query_engine(...)) to optimize() and call .retrieve()/.query() on the result"),
        (BaseChatEngine, "a chat engine Ayo does not lower: Ayo lowers chat_mode='condense_plus_context', "
                         "'context' and 'condense_question' engines (unmodified); pass one of those"),
        (BaseIndex, "an index: pass index.as_query_engine(...) to optimize()"),
    )


def unsupported_message(target: Any, why: str = "") -> str:
    """What ``optimize`` says about a LlamaIndex object it returns unchanged: what it is, and the fix."""
    what = why or next((fix for base, fix in _fixes() if isinstance(target, base)),
                "not a query engine or a function: pass a query engine (index.as_query_engine(...)) or a "
                "function that builds and queries one")
    return f"{type(target).__name__} is returned unchanged (it runs as stock, unoptimized): it is {what}"


def __getattr__(name: str) -> Any:
    if name == "OptimizedQueryEngine":
        from ayo_llamaindex.query_engine import OptimizedQueryEngine

        return OptimizedQueryEngine
    if name == "OptimizedFunction":
        from ayo_llamaindex.docqa import OptimizedFunction

        return OptimizedFunction
    if name == "OptimizedWorkflow":
        from ayo_llamaindex.workflow import OptimizedWorkflow

        return OptimizedWorkflow
    raise AttributeError(f"module 'ayo_llamaindex' has no attribute {name!r}")
