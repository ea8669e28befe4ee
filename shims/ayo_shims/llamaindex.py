"""Every LlamaIndex internal ``ayo_llamaindex`` touches: private attributes, private methods, wrapt hooks.

Each function below is the one place one internal is reached; the ``declare`` next to it
records the touchpoint with the versions it was checked on and a check that fails when an
installed version no longer has it (``touchpoints.verify`` runs the checks from
``ayo_llamaindex.optimize()``). The adapter calls these functions and never reads a
framework object's underscore attribute itself.

Most LlamaIndex classes here are plain classes whose private state is assigned in
``__init__`` (no class attribute to look for): :func:`assigns` checks the constructors'
source for the assignment instead. Integrations that are optional (the OpenAI LLM, the
HuggingFace embedding, the Chroma store) are verified once they are imported (see
:func:`frameworks_in_use`): until then no object of theirs exists for Ayo to touch, and
importing them only to check them would cost ``optimize()`` seconds (torch).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ayo_shims.llamaindex_versions import (  # noqa: F401 - re-exported: the names the adapter reads here
    CHROMA,
    CHROMA_CHECKED,
    CORE,
    CORE_CHECKED,
    FRAMEWORKS,
    HF_EMBED,
    HF_EMBED_CHECKED,
    INSTRUMENTATION,
    INSTRUMENTATION_CHECKED,
    OPENAI_LLM,
    OPENAI_LLM_CHECKED,
    SBERT,
    SBERT_CHECKED,
    mirrored,
)
from ayo_shims.touchpoints import all_of, declare, has_attr, has_private_attr, importable


def frameworks_in_use() -> tuple[str, ...]:
    """The frameworks whose touchpoints ``optimize()`` verifies now: the core ones and every optional
    integration already imported (a later ``optimize()`` verifies one imported since)."""
    return tuple(name for name, module in FRAMEWORKS.items() if module is None or module in sys.modules)


# -- check builders for this module --------------------------------------------------------

def assigns(module: str, qualname: str, *attrs: str) -> Callable[[], None]:
    """Check: some ``__init__`` in the MRO of ``module.qualname`` assigns ``self.<attr>`` for each of ``attrs``
    (instance state of a plain class: the class itself has no attribute to look for)."""
    def check() -> None:
        cls = getattr(importlib.import_module(module), qualname)
        sources = []
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is not None and getattr(klass, "__module__", "").startswith("llama_index"):
                sources.append(inspect.getsource(init))
        text = "\n".join(sources)
        missing = [a for a in attrs if not re.search(rf"\bself\.{re.escape(a)}\s*(:[^=\n]*)?=", text)]
        if missing:
            raise AttributeError(f"{module}.{qualname}.__init__ no longer assigns {', '.join(missing)}")
    return check


_Q = "llama_index.core.query_engine"
_RETRIEVERS = "llama_index.core.indices.vector_store.retrievers"
_FUSION = "llama_index.core.retrievers"
_SYNTH = "llama_index.core.response_synthesizers"
_INDEX = "llama_index.core.indices.vector_store.base"
_LLM = "llama_index.core.llms.llm"
_OPENAI = "llama_index.llms.openai"
_HF = "llama_index.embeddings.huggingface"


# -- query engines -------------------------------------------------------------------------

declare(f"{_Q}.RetrieverQueryEngine._retriever/_node_postprocessors/_response_synthesizer", framework=CORE,
        checked=CORE_CHECKED, why="capture walks the query engine into its retriever, postprocessors and synthesizer",
        check=assigns(_Q, "RetrieverQueryEngine", "_retriever", "_node_postprocessors", "_response_synthesizer"))


def engine_retriever(query_engine: Any) -> Any:
    return query_engine._retriever


def engine_postprocessors(query_engine: Any) -> list[Any]:
    return query_engine._node_postprocessors


def engine_synthesizer(query_engine: Any) -> Any:
    return query_engine._response_synthesizer


_CITATION = f"{_Q}.citation_query_engine"
declare(f"{_CITATION}.CitationQueryEngine._retriever/_node_postprocessors/_response_synthesizer/_multimodal",
        framework=CORE, checked=CORE_CHECKED,
        why="capture walks the citation engine into its retriever, postprocessors and synthesizer, and reads "
            "whether it cites multimodal blocks",
        check=assigns(_CITATION, "CitationQueryEngine", "_retriever", "_node_postprocessors",
                      "_response_synthesizer", "_multimodal"))
declare(f"{_CITATION}.CitationQueryEngine._create_citation_nodes", framework=CORE, checked=CORE_CHECKED,
        why="the lowered citation engine cuts the retrieved nodes into numbered sources with the engine's own method",
        check=has_attr(_CITATION, "CitationQueryEngine", "_create_citation_nodes"))


declare("llama_index.core.retrievers.auto_merging_retriever.AutoMergingRetriever._vector_retriever/_try_merging",
        framework=CORE, checked=CORE_CHECKED,
        why="the auto-merging retriever's vector retriever is lowered, then its own merging runs on the nodes",
        check=all_of(assigns("llama_index.core.retrievers.auto_merging_retriever", "AutoMergingRetriever",
                             "_vector_retriever"),
                     has_attr("llama_index.core.retrievers.auto_merging_retriever", "AutoMergingRetriever",
                              "_try_merging")))


def auto_merging_vector_retriever(retriever: Any) -> Any:
    return retriever._vector_retriever


def auto_merge(retriever: Any, nodes: list[Any]) -> list[Any]:
    """``AutoMergingRetriever._retrieve`` after its vector retrieval: merge until nothing changes, then sort."""
    cur_nodes, is_changed = retriever._try_merging(nodes)
    while is_changed:
        cur_nodes, is_changed = retriever._try_merging(cur_nodes)
    cur_nodes.sort(key=lambda x: x.get_score(), reverse=True)
    return cur_nodes


def citation_multimodal(query_engine: Any) -> bool:
    return bool(query_engine._multimodal)


def citation_nodes(query_engine: Any, nodes: list[Any]) -> list[Any]:
    """The engine's numbered citation sources (``Source 1: ...``) for the retrieved nodes."""
    return query_engine._create_citation_nodes(nodes)


