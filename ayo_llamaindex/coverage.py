"""What the LlamaIndex adapter makes of LlamaIndex's modules: the rows of ``docs/modules.md``.

Each row comes from the adapter's own decision for one object of the class: ``synthesis_mode`` on
the synthesizer ``get_response_synthesizer`` builds for every ``ResponseMode``,
``postprocessor_kind`` and ``LOCAL_TEMPLATES`` for every class ``llama_index.core.postprocessor``
exports, ``retriever_kind`` for ``llama_index.core.retrievers``, the composed engines'
``not_lowered_reason`` (from ``composed_engines.COMPOSED_ENGINES``, the table ``optimize`` dispatches
through, which holds their rows' text too) and ``capture_query_engine`` for ``llama_index.core.query_engine``, and
``recognize_chat_engine`` for ``llama_index.core.chat_engine``. A decision that reads only the type
runs on a :func:`~ayo_core.coverage.probe`; one that reads fields runs on a small real object
(``EXAMPLES``). What flips a state with the construction (``streaming=True``, a subclass overriding
a mirrored method) is in the row's "why", tried where the factory takes it as a keyword.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import llama_index.core.chat_engine as li_chat_engines
import llama_index.core.postprocessor as li_postprocessors
import llama_index.core.query_engine as li_query_engines
import llama_index.core.retrievers as li_retrievers
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import (
    RetrieverQueryEngine,
    TransformQueryEngine,
)
from llama_index.core.response_synthesizers import ResponseMode, get_response_synthesizer
from pydantic import BaseModel

from ayo_core.coverage import CoverageRow, exported_classes, probe, row
from ayo_core.modules import OPAQUE
from ayo_llamaindex import postprocess, wrapper_engines
from ayo_llamaindex.capture import PostprocessorPlan, RetrieverPlan, capture_query_engine, capture_synthesizer
from ayo_llamaindex.chat_engine_capture import MODES as CHAT_MODES
from ayo_llamaindex.chat_engine_capture import recognize_chat_engine
from ayo_llamaindex.composed_engines import composed_engine
from ayo_llamaindex.retrieval import retriever_kind
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

FRAMEWORK = "LlamaIndex"


class _Answer(BaseModel):
    """An ``output_cls`` to try on each synthesizer (structured output)."""

    answer: str


# get_response_synthesizer keywords that may keep a mode Ayo lowers opaque: each is tried on every mode
SYNTHESIZER_VARIANTS: tuple[dict[str, Any], ...] = (
    {"streaming": True}, {"output_cls": _Answer}, {"structured_answer_filtering": True})
# what a lowered mode becomes, by the mode synthesis_mode names (a mode missing here fails coverage())
SYNTHESIS_WHY = {
    "refine": "the refine chain mirrored call by call: every prompt and packing is LlamaIndex's own",
    "compact": "the synthesizer's own packing, then the refine chain mirrored call by call",
    "tree_summarize": "leaf summaries always concurrent (stock: only with use_async=True), then the next level",
    "simple_summarize": "one call over the truncated, joined chunks",
    "accumulate": "one call per chunk, all in flight at once (stock: one after another unless use_async=True)",
    "compact_accumulate": "the synthesizer's own packing, then one call per packed chunk, all in flight at once",
    "generation": "its one call (on the question alone, as stock) on Ayo's engine after retrieval",
    "no_text": "no LLM call: an empty answer with the retrieved nodes, in a local node",
    "context_only": "no LLM call: the retrieved chunks joined, in a local node",
}
POSTPROCESSOR_WHY = {
    "llm_rerank": "its batches' LLM calls all in flight at once on Ayo's engine (stock: one after another); "
                  "the batches, prompts and parsing are the reranker's own",
    "local": "local work: the user's object runs in one node of the graph (recognized through the MRO, so a "
             "subclass is a local node too)",
    "cross_encoder": "local work: the user's object runs in one node (LocalRerank); with "
                     "Options(batch_cross_encoder=True) the CrossEncoder.predict its own _postprocess_nodes makes "
                     "serves concurrent queries in one forward pass of the user's model (a score may then move in "
                     "its last float bit, so off by default); a subclass overriding its postprocess methods, or a "
                     "model overriding predict, runs alone",
    "structured_rerank": "its structured-output calls stay its LLM's own (function calling or a parsed "
                         "completion), in one node; under query() its batches' calls run together (stock: one "
                         "after another), under aquery() its own async path, concurrent as in stock",
}
RETRIEVER_WHY = {
    "vector": "the query embedded on Ayo's embedding engine (when it serves the embed model), then the search "
              "through the retriever's own store code",
    "fusion": "the query-generation decode streamed; each generated query retrieved as its line completes; "
              "the retriever's own fusion",
    "auto_merging": "its vector retriever lowered (the query embedded on Ayo's embedding engine), then the "
                    "retriever's own merging of the leaves into their parents; over another retriever it stays opaque",
    "recursive": "its root retriever lowered, then each level's links (IndexNodes to retrievers or query engines) "
                 "followed at once, the linked objects called as stock calls them (stock: one after another); "
                 "with verbose=True it runs as stock",
    "router": "its selector's decode (LLMSingleSelector / LLMMultiSelector: their prompt and parser) on Ayo's LLM "
              "engine, then the chosen retrievers lowered and run at once (stock's sync retrieve runs them one "
              "after another); a Pydantic selector runs as the user's object",
}
MIRRORED = {"llm_rerank": shim.RERANK_MIRRORED, "structured_rerank": shim.STRUCTURED_RERANK_MIRRORED, "vector": shim.VECTOR_RETRIEVER_MIRRORED,
            "auto_merging": shim.AUTO_MERGING_MIRRORED, "router": eng.ROUTER_RETRIEVER_MIRRORED,
            "recursive": eng.RECURSIVE_MIRRORED,
            "fusion": shim.FUSION_RETRIEVER_MIRRORED, "retriever_query_engine": shim.ENGINE_MIRRORED,
            "citation_query_engine": shim.CITATION_ENGINE_MIRRORED}
# what capture_query_engine's lowered kinds become (a kind missing here fails coverage())
ENGINE_ROWS = {
    "retriever_query_engine": ("Retrieval -> postprocessors -> Synthesis",
                               "its retriever, postprocessors and synthesizer captured one by one (their tables here)"),
    "citation_query_engine": ("Retrieval -> postprocessors -> citations -> Synthesis",
                              "its retriever, postprocessors and synthesizer captured one by one (their tables here); "
                              "the engine's own citation cut in a node between them. Opaque instead with "
                              "multimodal=True"),
}


CHAT_TEMPLATES = {  # by the mode recognize_chat_engine names (a mode missing here fails coverage())
    "condense_plus_context": "LLMCall (condense) -> Retrieval -> Synthesis(mode=compact)",
    "context": "Retrieval -> Synthesis(mode=compact)",
    "condense_question": "LLMCall (condense) -> the query engine's graph",
}


def coverage() -> list[CoverageRow]:
    """Every row of the LlamaIndex tables (see the module docstring)."""
    return [*synthesizer_rows(), *postprocessor_rows(), *retriever_rows(), *query_engine_rows(),
            *chat_engine_rows()]


def _subclass_note(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"a subclass overriding any of its {len(names)} mirrored methods ({shown}) stays opaque"


@contextlib.contextmanager
def _settings_llm() -> Iterator[Any]:
    """A ``MockLLM`` as ``Settings.llm`` while synthesizers are built: the factory builds ``NoText`` and
    ``ContextOnly`` from ``Settings.llm`` (OpenAI by default, which wants a key). The lazily resolved
    field itself is saved and restored: reading ``Settings.llm`` would resolve OpenAI."""
    from llama_index.core import Settings
    from llama_index.core.llms import MockLLM

    saved, llm = shim.settings_llm_field(), MockLLM()
    Settings.llm = llm
    try:
        yield llm
    finally:
        shim.restore_settings_llm_field(saved)


# -- response synthesizers ---------------------------------------------------------------------
def synthesizer_rows() -> list[CoverageRow]:
    """One row per ``ResponseMode``: the synthesizer the factory builds for it, captured."""
    rows = []
    with _settings_llm() as llm:
        for mode in ResponseMode:
            synth = get_response_synthesizer(response_mode=mode, llm=llm)
            plan = capture_synthesizer(synth)
            why = plan.reason if plan.mode is None else _lowered_synthesis_why(mode, plan.mode, llm)
            rows.append(row(FRAMEWORK, "response synthesizer modes", type(synth), plan.template, why,
                            case=f"response_mode={mode.value!r}"))
    return rows


def _lowered_synthesis_why(mode: ResponseMode, lowered_mode: str, llm: Any) -> str:
    flips = []
    for kwargs in SYNTHESIZER_VARIANTS:
        variant = capture_synthesizer(get_response_synthesizer(response_mode=mode, llm=llm, **kwargs))
        if variant.mode is None:
            flips.append(variant.reason)
    names = shim.SYNTHESIZER_MIRRORED[type(get_response_synthesizer(response_mode=mode, llm=llm)).__name__]
    return (f"{SYNTHESIS_WHY[lowered_mode]}. Opaque instead with {'; '.join(flips) or 'no keyword tried'}; "
            f"{_subclass_note(names)}")


# -- node postprocessors ------------------------------------------------------------------------
def postprocessor_rows() -> list[CoverageRow]:
    """One row per class ``llama_index.core.postprocessor`` exports."""
    rows = []
    for cls in exported_classes(li_postprocessors, BaseNodePostprocessor):
        pp = probe(cls)
        kind, reason = postprocess.postprocessor_kind(pp)
        if kind in ("local", "cross_encoder"):  # the registry read at call time, as the lowering reads it
            template = postprocess.LOCAL_TEMPLATES.find(pp).__name__
        else:
            template = PostprocessorPlan(pp, kind).template
        why = reason if kind == "opaque" else POSTPROCESSOR_WHY[kind]
        if kind in MIRRORED:
            why = f"{why}; {_subclass_note(MIRRORED[kind])}"
        rows.append(row(FRAMEWORK, "node postprocessors", cls, template, why))
    return rows


# -- retrievers ---------------------------------------------------------------------------------
def _auto_merging_retriever() -> Any:
    """A real ``AutoMergingRetriever`` over an empty index's vector retriever (mock embeddings)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    index = VectorStoreIndex(nodes=[], embed_model=MockEmbedding(embed_dim=8))
    return li_retrievers.AutoMergingRetriever(index.as_retriever(), index.storage_context)


