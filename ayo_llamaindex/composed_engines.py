"""Which stand-in a composed query engine (``SubQuestionQueryEngine``, ``RouterQueryEngine``,
``ToolRetrieverRouterQueryEngine``, ``RetrieverRouterQueryEngine``, ``TransformQueryEngine``) gets.

Above the lowerings (:mod:`ayo_llamaindex.sub_question`, :mod:`ayo_llamaindex.router`,
:mod:`ayo_llamaindex.tool_router`, :mod:`ayo_llamaindex.retriever_router`, :mod:`ayo_llamaindex.transform`),
which share their base classes from :mod:`ayo_llamaindex.composed` and never import each other.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.query_engine import (
    RetrieverRouterQueryEngine,
    RouterQueryEngine,
    SubQuestionQueryEngine,
    ToolRetrieverRouterQueryEngine,
    TransformQueryEngine,
)

from ayo_llamaindex import retriever_router, router, sub_question, tool_router, transform
from ayo_llamaindex.query_engine import OptimizedQueryEngine

log = logging.getLogger(__name__)


def optimize_composed(target: Any, policy: str, options: Any = None) -> Any | None:
    """The optimized stand-in for a ``SubQuestionQueryEngine``, ``RouterQueryEngine``,
    ``ToolRetrieverRouterQueryEngine``, ``RetrieverRouterQueryEngine`` or ``TransformQueryEngine``;
    None for other engines. A subclass that overrides their control flow runs as the user's object (in one
    opaque node, with a warning that says why)."""
    if isinstance(target, SubQuestionQueryEngine):
        reason, build = sub_question.not_lowered_reason(target), sub_question.OptimizedSubQuestionQueryEngine
    elif isinstance(target, RouterQueryEngine):
        reason, build = router.not_lowered_reason(target), router.OptimizedRouterQueryEngine
    elif isinstance(target, ToolRetrieverRouterQueryEngine):
        reason, build = tool_router.not_lowered_reason(target), tool_router.OptimizedToolRetrieverRouterQueryEngine
    elif isinstance(target, RetrieverRouterQueryEngine):
        reason = retriever_router.not_lowered_reason(target)
        build = retriever_router.OptimizedRetrieverRouterQueryEngine
    elif isinstance(target, TransformQueryEngine):
        reason, build = transform.not_lowered_reason(target), transform.OptimizedTransformQueryEngine
    else:
        return None
    if reason is not None:
        log.warning("ayo_llamaindex.optimize: %s runs as the user's object (one opaque node, unoptimized): %s",
                    type(target).__name__, reason)
        return OptimizedQueryEngine(target, policy=policy, options=options)
    return build(target, policy=policy, options=options)
