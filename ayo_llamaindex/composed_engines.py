"""Which stand-in a composed query engine (``SubQuestionQueryEngine``, ``RouterQueryEngine``,
``ToolRetrieverRouterQueryEngine``, ``RetrieverRouterQueryEngine``, ``TransformQueryEngine``) gets.

Above the lowerings (:mod:`ayo_llamaindex.sub_question`, :mod:`ayo_llamaindex.router`,
:mod:`ayo_llamaindex.tool_router`, :mod:`ayo_llamaindex.retriever_router`, :mod:`ayo_llamaindex.transform`),
which share their base classes from :mod:`ayo_llamaindex.composed` and never import each other.
:data:`COMPOSED_ENGINES` is the one table of them: :func:`optimize_composed` dispatches through it and
:mod:`ayo_llamaindex.coverage` writes their rows of ``docs/modules.md`` from it, so the two cannot disagree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from llama_index.core.query_engine import (
    RetrieverRouterQueryEngine,
    RouterQueryEngine,
    SubQuestionQueryEngine,
    ToolRetrieverRouterQueryEngine,
    TransformQueryEngine,
)

from ayo_llamaindex import retriever_router, router, sub_question, tool_router, transform
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_shims import llamaindex_engines as eng

log = logging.getLogger(__name__)


class ComposedEngine(NamedTuple):
    """A query engine class ``optimize`` hands to its own stand-in, and its row of ``docs/modules.md``."""

    base: type
    not_lowered_reason: Callable[[Any], str | None]  # why an object of it runs as the user's (None: lowered)
    build: Callable[..., Any]  # its stand-in: build(target, policy=..., options=...)
    mirrored: tuple[str, ...]
    template: str
    why: str


# optimize()'s order for a query engine (ayo_llamaindex.optimize -> optimize_composed): the composed
# engines first, the first class that matches in this order (none of them subclasses another), each with its
# own check, then capture_query_engine for any other. coverage.query_engine_row reads the same table.
COMPOSED_ENGINES: tuple[ComposedEngine, ...] = (
    ComposedEngine(SubQuestionQueryEngine, sub_question.not_lowered_reason,
                   sub_question.OptimizedSubQuestionQueryEngine, eng.SUBQ_MIRRORED,
                   "LLMCall (question_gen, streamed) -> ToolCall per sub-question -> Synthesis",
                   "each sub-question answered by its tool's engine (optimized) as soon as the generator's stream "
                   "completes it; a generator or synthesizer Ayo does not reproduce runs as the user's object in "
                   "its node"),
    ComposedEngine(RouterQueryEngine, router.not_lowered_reason,
                   router.OptimizedRouterQueryEngine, eng.ROUTER_MIRRORED,
                   "LLMCall (select) -> ToolCall (chosen engines) -> Synthesis",
                   "the selector's decode on Ayo's engine, the chosen engines (optimized) all at once, several "
                   "answers combined by its summarizer; a Pydantic*Selector (tool calling) runs as the user's "
                   "object in its node"),
    ComposedEngine(ToolRetrieverRouterQueryEngine, tool_router.not_lowered_reason,
                   tool_router.OptimizedToolRetrieverRouterQueryEngine, eng.TOOL_ROUTER_MIRRORED,
                   "Opaque (tool retriever) -> ToolCall (retrieved engines) -> Synthesis",
                   "the retrieved tools' engines (optimized) all at once (stock's sync query runs them one after "
                   "another), several answers combined by its summarizer, lowered; its ObjectRetriever runs as the "
                   "user's object in its node"),
    ComposedEngine(RetrieverRouterQueryEngine, retriever_router.not_lowered_reason,
                   retriever_router.OptimizedRetrieverRouterQueryEngine, eng.RETRIEVER_ROUTER_MIRRORED,
                   "Opaque (retriever) -> ToolCall (the node's engine)",
                   "the one retrieved node mapped to its engine by the user's node_to_query_engine_fn, that engine "
                   "optimized (its sync query on both paths, as stock's _aquery calls _query); the retriever runs "
                   "as the user's object in its node"),
    ComposedEngine(TransformQueryEngine, transform.not_lowered_reason,
                   transform.OptimizedTransformQueryEngine, eng.TRANSFORM_MIRRORED,
                   "LLMCall (HyDE) + query embedding -> ToolCall (the engine)",
                   "HyDEQueryTransform's decode on Ayo's engine (stock's async path blocks the caller's loop on it), "
                   "the original query embedded while it decodes (include_original=True), then the engine "
                   "optimized; another transform runs as the user's object in its node"),
)


def composed_engine(target: Any) -> ComposedEngine | None:
    """The first entry of :data:`COMPOSED_ENGINES` whose class ``target`` is an instance of (None: none)."""
    return next((composed for composed in COMPOSED_ENGINES if isinstance(target, composed.base)), None)


def optimize_composed(target: Any, policy: str, options: Any = None) -> Any | None:
    """The optimized stand-in for a ``SubQuestionQueryEngine``, ``RouterQueryEngine``,
    ``ToolRetrieverRouterQueryEngine``, ``RetrieverRouterQueryEngine`` or ``TransformQueryEngine``;
    None for other engines. A subclass that overrides their control flow runs as the user's object (in one
    opaque node, with a warning that says why)."""
    composed = composed_engine(target)
    if composed is None:
        return None
    reason = composed.not_lowered_reason(target)
    if reason is not None:
        log.warning("ayo_llamaindex.optimize: %s runs as the user's object (one opaque node, unoptimized): %s",
                    type(target).__name__, reason)
        return OptimizedQueryEngine(target, policy=policy, options=options)
    return composed.build(target, policy=policy, options=options)