def _recursive_retriever() -> Any:
    """A real ``RecursiveRetriever`` whose root is an empty index's vector retriever (mock embeddings)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    index = VectorStoreIndex(nodes=[], embed_model=MockEmbedding(embed_dim=8))
    return li_retrievers.RecursiveRetriever("root", retriever_dict={"root": index.as_retriever()})


RETRIEVER_EXAMPLES: dict[type, Callable[[], Any]] = {li_retrievers.AutoMergingRetriever: _auto_merging_retriever,
                                                     li_retrievers.RecursiveRetriever: _recursive_retriever}


def retriever_rows() -> list[CoverageRow]:
    """One row per retriever class ``llama_index.core.retrievers`` exports."""
    rows = []
    for cls in exported_classes(li_retrievers, BaseRetriever):
        kind, reason = retriever_kind(RETRIEVER_EXAMPLES[cls]() if cls in RETRIEVER_EXAMPLES else probe(cls))
        why = reason if kind == "opaque" else f"{RETRIEVER_WHY[kind]}; {_subclass_note(MIRRORED[kind])}"
        rows.append(row(FRAMEWORK, "retrievers", cls, RetrieverPlan(None, kind).template, why))
    return rows


# -- query engines ------------------------------------------------------------------------------
def _retriever_query_engine() -> Any:
    """A real ``RetrieverQueryEngine`` (an empty index, mock models): its capture reads its parts."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    with _settings_llm() as llm:
        index = VectorStoreIndex(nodes=[], embed_model=MockEmbedding(embed_dim=8))
        return index.as_query_engine(llm=llm)


