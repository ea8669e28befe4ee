"""Ayo for LlamaIndex: ``fast = ayo_llamaindex.optimize(query_engine_or_function)``.

* a query engine (``index.as_query_engine(...)``, a hand-built ``RetrieverQueryEngine``,
  anything that is a ``BaseQueryEngine``) -> an :class:`OptimizedQueryEngine`: same
  ``query``/``aquery`` results, faster, plus ``explain()`` and ``last_trace``;
* a function in the document-QA pattern (indexes the documents it is given, then
  queries them) -> an :class:`OptimizedFunction` with the same signature, plus
  ``acall``, ``explain()`` and ``last_trace``.

``optimize`` never refuses and never changes a result: what Ayo cannot lower runs
as the user's own object (shown by ``explain()``).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["OptimizedFunction", "OptimizedQueryEngine", "optimize"]


def optimize(target: Any, policy: str = "critical_path") -> Any:
    """Return the optimized stand-in for a LlamaIndex query engine or a doc-QA function.

    ``policy`` names the engine schedulers' policy: ``critical_path`` (default),
    ``depth`` or ``fifo``.
    """
    from llama_index.core.base.base_query_engine import BaseQueryEngine

    if isinstance(target, BaseQueryEngine):
        from ayo_llamaindex.query_engine import OptimizedQueryEngine

        return OptimizedQueryEngine(target, policy=policy)
    if callable(target):
        from ayo_llamaindex.docqa import OptimizedFunction

        return OptimizedFunction(target, policy=policy)
    if type(target).__module__.startswith("llama_index."):
        # never refuse a LlamaIndex pipeline: what Ayo cannot optimize runs as it is
        log.warning("ayo_llamaindex.optimize: %s is neither a query engine nor a function; returned unchanged",
                    type(target).__name__)
        return target
    raise TypeError(f"ayo_llamaindex.optimize() takes a LlamaIndex query engine or a function, got "
                    f"{type(target).__name__}; for an index, pass index.as_query_engine(...)")


def __getattr__(name: str) -> Any:
    if name == "OptimizedQueryEngine":
        from ayo_llamaindex.query_engine import OptimizedQueryEngine

        return OptimizedQueryEngine
    if name == "OptimizedFunction":
        from ayo_llamaindex.docqa import OptimizedFunction

        return OptimizedFunction
    raise AttributeError(f"module 'ayo_llamaindex' has no attribute {name!r}")