declare("llama_index.core.prompts.mixin.PromptMixin._get_prompt_modules", framework=CORE, checked=CORE_CHECKED,
        why="the optimized query engine reports the stock engine's prompt modules (get_prompts/update_prompts)",
        check=has_attr("llama_index.core.prompts.mixin", "PromptMixin", "_get_prompt_modules"))


def prompt_modules(obj: Any) -> Any:
    return obj._get_prompt_modules()


declare("llama_index.core.settings._Settings._llm", framework=CORE, checked=CORE_CHECKED,
        why="the coverage table builds synthesizers under a MockLLM and restores the lazily resolved field: "
        "reading Settings.llm itself would resolve the default OpenAI LLM, which wants a key",
        check=has_attr("llama_index.core.settings", "_Settings", "_llm"))


def settings_llm_field() -> Any:
    """``Settings``' unresolved LLM field (``None`` until something reads ``Settings.llm``)."""
    from llama_index.core import Settings
    return Settings._llm


def restore_settings_llm_field(value: Any) -> None:
    from llama_index.core import Settings
    Settings._llm = value


declare("llama_index.core.base.base_query_engine.BaseQueryEngine._query/_aquery", framework=CORE, checked=CORE_CHECKED,
        why="OptimizedQueryEngine implements these abstract methods; an opaque engine's own run inside the span "
        "Ayo's engine already opened",
        check=has_attr("llama_index.core.base.base_query_engine", "BaseQueryEngine", "_query", "_aquery"))


