"""``SentenceTransformerRerank`` with its cross-encoder serving concurrent queries in one forward pass.

Stock runs one ``CrossEncoder.predict`` per query (in ``aquery``: each in its own thread, all
contending for the same cores). Here the reranker's own ``postprocess_nodes`` /
``apostprocess_nodes`` still runs for each query, as stock calls it (its events, its scores
assigned to ``node.score``, ``keep_retrieval_score``, its sort and ``top_n`` cut); only the one
``predict`` call inside it goes to a :class:`~ayo_core.engines.batcher.CombiningBatcher` shared by
every query that uses the same model object: a lone query's call runs at once, and the calls of
queries that arrive while a pass runs are served together by one ``predict`` of the user's own
loaded model (``pp._model``; no second copy is loaded), each query getting its slice of the scores.

Opt-in (``Options(batch_cross_encoder=True)``): a merged pass pads to the longest pair of the batch
and runs kernels of another shape, so a score can differ from stock's in the last float bit (see
:mod:`ayo_core.engines.batcher`); by default the reranker runs alone per query, bit-identical.

The routing is a process-wide wrapt hook on ``CrossEncoder.predict`` (``ayo_shims``), inert unless the
calling context is an optimized query's rerank node naming that very model.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from llama_index.core.postprocessor import SentenceTransformerRerank
from llama_index.core.schema import NodeWithScore, QueryBundle

from ayo_core.engines.batcher import CombiningBatcher
from ayo_core.introspect import once, overridden, overrides_reason
from ayo_core.runtime.caller import call_stock
from ayo_shims import llamaindex as shim

log = logging.getLogger(__name__)

# (model, batcher) while a rerank node of an optimized query runs the reranker's own code; copied
# into the worker thread its predict runs in (asyncio.to_thread, and the caller's loop under aquery)
_ROUTE: contextvars.ContextVar[tuple[Any, CombiningBatcher] | None] = contextvars.ContextVar(
    "ayo_cross_encoder_route", default=None)
_BATCHERS: weakref.WeakKeyDictionary[Any, CombiningBatcher] = weakref.WeakKeyDictionary()
_BATCHERS_LOCK = threading.Lock()

NOTE = "CrossEncoder.predict batched across concurrent queries (one forward pass of the user's model)"


def not_batchable_reason(pp: Any) -> str:
    """Why ``pp``'s predict calls cannot be merged (``""``: they can)."""
    if over := overrides_reason(pp, SentenceTransformerRerank, shim.SBERT_RERANK_CALLED):
        return f"{over}: its predict calls are its own, run alone"
    model = shim.sbert_rerank_model(pp)
    cross_encoder = shim.cross_encoder_class()
    if not isinstance(model, cross_encoder):
        return f"its model is a {type(model).__name__}, not a sentence-transformers CrossEncoder: run alone"
    if over := overridden(model, cross_encoder, ("predict",)):
        return f"its {type(model).__name__} overrides {', '.join(over)}: run alone"
    return ""


def batcher_for(model: Any) -> CombiningBatcher:
    """The batcher every optimized query shares for ``model`` (one per model object, dropped with it)."""
    with _BATCHERS_LOCK:
        batcher = _BATCHERS.get(model)
        if batcher is None:
            batcher = _BATCHERS[model] = CombiningBatcher(f"{type(model).__name__}.predict")
        return batcher


def _predict(model: Any, wrapped: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``CrossEncoder.predict``: through the batcher when an optimized rerank node calls it as stock's
    ``_postprocess_nodes`` does (one list of pairs, no options); any other call runs as it is."""
    route = _ROUTE.get()
    if route is None or route[0] is not model or kwargs or len(args) != 1 or not isinstance(args[0], list):
        return wrapped(*args, **kwargs)
    return route[1].submit(args[0], wrapped)


@once
def install() -> None:
    shim.wrap_cross_encoder_predict(_predict)


def batched_step(pp: Any) -> Callable[..., Any]:
    """``async step(pp, nodes, query_bundle)``: the reranker as stock calls it, its predict merged."""
    install()
    model = shim.sbert_rerank_model(pp)
    batcher = batcher_for(model)

    async def step(pp: Any, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> list[NodeWithScore]:
        token = _ROUTE.set((model, batcher))  # this node task's context only
        try:
            return await call_stock(pp.postprocess_nodes, pp.apostprocess_nodes, nodes, query_bundle=query_bundle)
        finally:
            _ROUTE.reset(token)

    return step