def _hyde_query_engine() -> Any:
    """A real ``TransformQueryEngine`` with a ``HyDEQueryTransform`` over :func:`_retriever_query_engine`."""
    from llama_index.core.indices.query.query_transform import HyDEQueryTransform

    with _settings_llm() as llm:
        return TransformQueryEngine(_retriever_query_engine(), HyDEQueryTransform(llm=llm))


def _citation_query_engine() -> Any:
    """A real ``CitationQueryEngine`` (an empty index, mock models)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.query_engine import CitationQueryEngine

    with _settings_llm() as llm:
        index = VectorStoreIndex(nodes=[], embed_model=MockEmbedding(embed_dim=8))
        return CitationQueryEngine.from_args(index, llm=llm)


def _wrapper_engine(cls: type) -> Callable[[], Any]:
    """A real wrapping engine of ``cls`` (Retry*, MultiStep) over :func:`_retriever_query_engine`."""
    def build() -> Any:
        from llama_index.core.evaluation import GuidelineEvaluator, RelevancyEvaluator
        from llama_index.core.indices.query.query_transform import StepDecomposeQueryTransform

        with _settings_llm() as llm:
            inner = _retriever_query_engine()
            if cls is li_query_engines.MultiStepQueryEngine:
                return cls(inner, query_transform=StepDecomposeQueryTransform(llm=llm))
            if cls is li_query_engines.RetryGuidelineQueryEngine:
                return cls(inner, GuidelineEvaluator(llm=llm))
            if cls is li_query_engines.RetrySourceQueryEngine:
                return cls(inner, RelevancyEvaluator(llm=llm), llm=llm)
            return cls(inner, RelevancyEvaluator(llm=llm))

    return build


def _custom_query_engine() -> Any:
    """A ``CustomQueryEngine`` subclass as its docs write one: a field holding a query engine it calls."""
    class AskEngine(li_query_engines.CustomQueryEngine):
        engine: BaseQueryEngine

        def custom_query(self, query_str: str) -> Any:
            return self.engine.query(query_str)

    return AskEngine(engine=_retriever_query_engine())


# classes whose decision reads the object's fields: a small real one stands for the class
EXAMPLES: dict[type, Callable[[], Any]] = {RetrieverQueryEngine: _retriever_query_engine,
                                           TransformQueryEngine: _hyde_query_engine,
                                           li_query_engines.CitationQueryEngine: _citation_query_engine,
                                           li_query_engines.CustomQueryEngine: _custom_query_engine,
                                           **{cls: _wrapper_engine(cls) for cls in wrapper_engines.WRAPPERS}}
WRAPPER_WHY = ("its own loop (evaluate and retry, or decompose and answer: each step needs the last answer) "
               "runs as the user's code, a subclass's too; the engine it calls is optimized")
CUSTOM_WHY = ("its custom_query runs as the user's code; the query engines its fields hold are optimized (with no "
              "such field it runs as the user's object)")
SOURCES_AT_ONCE = ("; after a failed evaluation, its per-source evaluations (one LLM call each, one after another "
                   "in stock) run at once")


def query_engine_row(cls: type, engine: Any) -> CoverageRow:
    """What ``optimize`` makes of ``engine`` (an object of ``cls``)."""
    group = "query engines"
    if names := wrapper_engines.inner_engines(engine):
        inner = getattr(engine, names[0])
        inner_row = query_engine_row(type(inner), inner)
        at_once = wrapper_engines.evaluates_sources_at_once(engine)
        loop = "UserLoop[per-source evaluations at once]" if at_once else "UserLoop"
        base_why = CUSTOM_WHY if isinstance(engine, li_query_engines.CustomQueryEngine) else WRAPPER_WHY
        why = f"{base_why}{SOURCES_AT_ONCE if at_once else ''}"
        return row(FRAMEWORK, group, cls, f"{loop} -> ({inner_row.template})",
                   f"{why} (here a {type(inner).__name__}: {inner_row.state})")
    if composed := composed_engine(engine):  # optimize()'s own first choice for a query engine
        if reason := composed.not_lowered_reason(engine):
            return row(FRAMEWORK, group, cls, OPAQUE, reason)
        return row(FRAMEWORK, group, cls, composed.template, f"{composed.why}; {_subclass_note(composed.mirrored)}")
    plan = capture_query_engine(engine)
    if plan.kind == "opaque":
        return row(FRAMEWORK, group, cls, OPAQUE, plan.reason)
    template, why = ENGINE_ROWS[plan.kind]
    return row(FRAMEWORK, group, cls, template, f"{why}; {_subclass_note(MIRRORED[plan.kind])}")


def query_engine_rows() -> list[CoverageRow]:
    """One row per query engine class ``llama_index.core.query_engine`` exports."""
    return [query_engine_row(cls, EXAMPLES[cls]() if cls in EXAMPLES else probe(cls))
            for cls in exported_classes(li_query_engines, BaseQueryEngine)]


# -- chat engines -------------------------------------------------------------------------------
def chat_engine_rows() -> list[CoverageRow]:
    """One row per chat engine class ``llama_index.core.chat_engine`` exports."""
    mirrored = {mode: names for _cls, mode, names in CHAT_MODES}
    rows = []
    for cls in exported_classes(li_chat_engines, BaseChatEngine):
        mode, reason = recognize_chat_engine(probe(cls))
        if mode is None:
            rows.append(row(FRAMEWORK, "chat engines", cls, OPAQUE, f"optimize() returns it unchanged: {reason}"))
            continue
        why = f"chat_mode={mode!r} lowered turn by turn; the memory is the user's own object; {_subclass_note(mirrored[mode])}"
        if mode == "condense_question":
            why += "; a query engine that streams (streaming=True) keeps the engine the user's"
        rows.append(row(FRAMEWORK, "chat engines", cls, CHAT_TEMPLATES[mode], why))
    return rows