def engine_query_methods(query_engine: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The stock engine's ``_query`` and ``_aquery`` without their dispatcher spans."""
    return without_span(query_engine._query), without_span(query_engine._aquery)


def engine_spanned_query_methods(query_engine: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The stock engine's ``_query`` and ``_aquery`` as they are, each opening its own span (a
    wrapping engine's stand-in delegates to them when an outer engine calls its ``_query``)."""
    return query_engine._query, query_engine._aquery


# -- retrievers ----------------------------------------------------------------------------

declare(f"{_RETRIEVERS}.VectorIndexRetriever._embed_model/_vector_store", framework=CORE, checked=CORE_CHECKED,
        why="the query embedding runs on Ayo's embedding engine for the retriever's own model; explain() names the store",
        check=assigns(_RETRIEVERS, "VectorIndexRetriever", "_embed_model", "_vector_store"))


def retriever_embed_model(retriever: Any) -> Any:
    return retriever._embed_model


def retriever_vector_store(retriever: Any) -> Any:
    return retriever._vector_store


declare(f"{_RETRIEVERS}.VectorIndexRetriever._needs_embedding/_get_nodes_with_embeddings", framework=CORE,
        checked=CORE_CHECKED, why="retrieval is split into embed (Ayo's engine) and the retriever's own search",
        check=has_attr(_RETRIEVERS, "VectorIndexRetriever", "_needs_embedding", "_get_nodes_with_embeddings"))


def needs_embedding(retriever: Any) -> bool:
    return retriever._needs_embedding()


def search_with_embedding(retriever: Any, query_bundle: Any) -> list[Any]:
    """``VectorIndexRetriever._get_nodes_with_embeddings`` (the bundle already holds its embedding)."""
    return retriever._get_nodes_with_embeddings(query_bundle)


declare("llama_index.core.base.base_retriever.BaseRetriever._handle_recursive_retrieval/_check_callback_manager",
        framework=CORE, checked=CORE_CHECKED,
        why="the tail of BaseRetriever.retrieve (recursive nodes) and its callback-manager set-up, called, not copied",
        check=has_attr("llama_index.core.base.base_retriever", "BaseRetriever", "_handle_recursive_retrieval",
                       "_check_callback_manager"))


def handle_recursive_retrieval(retriever: Any, query_bundle: Any, nodes: list[Any]) -> list[Any]:
    return retriever._handle_recursive_retrieval(query_bundle, nodes)


def check_callback_manager(retriever: Any) -> None:
    retriever._check_callback_manager()


declare("llama_index.core.callbacks.base.global_stack_trace", framework=CORE, checked=CORE_CHECKED,
        why="a split event's nodes run in contexts of their own: the callback events a node starts take their parent "
            "from this stack, so the node puts the open event on it, as stock's `with callback_manager.event(...)` does",
        check=importable("llama_index.core.callbacks.base", "global_stack_trace"))


def callback_stack() -> Any:
    """The context variable holding the open callback events' ids, innermost last."""
    from llama_index.core.callbacks.base import global_stack_trace

    return global_stack_trace


@contextlib.contextmanager
def callback_parent(event_id: str) -> Iterator[None]:
    """Callback events started in the block nest under ``event_id`` (unless it is already the innermost)."""
    var = callback_stack()
    stack = var.get()
    if stack and stack[-1] == event_id:
        yield
        return
    token = var.set([*stack, event_id])
    try:
        yield
    finally:
        var.reset(token)


declare(f"{_FUSION}.QueryFusionRetriever._retrievers/_llm/_verbose", framework=CORE, checked=CORE_CHECKED,
        why="capture of query expansion (its sub-retrievers and LLM); verbose keeps the decode running to the end",
        check=assigns(_FUSION, "QueryFusionRetriever", "_retrievers", "_llm", "_verbose"))


def fusion_retrievers(retriever: Any) -> list[Any]:
    return retriever._retrievers


def fusion_llm(retriever: Any) -> Any:
    return retriever._llm


def retriever_verbose(retriever: Any) -> bool:
    return retriever._verbose


declare(f"{_FUSION}.QueryFusionRetriever._reciprocal_rerank_fusion/_relative_score_fusion/_simple_fusion",
        framework=CORE, checked=CORE_CHECKED, why="the retriever's own fusion of the expanded queries' results",
        check=has_attr(_FUSION, "QueryFusionRetriever", "_reciprocal_rerank_fusion", "_relative_score_fusion",
                       "_simple_fusion"))


def reciprocal_rerank_fusion(retriever: Any, results: dict[Any, list[Any]]) -> list[Any]:
    return retriever._reciprocal_rerank_fusion(results)


def relative_score_fusion(retriever: Any, results: dict[Any, list[Any]], dist_based: bool = False) -> list[Any]:
    if dist_based:
        return retriever._relative_score_fusion(results, dist_based=True)
    return retriever._relative_score_fusion(results)


def simple_fusion(retriever: Any, results: dict[Any, list[Any]]) -> list[Any]:
    return retriever._simple_fusion(results)


# -- response synthesizers -----------------------------------------------------------------

declare(f"{_SYNTH}.base.BaseSynthesizer._llm/_streaming/_output_cls/_multimodal/_prompt_helper/_empty_response",
        framework=CORE, checked=CORE_CHECKED,
        why="which synthesizers Ayo mirrors, and the LLM / prompt helper / empty answer the mirror uses",
        check=assigns(f"{_SYNTH}.base", "BaseSynthesizer", "_llm", "_streaming", "_output_cls", "_multimodal",
                      "_prompt_helper", "_empty_response"))


def synth_llm(synth: Any) -> Any:
    return synth._llm


def synth_streaming(synth: Any) -> bool:
    return synth._streaming


def synth_output_cls(synth: Any) -> Any:
    return getattr(synth, "_output_cls", None)


def synth_multimodal(synth: Any) -> bool:
    return synth._multimodal


def synth_prompt_helper(synth: Any) -> Any:
    return synth._prompt_helper


def synth_empty_response(synth: Any) -> str:
    return synth._empty_response


declare(f"{_SYNTH}.base.BaseSynthesizer._prepare_response_output", framework=CORE, checked=CORE_CHECKED,
        why="the stock Response is built by the synthesizer's own code", check=has_attr(
            f"{_SYNTH}.base", "BaseSynthesizer", "_prepare_response_output"))


def prepare_response_output(synth: Any, response_str: Any, nodes: list[Any]) -> Any:
    return synth._prepare_response_output(response_str, nodes)


declare(f"{_SYNTH}.Refine._text_qa_template/_refine_template/_structured_answer_filtering/_program_factory/"
        "_verbose/_response_padding_size", framework=CORE, checked=CORE_CHECKED,
        why="compact/refine are mirrored with the synthesizer's own templates and packing",
        check=assigns(_SYNTH, "Refine", "_text_qa_template", "_refine_template", "_structured_answer_filtering",
                      "_program_factory", "_verbose", "_response_padding_size"))
declare(f"{_SYNTH}.TreeSummarize._summary_template/_verbose, SimpleSummarize._text_qa_template", framework=CORE,
        checked=CORE_CHECKED, why="tree_summarize/simple_summarize are mirrored with the synthesizer's own templates",
        check=all_of(assigns(_SYNTH, "TreeSummarize", "_summary_template", "_verbose"),
                     assigns(_SYNTH, "SimpleSummarize", "_text_qa_template")))


def text_qa_template(synth: Any) -> Any:
    return synth._text_qa_template


def refine_template(synth: Any) -> Any:
    return synth._refine_template


def summary_template(synth: Any) -> Any:
    return synth._summary_template


def synth_verbose(synth: Any) -> bool:
    return synth._verbose


def response_padding_size(synth: Any) -> int:
    return synth._response_padding_size


def structured_answer_filtering(synth: Any) -> bool:
    return synth._structured_answer_filtering


declare(f"{_SYNTH}.Refine._default_program_factory", framework=CORE, checked=CORE_CHECKED,
        why="a Refine with a custom program factory stays opaque (the mirror assumes DefaultRefineProgram)",
        check=has_attr(_SYNTH, "Refine", "_default_program_factory"))


def has_default_program_factory(synth: Any) -> bool:
    from llama_index.core.response_synthesizers import Refine

    return getattr(synth._program_factory, "__func__", None) is Refine._default_program_factory


declare(f"{_SYNTH}.CompactAndRefine._make_compact_text_chunks", framework=CORE, checked=CORE_CHECKED,
        why="compact mode packs chunks with the synthesizer's own code",
        check=has_attr(_SYNTH, "CompactAndRefine", "_make_compact_text_chunks"))


def make_compact_text_chunks(synth: Any, query_str: str, chunks: Iterable[str]) -> list[str]:
    return synth._make_compact_text_chunks(query_str, chunks)


declare(f"{_SYNTH}.Accumulate._text_qa_template/_make_prompt_kwargs/_format_response", framework=CORE,
        checked=CORE_CHECKED, why="accumulate/compact_accumulate are mirrored with the synthesizer's own template, "
        "per-call prompt kwargs and answer format",
        check=all_of(assigns(_SYNTH, "Accumulate", "_text_qa_template"),
                     has_attr(_SYNTH, "Accumulate", "_make_prompt_kwargs", "_format_response")))


def accumulate_prompt_kwargs(synth: Any, chunk: str) -> dict[str, Any]:
    return synth._make_prompt_kwargs(chunk)


def accumulate_format(synth: Any, outputs: list[Any], separator: str) -> str:
    return synth._format_response(outputs, separator)


declare(f"{_SYNTH}.Generation._input_prompt", framework=CORE, checked=CORE_CHECKED,
        why="generation is mirrored with the synthesizer's own template (its one call takes only the question)",
        check=assigns(_SYNTH, "Generation", "_input_prompt"))


def refine_program(synth: Any, template: Any) -> Any:
    """The program ``Refine`` makes for one step (``DefaultRefineProgram``: its span is opened on it)."""
    return synth._program_factory(template)


def generation_template(synth: Any) -> Any:
    return synth._input_prompt


# -- node postprocessors (LLMRerank) --------------------------------------------------------

declare("llama_index.core.postprocessor.LLMRerank._get_node_batches/_get_predict_kwargs/_parse_raw_response",
        framework=CORE, checked=CORE_CHECKED, why="LLM reranking is split into its own batches, prompts and parsing",
        check=has_attr("llama_index.core.postprocessor", "LLMRerank", "_get_node_batches", "_get_predict_kwargs",
                       "_parse_raw_response"))


def rerank_node_batches(postprocessor: Any, nodes: list[Any]) -> list[list[Any]]:
    return postprocessor._get_node_batches(nodes)


def rerank_predict_kwargs(postprocessor: Any, batch: list[Any], query_str: str) -> dict[str, Any]:
    return postprocessor._get_predict_kwargs(batch, query_str)


def rerank_parse(postprocessor: Any, raw_response: str, batch: list[Any]) -> list[Any]:
    return postprocessor._parse_raw_response(raw_response, batch)


_STRUCTURED_RERANK = "llama_index.core.postprocessor.structured_llm_rerank"
STRUCTURED_RERANK_MIRRORED = mirrored(_STRUCTURED_RERANK, "StructuredLLMRerank", (
    "postprocess_nodes", "_postprocess_nodes", "_rerank_start_event", "_get_node_batches", "_get_predict_kwargs",
    "_reranking_event_payload", "_parse_batch_result", "_sort_and_truncate"),
    why="StructuredLLMRerank's sync loop is mirrored with its batches' calls concurrent")
declare(f"{_STRUCTURED_RERANK} dispatcher", framework=CORE, checked=CORE_CHECKED,
        why="the mirrored StructuredLLMRerank loop sends its ReRankEndEvent through the module's own dispatcher",
        check=has_attr("llama_index.core.postprocessor", "structured_llm_rerank", "dispatcher"))


def structured_rerank(postprocessor: Any, nodes: list[Any], query_bundle: Any,
                      run_all: Callable[[list[Callable[[], Any]]], list[Any]]) -> list[Any]:
    """``StructuredLLMRerank._postprocess_nodes`` step by step, its batches' ``structured_predict`` calls
    handed together to ``run_all`` (which returns their results in order) instead of made one by one."""
    from llama_index.core.callbacks import CBEventType, EventPayload
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent

    pp = postprocessor
    pp._rerank_start_event(nodes, query_bundle)
    if query_bundle is None:
        raise ValueError("Query bundle must be provided.")
    if len(nodes) == 0:
        return []
    batches = pp._get_node_batches(nodes)
    with pp.callback_manager.event(CBEventType.RERANKING,
                                   payload=pp._reranking_event_payload(nodes, query_bundle)) as event:
        calls = [functools.partial(pp.llm.structured_predict, **pp._get_predict_kwargs(b, query_bundle.query_str))
                 for b in batches]
        initial: list[Any] = []
        for batch_idx, (result, batch) in enumerate(zip(run_all(calls), batches, strict=True)):
            initial.extend(pp._parse_batch_result(result, batch, batch_idx))
        reranked = pp._sort_and_truncate(initial)
        event.on_end(payload={EventPayload.NODES: reranked})
    importlib.import_module(_STRUCTURED_RERANK).dispatcher.event(ReRankEndEvent(nodes=reranked))
    return reranked


# -- node postprocessors (SentenceTransformerRerank) -------------------------------------------

_SBERT_RERANK = "llama_index.core.postprocessor.sbert_rerank"
declare(f"{_SBERT_RERANK}.SentenceTransformerRerank._model", framework=CORE, checked=CORE_CHECKED,
        why="the reranker's loaded CrossEncoder is the model whose predict batches the pairs of concurrent queries",
        check=has_private_attr(_SBERT_RERANK, "SentenceTransformerRerank", "_model"))
# its own code runs (events, scores, sort, cut); only the predict it calls is served merged: a subclass
# overriding one of these may call predict otherwise, so it runs alone as before
SBERT_RERANK_CALLED = mirrored(_SBERT_RERANK, "SentenceTransformerRerank", (
    "postprocess_nodes", "_postprocess_nodes", "apostprocess_nodes", "_apostprocess_nodes"),
    why="its own _postprocess_nodes runs; the CrossEncoder.predict it calls serves concurrent queries in one "
        "forward pass")
_CROSS_ENCODER = "sentence_transformers"  # the public name: the class's own module moved between releases
declare(f"{_CROSS_ENCODER}.CrossEncoder.predict (wrapt)", framework=SBERT, checked=SBERT_CHECKED,
        why="a SentenceTransformerRerank's predict call inside an optimized query joins the pairs of concurrent "
            "queries in one call (inert elsewhere)",
        check=has_attr(_CROSS_ENCODER, "CrossEncoder", "predict"))


def sbert_rerank_model(postprocessor: Any) -> Any:
    """The ``CrossEncoder`` a ``SentenceTransformerRerank`` loaded (None when it has none)."""
    return getattr(postprocessor, "_model", None)


def cross_encoder_class() -> type:
    from sentence_transformers import CrossEncoder

    return CrossEncoder


def wrap_cross_encoder_predict(hook: Callable[[Any, Callable[..., Any], tuple, dict], Any]) -> None:
    """``CrossEncoder.predict`` calls go through ``hook(model, wrapped, args, kwargs)``, which calls
    ``wrapped(*args, **kwargs)`` itself for the calls it leaves alone (call once per process)."""
    import wrapt

    def predict(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return hook(instance, wrapped, args, kwargs)

    wrapt.wrap_function_wrapper(cross_encoder_class(), "predict", predict)


# -- indexes -------------------------------------------------------------------------------

declare(f"{_INDEX}.VectorStoreIndex._insert_batch_size/_store_nodes_override/_embed_model/_show_progress",
        framework=CORE, checked=CORE_CHECKED,
        why="deferred ingest mirrors _add_nodes_to_index (batching, docstore rule, embed model, progress flag)",
        check=assigns(_INDEX, "VectorStoreIndex", "_insert_batch_size", "_store_nodes_override", "_embed_model",
                      "_show_progress"))


def index_insert_batch_size(index: Any) -> int:
    return index._insert_batch_size


def index_stores_nodes_override(index: Any) -> bool:
    return index._store_nodes_override


def index_show_progress(index: Any) -> bool:
    return bool(index._show_progress)


def index_embed_model(index: Any) -> Any:
    return index._embed_model


declare(f"{_INDEX}.VectorStoreIndex._build_index_from_nodes/_insert (wrapt)", framework=CORE, checked=CORE_CHECKED,
        why="doc-QA tracing: index builds and inserts inside an optimized call defer their vectors into the query graph",
        check=has_attr(_INDEX, "VectorStoreIndex", "_build_index_from_nodes", "_insert"))


def wrap_index_writes(build: Callable[..., Any], insert: Callable[..., Any]) -> None:
    """Process-wide wrapt wrappers ``(wrapped, instance, args, kwargs)`` around the index's two write paths."""
    import wrapt
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

    wrapt.wrap_function_wrapper(VectorStoreIndex, "_build_index_from_nodes", build)
    wrapt.wrap_function_wrapper(VectorStoreIndex, "_insert", insert)


declare("llama_index.core.base.base_query_engine.BaseQueryEngine.query/aquery (wrapt)", framework=CORE,
        checked=CORE_CHECKED, why="doc-QA tracing: a query inside an optimized call runs as one Ayo graph",
        check=has_attr("llama_index.core.base.base_query_engine", "BaseQueryEngine", "query", "aquery"))


declare("llama_index.core.extractors.interface.BaseExtractor.aprocess_nodes (wrapt)", framework=CORE,
        checked=CORE_CHECKED, why="inside an optimized call, an extractor's model calls go through Ayo's engine",
        check=has_attr("llama_index.core.extractors.interface", "BaseExtractor", "aprocess_nodes"))
declare(f"{_OPENAI}.OpenAI._achat (wrapt)", framework=OPENAI_LLM, checked=OPENAI_LLM_CHECKED,
        why="the SDK call inside achat, under the stock events: where an extractor's request is sent by Ayo",
        check=has_attr(_OPENAI, "OpenAI", "_achat"))


def wrap_extraction(aprocess_nodes: Callable[..., Any], achat: Callable[..., Any]) -> None:
    """wrapt wrappers around ``BaseExtractor.aprocess_nodes`` (every extractor's entry, sync ones through
    ``asyncio_run``) and ``OpenAI._achat`` (the SDK call inside ``achat``, under the stock events)."""
    import wrapt
    from llama_index.core.extractors.interface import BaseExtractor
    from llama_index.llms.openai import OpenAI

    wrapt.wrap_function_wrapper(BaseExtractor, "aprocess_nodes", aprocess_nodes)
    wrapt.wrap_function_wrapper(OpenAI, "_achat", achat)


def wrap_query_calls(query: Callable[..., Any] | None, aquery: Callable[..., Any]) -> None:
    """wrapt wrappers around ``BaseQueryEngine.query`` (none when ``query`` is None) and ``aquery``."""
    import wrapt
    from llama_index.core.base.base_query_engine import BaseQueryEngine

    if query is not None:
        wrapt.wrap_function_wrapper(BaseQueryEngine, "query", query)
    wrapt.wrap_function_wrapper(BaseQueryEngine, "aquery", aquery)


declare("llama_index.core.base.base_retriever.BaseRetriever.aretrieve (wrapt)", framework=CORE,
        checked=CORE_CHECKED, why="a retrieval a workflow step awaits runs as Ayo's lowered retrieval",
        check=has_attr("llama_index.core.base.base_retriever", "BaseRetriever", "aretrieve"))


def wrap_aretrieve_calls(aretrieve: Callable[..., Any]) -> None:
    import wrapt
    from llama_index.core.base.base_retriever import BaseRetriever

    wrapt.wrap_function_wrapper(BaseRetriever, "aretrieve", aretrieve)


_STORE_METHODS = ("add", "delete", "query")
_STORE_WHY = "access to a store with pending deferred vectors waits for them first (a barrier)"
declare("llama_index.core.vector_stores.simple.SimpleVectorStore.add/delete/query/... (wrapt)", framework=CORE,
        checked=CORE_CHECKED, why=_STORE_WHY,
        check=has_attr("llama_index.core.vector_stores.simple", "SimpleVectorStore", *_STORE_METHODS))
declare("llama_index.vector_stores.chroma.ChromaVectorStore.add/delete/query/... (wrapt)", framework=CHROMA,
        checked=CHROMA_CHECKED, why=_STORE_WHY,
        check=has_attr("llama_index.vector_stores.chroma", "ChromaVectorStore", *_STORE_METHODS))


def wrap_store_methods(store_type: type, names: Iterable[str], wrapper: Callable[..., Any]) -> None:
    """Wrap those of ``names`` that ``store_type`` defines itself."""
    import wrapt

    for name in names:
        if name in vars(store_type):
            wrapt.wrap_function_wrapper(store_type, name, wrapper)


# -- callbacks and instrumentation ---------------------------------------------------------

declare("llama_index.core.callbacks.CallbackManager.on_event_start/on_event_end (wrapt)", framework=CORE,
        checked=CORE_CHECKED, why="a speculative synthesis records LlamaIndex's own callback events to replay them",
        check=has_attr("llama_index.core.callbacks", "CallbackManager", "on_event_start", "on_event_end"))


def wrap_callback_events(start: Callable[..., Any], end: Callable[..., Any]) -> None:
    import wrapt
    from llama_index.core.callbacks import CallbackManager

    wrapt.wrap_function_wrapper(CallbackManager, "on_event_start", start)
    wrapt.wrap_function_wrapper(CallbackManager, "on_event_end", end)


def wrap_dispatcher_spans(enter: Callable[..., Any], other: Callable[..., Any]) -> None:
    """``enter`` around ``Dispatcher.span_enter``, ``other`` around its ``span_exit``, ``span_drop`` and ``event``."""
    import wrapt
    from llama_index_instrumentation.dispatcher import Dispatcher

    wrapt.wrap_function_wrapper(Dispatcher, "span_enter", enter)
    for name in ("span_exit", "span_drop", "event"):
        wrapt.wrap_function_wrapper(Dispatcher, name, other)


declare("llama_index_instrumentation.dispatcher.DISPATCHER_SPAN_DECORATED_ATTR", framework=INSTRUMENTATION,
        checked=INSTRUMENTATION_CHECKED,
        why="Ayo's delegating methods are marked so DispatcherSpanMixin opens no second span around them",
        check=importable("llama_index_instrumentation.dispatcher", "DISPATCHER_SPAN_DECORATED_ATTR"))
declare("llama_index_instrumentation dispatcher spans are wrapt.BoundFunctionWrapper (__wrapped__)",
        framework=INSTRUMENTATION, checked=f"{INSTRUMENTATION_CHECKED}; wrapt 2.x (checked 2.5.2)",
        why="a stock method whose span Ayo's own method opened is called without it",
        check=all_of(importable("wrapt", "BoundFunctionWrapper"),
                     has_attr("llama_index_instrumentation.dispatcher", "Dispatcher", "span")))


declare("llama_index_instrumentation active_span_id/active_instrument_tags, SpanDropEvent", framework=INSTRUMENTATION,
        checked=INSTRUMENTATION_CHECKED,
        why="Ayo opens the spans of the steps it does itself as the dispatcher's span decorator opens them",
        check=all_of(has_attr("llama_index_instrumentation", "span", "active_span_id"),
                     has_attr("llama_index_instrumentation", "dispatcher", "active_instrument_tags",
                              "DISPATCHER_SPAN_DECORATED_ATTR"),
                     has_attr("llama_index_instrumentation.dispatcher", "Dispatcher", "span_enter", "span_exit",
                              "span_drop"),
                     importable("llama_index.core.instrumentation.events.span", "SpanDropEvent")))


# embedding classes whose _aget_query_embedding encodes through their own _get_query_embedding (a span more)
_ASYNC_QUERY_EMBEDDING_CALLS_SYNC = ("HuggingFaceEmbedding",)
declare(f"{_HF}.HuggingFaceEmbedding._aget_query_embedding calls _get_query_embedding", framework=HF_EMBED,
        checked=HF_EMBED_CHECKED, why="the spans Ayo opens for a query embedding under aquery() are stock's",
        check=has_attr(_HF, "HuggingFaceEmbedding", "_aget_query_embedding", "_get_query_embedding"))


def query_embedding_span_names(model: Any, is_async: bool) -> list[str]:
    """The spans one ``get_query_embedding`` (``aget_query_embedding``) of ``model`` opens, outermost first."""
    if not is_async:
        return ["get_query_embedding", "_get_query_embedding"]
    names = ["aget_query_embedding", "_aget_query_embedding"]
    if any(c.__name__ in _ASYNC_QUERY_EMBEDDING_CALLS_SYNC for c in type(model).__mro__):
        names.append("_get_query_embedding")
    return names


def active_span_id() -> Any:
    from llama_index_instrumentation.span import active_span_id as var

    return var


def active_instrument_tags() -> Any:
    from llama_index_instrumentation.dispatcher import active_instrument_tags as var

    return var


def span_drop_event(span_id: str, err_str: str) -> Any:
    from llama_index.core.instrumentation.events.span import SpanDropEvent

    return SpanDropEvent(span_id=span_id, err_str=err_str)


declare("llama_index.core.base.base_retriever.BaseRetriever._aretrieve", framework=CORE, checked=CORE_CHECKED,
        why="a retriever that keeps the base _aretrieve runs its sync _retrieve under aretrieve(): its spans say so",
        check=has_attr("llama_index.core.base.base_retriever", "BaseRetriever", "_aretrieve"))


def aretrieve_calls_sync_retrieve(retriever: Any) -> bool:
    """Whether ``retriever``'s class keeps ``BaseRetriever._aretrieve`` (which calls ``self._retrieve``)."""
    from llama_index.core.base.base_retriever import BaseRetriever

    return type(retriever)._aretrieve is BaseRetriever._aretrieve


def is_spanned(fn: Any) -> bool:
    """``fn`` (a class's own attribute) is a concrete method the dispatcher's span decorator wraps."""
    from llama_index_instrumentation.dispatcher import DISPATCHER_SPAN_DECORATED_ATTR

    return fn is not None and not getattr(fn, "__isabstractmethod__", False) and \
        bool(getattr(fn, DISPATCHER_SPAN_DECORATED_ATTR, False))


def mark_spanned_elsewhere(method: Callable[..., Any]) -> Callable[..., Any]:
    from llama_index_instrumentation.dispatcher import DISPATCHER_SPAN_DECORATED_ATTR

    setattr(method, DISPATCHER_SPAN_DECORATED_ATTR, True)
    return method


def without_span(bound: Any) -> Any:
    """``bound`` (a method of a user object) minus the dispatcher span (a wrapt wrapper) around it."""
    import wrapt

    if isinstance(bound, wrapt.BoundFunctionWrapper) and getattr(bound, "__self__", None) is not None:
        return bound.__wrapped__.__get__(bound.__self__)
    return bound


# -- LLMs ----------------------------------------------------------------------------------

declare(f"{_LLM}.LLM._get_messages/_get_prompt/_parse_output/_log_template_data", framework=CORE,
        checked=CORE_CHECKED, why="requests are built, and predict events emitted, by the LLM's own predict code",
        check=has_attr(_LLM, "LLM", "_get_messages", "_get_prompt", "_parse_output", "_log_template_data"))


def llm_messages(llm: Any, prompt: Any, **prompt_args: Any) -> list[Any]:
    return llm._get_messages(prompt, **prompt_args)


def llm_prompt(llm: Any, prompt: Any, **prompt_args: Any) -> str:
    return llm._get_prompt(prompt, **prompt_args)


def llm_parse_output(llm: Any, text: str) -> str:
    return llm._parse_output(text)


def llm_log_template_data(llm: Any, prompt: Any, **prompt_args: Any) -> None:
    llm._log_template_data(prompt, **prompt_args)


declare(f"{_OPENAI}.OpenAI._use_chat_completions/_get_model_kwargs/_update_max_tokens/_get_client",
        framework=OPENAI_LLM, checked=OPENAI_LLM_CHECKED,
        why="the request body, endpoint and SDK errors come from the OpenAI LLM's own code",
        check=has_attr(_OPENAI, "OpenAI", "_use_chat_completions", "_get_model_kwargs", "_update_max_tokens",
                       "_get_client"))


def uses_chat_completions(llm: Any) -> bool:
    return llm._use_chat_completions({})


def model_kwargs(llm: Any, **kwargs: Any) -> dict[str, Any]:
    return llm._get_model_kwargs(**kwargs)


def update_max_tokens(llm: Any, kwargs: dict[str, Any], prompt: str) -> None:
    llm._update_max_tokens(kwargs, prompt)


def sdk_client(llm: Any) -> Any:
    """The openai SDK client the LLM builds (and caches) for itself."""
    return llm._get_client()


declare(f"{_OPENAI}.OpenAI._client/_aclient/_http_client/_async_http_client", framework=OPENAI_LLM,
        checked=OPENAI_LLM_CHECKED, why="an LLM given its own (httpx or openai) client may point elsewhere: opaque",
        check=has_private_attr(_OPENAI, "OpenAI", "_client", "_aclient", "_http_client", "_async_http_client"))


def user_http_clients(llm: Any) -> tuple[Any, Any]:
    return getattr(llm, "_http_client", None), getattr(llm, "_async_http_client", None)


def cached_sdk_clients(llm: Any) -> tuple[Any, Any]:
    return getattr(llm, "_client", None), getattr(llm, "_aclient", None)


# -- embeddings ----------------------------------------------------------------------------

declare(f"{_HF}.HuggingFaceEmbedding._model/_device/_parallel_process", framework=HF_EMBED,
        checked=HF_EMBED_CHECKED, why="Ayo's embedding engine loads the same sentence-transformers model with the "
        "same options (a multi-process model stays opaque)",
        check=has_private_attr(_HF, "HuggingFaceEmbedding", "_model", "_device", "_parallel_process"))


def sentence_transformer(embed_model: Any) -> Any:
    return embed_model._model


def embedding_device(embed_model: Any) -> Any:
    return getattr(embed_model, "_device", "cpu")


def embedding_parallel_process(embed_model: Any) -> bool:
    return getattr(embed_model, "_parallel_process", False)


# -- methods whose stock behaviour Ayo mirrors ----------------------------------------------
# ``ayo_llamaindex`` reproduces what these methods do (or calls them at its own time); a user
# subclass overriding one stays opaque (``ayo_core.introspect.overridden`` compares them by identity). A
# release that renames one would make the mirror stale without anyone noticing: declared here.

ENGINE_MIRRORED = mirrored(_Q, "RetrieverQueryEngine", (
    "query", "aquery", "_query", "_aquery", "retrieve", "aretrieve", "synthesize", "asynthesize",
    "_apply_node_postprocessors", "_async_apply_node_postprocessors"),
    why="the query engine's control flow is lowered to a graph")
CITATION_ENGINE_MIRRORED = mirrored(_CITATION, "CitationQueryEngine", (
    "query", "aquery", "_query", "_aquery", "retrieve", "aretrieve"),
    why="the citation engine's control flow is lowered to a graph (its own _create_citation_nodes runs in a node)")
VECTOR_RETRIEVER_MIRRORED = mirrored(_RETRIEVERS, "VectorIndexRetriever", (
    "retrieve", "_retrieve", "_get_nodes_with_embeddings", "_build_vector_store_query",
    "_handle_recursive_retrieval", "_needs_embedding"), why="retrieval is split into embed + search")
_AUTO_MERGING = "llama_index.core.retrievers.auto_merging_retriever"
AUTO_MERGING_MIRRORED = mirrored(_AUTO_MERGING, "AutoMergingRetriever", (
    "retrieve", "aretrieve", "_retrieve", "_aretrieve", "_handle_recursive_retrieval"),
    why="the vector retrieval inside is lowered; the retriever's own merging runs on its nodes")
FUSION_RETRIEVER_MIRRORED = mirrored(_FUSION, "QueryFusionRetriever", (
    "retrieve", "_retrieve", "_get_queries", "_aget_queries", "_run_sync_queries", "_run_nested_async_queries",
    "_handle_recursive_retrieval", "_simple_fusion", "_reciprocal_rerank_fusion", "_relative_score_fusion"),
    why="query expansion is a streamed decode feeding the retrievals, then the retriever's own fusion")
_SYNTH_RESPONSE = ("get_response", "aget_response", "synthesize", "asynthesize")
_REFINE_LOOP = ("_run_refine_loop", "_arun_refine_loop", "_update_response", "_aupdate_response")
SYNTHESIZER_MIRRORED = {  # class name -> methods
    "SimpleSummarize": mirrored(_SYNTH, "SimpleSummarize", _SYNTH_RESPONSE, why="simple_summarize is mirrored"),
    "TreeSummarize": mirrored(_SYNTH, "TreeSummarize", _SYNTH_RESPONSE, why="tree_summarize is mirrored"),
    "Refine": mirrored(_SYNTH, "Refine", _SYNTH_RESPONSE[:2] + _REFINE_LOOP + _SYNTH_RESPONSE[2:],
                       why="refine is mirrored call by call"),
    "CompactAndRefine": mirrored(_SYNTH, "CompactAndRefine", _SYNTH_RESPONSE[:2] + ("_make_compact_text_chunks",)
                                 + _REFINE_LOOP + _SYNTH_RESPONSE[2:], why="compact is mirrored call by call"),
    "Accumulate": mirrored(_SYNTH, "Accumulate", _SYNTH_RESPONSE + ("_give_responses",),
                           why="accumulate is mirrored call by call (the calls concurrent)"),
    "CompactAndAccumulate": mirrored(f"{_SYNTH}.compact_and_accumulate", "CompactAndAccumulate", _SYNTH_RESPONSE + ("_give_responses",),
                                     why="compact_accumulate is mirrored call by call (the calls concurrent)"),
    "Generation": mirrored(_SYNTH, "Generation", _SYNTH_RESPONSE, why="generation is mirrored (its one call)"),
    "NoText": mirrored(f"{_SYNTH}.no_text", "NoText", _SYNTH_RESPONSE, why="no_text is mirrored (no call)"),
    "ContextOnly": mirrored(f"{_SYNTH}.context_only", "ContextOnly", _SYNTH_RESPONSE, why="context_only is mirrored (no call)"),
}
RERANK_MIRRORED = mirrored("llama_index.core.postprocessor", "LLMRerank", (
    "postprocess_nodes", "_postprocess_nodes", "_get_node_batches", "_get_predict_kwargs", "_parse_raw_response"),
    why="LLM reranking is split into batched prefill/decode calls")
INDEX_MIRRORED = mirrored(_INDEX, "VectorStoreIndex", (
    "build_index_from_nodes", "_build_index_from_nodes", "_insert", "insert_nodes", "_add_nodes_to_index",
    "_async_add_nodes_to_index", "_get_node_with_embedding", "as_retriever"),
    why="doc-QA defers an index's vector writes into the query graph")
LLM_REQUEST_MIRRORED = mirrored(_OPENAI, "OpenAI", (
    "predict", "apredict", "complete", "acomplete", "chat", "achat", "_chat", "_achat",
    "_complete", "_acomplete", "_get_model_kwargs", "_get_messages", "_get_prompt",
    "_extend_prompt", "_extend_messages", "_parse_output", "_update_max_tokens",
    "_use_chat_completions", "metadata"), framework=OPENAI_LLM, checked=OPENAI_LLM_CHECKED,
    why="Ayo sends the request the LLM would send, built by its own methods")
EMBEDDING_MIRRORED = mirrored(_HF, "HuggingFaceEmbedding", (
    "_embed", "_embed_with_retry", "_get_query_embedding", "_aget_query_embedding", "_get_text_embedding",
    "_get_text_embeddings", "_aget_text_embedding", "_aget_text_embeddings", "get_query_embedding",
    "get_text_embedding_batch", "get_agg_embedding_from_queries"), framework=HF_EMBED, checked=HF_EMBED_CHECKED,
    why="Ayo's embedding engine computes the vectors the model's own methods would")


# the Workflow touchpoints and the OpenAI-compatible embedding ones (remote embedding servers) live in
# their own modules (which import only llamaindex_versions); importing them declares them with this adapter's
from ayo_shims import llamaindex_embeddings, llamaindex_workflows  # noqa: E402,F401
