"""Node postprocessors: ``LLMRerank`` lowered to concurrent LLM calls, the rest called as-is.

``LLMRerank`` splits the nodes into ``choice_batch_size`` batches and asks the LLM about
each batch independently; stock ``query()`` asks one batch after another. Lowered
(``lowering.lower_postprocessor``, the core's ``Rerank`` template bound to its steps), every
batch's request is issued at once (the engine batches them), built by the reranker's
own ``_get_node_batches`` / ``_get_predict_kwargs`` / ``choice_select_prompt`` and parsed
by its own ``_parse_raw_response`` (``parse_choice_select_answer_fn``). Other
postprocessors (``SimilarityPostprocessor``, custom ones) run the user's object: their work is
local, and nothing about them is re-typed.

``SentenceTransformerRerank`` runs the user's object too, in one RERANK node. With
``Options(batch_cross_encoder=True)`` the one ``CrossEncoder.predict`` its own ``_postprocess_nodes``
makes is served together with the predicts of concurrent queries of the same model, in one forward
pass (``ayo_llamaindex.cross_encoder``); off by default, since a merged pass may change a score in
its last float bit. A subclass overriding its postprocess methods, or a model overriding
``predict``, runs alone.

``StructuredLLMRerank`` asks for structured output (its LLM's own program: function calling
or a parsed completion), so its calls stay the user's LLM's; but its sync path asks one batch
after another, and its async path all at once. Under ``query()`` Ayo runs the sync loop
step by step with the batches' calls in threads together (``structured_rerank``); under
``aquery()`` it awaits the reranker's own async path, as stock does.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llama_index.core.postprocessor import (
    AutoPrevNextNodePostprocessor,
    EmbeddingRecencyPostprocessor,
    FixedRecencyPostprocessor,
    KeywordNodePostprocessor,
    LLMRerank,
    LongContextReorder,
    MetadataReplacementPostProcessor,
    PrevNextNodePostprocessor,
    SentenceTransformerRerank,
    SimilarityPostprocessor,
    StructuredLLMRerank,
    TimeWeightedPostprocessor,
)
from llama_index.core.schema import NodeWithScore, QueryBundle

from ayo_core.introspect import overrides_reason
from ayo_core.modules import TypeDispatch
from ayo_core.runtime.caller import call_stock
from ayo_core.templates import LocalRerank, Transform
from ayo_shims import llamaindex as shim

_RERANK_MIRRORED = shim.RERANK_MIRRORED
# postprocessors whose work is local (run as the user's object in one node), by the template they lower to
LOCAL_TEMPLATES: TypeDispatch[type[Transform]] = TypeDispatch("local postprocessor")
LOCAL_TEMPLATES.register(SimilarityPostprocessor, KeywordNodePostprocessor, FixedRecencyPostprocessor,
                         MetadataReplacementPostProcessor, LongContextReorder, PrevNextNodePostprocessor,
                         AutoPrevNextNodePostprocessor, EmbeddingRecencyPostprocessor,
                         TimeWeightedPostprocessor)(Transform)
LOCAL_TEMPLATES.register(SentenceTransformerRerank)(LocalRerank)


def postprocessor_kind(pp: Any) -> tuple[str, str]:
    """``("llm_rerank" | "structured_rerank" | "cross_encoder" | "local" | "opaque", note)``.

    ``cross_encoder`` (a ``SentenceTransformerRerank``, subclasses too) is a local node whose predict
    may be batched across queries (``capture.capture_postprocessor`` decides, from the options)."""
    if isinstance(pp, LLMRerank):
        if over := overrides_reason(pp, LLMRerank, _RERANK_MIRRORED):
            return "opaque", over
        return "llm_rerank", ""
    if isinstance(pp, StructuredLLMRerank):
        if over := overrides_reason(pp, StructuredLLMRerank, shim.STRUCTURED_RERANK_MIRRORED):
            return "opaque", over
        return "structured_rerank", ""
    if isinstance(pp, SentenceTransformerRerank):
        return "cross_encoder", ""
    if LOCAL_TEMPLATES.find(pp) is not None:
        return "local", ""
    return "opaque", f"{type(pp).__name__} is a postprocessor Ayo does not lower (called as-is)"


async def local_postprocess(pp: Any, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> list[NodeWithScore]:
    """The user's postprocessor, as stock ``RetrieverQueryEngine`` calls it (``apostprocess_nodes`` in ``aquery``)."""
    return await call_stock(pp.postprocess_nodes, pp.apostprocess_nodes, nodes, query_bundle=query_bundle)


async def structured_rerank(pp: Any, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> list[NodeWithScore]:
    """``StructuredLLMRerank`` as stock runs it at this point, its batches' calls concurrent on the sync path."""
    sync = functools.partial(shim.structured_rerank, pp, run_all=run_together)
    return await call_stock(sync, pp.apostprocess_nodes, nodes, query_bundle=query_bundle)


def run_together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Every call at once, each in its own thread with the caller's context (the instrumentation's
    active span); results in order, or the first call's error in order (the one a sequential loop meets)."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="ayo-rerank") as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
    return [future.result() for future in futures]
