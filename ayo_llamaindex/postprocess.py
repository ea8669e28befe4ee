"""Node postprocessors: ``LLMRerank`` lowered to concurrent LLM calls, the rest called as-is.

``LLMRerank`` splits the nodes into ``choice_batch_size`` batches and asks the LLM about
each batch independently; stock ``query()`` asks one batch after another. Lowered
(``lowering.lower_postprocessor``, the core's ``Rerank`` template bound to its steps), every
batch's request is issued at once (the engine batches them), built by the reranker's
own ``_get_node_batches`` / ``_get_predict_kwargs`` / ``choice_select_prompt`` and parsed
by its own ``_parse_raw_response`` (``parse_choice_select_answer_fn``). Other
postprocessors (``SimilarityPostprocessor``, ``SentenceTransformerRerank``, custom
ones) run the user's object: their work is local, and nothing about them is re-typed.
"""

from __future__ import annotations

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
    """``("llm_rerank" | "local" | "opaque", note)``."""
    if isinstance(pp, LLMRerank):
        if over := overrides_reason(pp, LLMRerank, _RERANK_MIRRORED):
            return "opaque", over
        return "llm_rerank", ""
    if LOCAL_TEMPLATES.find(pp) is not None:
        return "local", ""
    return "opaque", f"{type(pp).__name__} is a postprocessor Ayo does not lower (called as-is)"


async def local_postprocess(pp: Any, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> list[NodeWithScore]:
    """The user's postprocessor, as stock ``RetrieverQueryEngine`` calls it (``apostprocess_nodes`` in ``aquery``)."""
    return await call_stock(pp.postprocess_nodes, pp.apostprocess_nodes, nodes, query_bundle=query_bundle)
