"""The standard LlamaIndex modules Ayo lowers (``docs/modules.md``), each on the real vLLM server at 64-token
answers: stock first, then Ayo's stand-in of the same pipeline built again, the answer text and source nodes
compared exactly (``assert_same``).

Their offline tests (``test_wrapper_engines_offline.py``, ``test_structured_rerank_offline.py``,
``test_auto_merging_offline.py``, ``test_recursive_retriever_offline.py``, ``test_tool_router_offline.py``,
``test_cross_encoder_rerank_offline.py``, ...) check spans, events and concurrency against a fake server whose
answers are a few words; a difference late in a real decode, or in a module's parsing of a real model's
output, shows only here. Each pipeline is built as its offline test (or LlamaIndex's docs) builds it, with
``OpenAILike`` at ``max_tokens=64``, ``temperature=0.0``. Every test also checks the stand-in is really lowered
(its ``explain()`` or type), so it fails if Ayo silently falls back to running the module opaque.

One question per module, one query per side (a wrapper engine makes several LLM calls inside it): the file
runs in the default suite (CI's 2-core machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from llama_index.core import Document, Settings, StorageContext, VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.evaluation import RelevancyEvaluator
from llama_index.core.indices.query.query_transform import StepDecomposeQueryTransform
from llama_index.core.node_parser import (
    HierarchicalNodeParser,
    SentenceSplitter,
    SentenceWindowNodeParser,
    get_leaf_nodes,
)
from llama_index.core.objects import ObjectIndex
from llama_index.core.postprocessor import (
    KeywordNodePostprocessor,
    LongContextReorder,
    MetadataReplacementPostProcessor,
    PrevNextNodePostprocessor,
    SentenceTransformerRerank,
    StructuredLLMRerank,
)
from llama_index.core.query_engine import (
    CustomQueryEngine,
    MultiStepQueryEngine,
    RetrieverQueryEngine,
    RetryQueryEngine,
    RetrySourceQueryEngine,
    ToolRetrieverRouterQueryEngine,
)
from llama_index.core.retrievers import AutoMergingRetriever, RecursiveRetriever
from llama_index.core.schema import IndexNode
from llama_index.core.tools import QueryEngineTool

import ayo_llamaindex
from ayo_core.models import embedding_model_path
from ayo_core.pipeline import Options
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.tool_router import OptimizedToolRetrieverRouterQueryEngine
from ayo_llamaindex.wrapper_engines import OptimizedWrapperEngine
from tests.ayo_llamaindex.li_helpers import TEXTS, assert_same
from tests.ayo_llamaindex.test_accumulate_llm import make_llm

pytestmark = pytest.mark.llm
QUESTION = "Explain in detail how to serialize a Python object to JSON and read it back."
MIN_WORDS = 64 // 3  # a 64-token answer has at least this many words: the model did not stop early
DOCS = {"serialization": [TEXTS[0], TEXTS[5]], "containers": [TEXTS[2], TEXTS[3]]}


@pytest.fixture(scope="module", autouse=True)
def settings_llm(llm_url: str) -> Any:
    """The real LLM in ``Settings`` (restored after): as LlamaIndex's docs set it, for the parts a module
    builds from it (MultiStepQueryEngine's synthesizer)."""
    old = Settings._llm  # noqa: SLF001 - restored below
    Settings.llm = make_llm(llm_url)
    yield Settings.llm
    Settings._llm = old  # noqa: SLF001


def outcome(run: Callable[[], RESPONSE_TYPE]) -> tuple[str, Any]:
    """``("ok", response)`` or ``("error", exception)``: for the modules whose parse of a small model's
    output may fail (then Ayo must fail as stock does)."""
    try:
        return "ok", run()
    except Exception as exc:  # noqa: BLE001 - compared with stock's
        return "error", exc


def same_answer(stock: BaseQueryEngine, fast: Any, by: str = "id", long: bool = True) -> RESPONSE_TYPE:
    """Stock's answer first, then Ayo's: the same text and source nodes. ``long``: the answer is a long decode."""
    want = stock.query(QUESTION)
    assert_same(want, fast.query(QUESTION), by=by)
    if long:
        assert len(str(want).split()) >= MIN_WORDS, f"the model stopped early: {str(want)!r}"
    return want


def same_outcome(stock: BaseQueryEngine, fast: Any, by: str = "id") -> tuple[str, Any]:
    """Stock first, then Ayo: both answer (the same) or both raise the same error type and message."""
    want = outcome(lambda: stock.query(QUESTION))
    got = outcome(lambda: fast.query(QUESTION))
    assert got[0] == want[0], f"stock: {want[1]!r}, Ayo: {got[1]!r}"
    if want[0] == "ok":
        assert_same(want[1], got[1], by=by)
    else:
        assert type(got[1]) is type(want[1]) and str(got[1]) == str(want[1])
    return want


def lowered_text(fast: Any) -> str:
    """``explain()`` of a stand-in that Ayo lowered with nothing left opaque."""
    explained = fast.explain()
    assert isinstance(fast, OptimizedQueryEngine) and fast.plan.kind != "opaque", str(explained)
    assert explained.opaque == [], str(explained)
    return str(explained)


def assert_wrapper_lowered(fast: Any) -> None:
    """A wrapping engine: its own loop runs as the user's code, every engine it calls lowered."""
    assert isinstance(fast, OptimizedWrapperEngine), type(fast)
    for inner in fast.inners.values():
        assert isinstance(inner, OptimizedQueryEngine) and inner.plan.kind != "opaque", str(inner.explain())


def rag(index: VectorStoreIndex, url: str, top_k: int = 2, **kw: Any) -> RetrieverQueryEngine:
    return index.as_query_engine(llm=make_llm(url), similarity_top_k=top_k, **kw)


# ---- engines wrapping another (their loop is the user's code) -------------------------------------------


def multistep(index: VectorStoreIndex, url: str) -> MultiStepQueryEngine:
    transform = StepDecomposeQueryTransform(llm=make_llm(url), verbose=False)
    return MultiStepQueryEngine(rag(index, url), query_transform=transform,
                                index_summary="Python standard library docs", num_steps=1)


def test_multistep_query_engine(llm_url: str, index: VectorStoreIndex) -> None:
    """One step (its decomposition, the inner engine's answer), then its final synthesis: three calls a side."""
    stock, fast = multistep(index, llm_url), ayo_llamaindex.optimize(multistep(index, llm_url))
    assert_wrapper_lowered(fast)
    same_answer(stock, fast, by="content")  # the step notes are new nodes per call


def test_retry_query_engine(llm_url: str, index: VectorStoreIndex) -> None:
    def build() -> RetryQueryEngine:
        return RetryQueryEngine(rag(index, llm_url), RelevancyEvaluator(llm=make_llm(llm_url)), max_retries=1)

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert_wrapper_lowered(fast)
    same_answer(stock, fast)


def test_retry_source_query_engine(llm_url: str, index: VectorStoreIndex) -> None:
    def build() -> RetrySourceQueryEngine:
        return RetrySourceQueryEngine(rag(index, llm_url), RelevancyEvaluator(llm=make_llm(llm_url)),
                                      llm=make_llm(llm_url), max_retries=1)

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert_wrapper_lowered(fast)
    same_answer(stock, fast, by="content")  # a source retry indexes its sources anew


class Answering(CustomQueryEngine):
    """A ``CustomQueryEngine`` as its docs write one: a field holding the engine its ``custom_query`` calls."""

    engine: BaseQueryEngine

    def custom_query(self, query_str: str) -> RESPONSE_TYPE:
        return self.engine.query(f"{query_str} Answer for a beginner.")

    async def acustom_query(self, query_str: str) -> RESPONSE_TYPE:
        return await self.engine.aquery(f"{query_str} Answer for a beginner.")


def test_custom_query_engine(llm_url: str, index: VectorStoreIndex) -> None:
    stock, fast = Answering(engine=rag(index, llm_url)), ayo_llamaindex.optimize(Answering(engine=rag(index, llm_url)))
    assert_wrapper_lowered(fast)
    assert sorted(fast.inners) == ["engine"]
    same_answer(stock, fast)


def tool_router(index: VectorStoreIndex, url: str, embed_model: Any) -> ToolRetrieverRouterQueryEngine:
    tools = [QueryEngineTool.from_defaults(rag(index, url, top_k=k), name=name, description=about)
             for k, name, about in ((1, "precise", "the one best passage about Python modules"),
                                    (2, "broad", "several passages about Python modules"))]
    objects = ObjectIndex.from_objects(tools, index_cls=VectorStoreIndex, embed_model=embed_model)
    return ToolRetrieverRouterQueryEngine(objects.as_retriever(similarity_top_k=2), llm=make_llm(url))


def test_tool_retriever_router_query_engine(llm_url: str, index: VectorStoreIndex, embed_model: Any) -> None:
    stock = tool_router(index, llm_url, embed_model)
    fast = ayo_llamaindex.optimize(tool_router(index, llm_url, embed_model))
    assert isinstance(fast, OptimizedToolRetrieverRouterQueryEngine)
    assert [m.name for m in fast.explain().opaque] == ["retriever"]  # its ObjectRetriever: the user's object
    want = same_answer(stock, fast)
    assert len(want.metadata["retrieved_tools"]) == 2  # both engines answered, then the summarizer


# ---- postprocessors ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_encoder() -> SentenceTransformerRerank:
    """The MiniLM folder as a CrossEncoder (no cross-encoder weights offline: a fresh scoring head, seeded)."""
    torch.manual_seed(0)
    return SentenceTransformerRerank(model=str(embedding_model_path()), top_n=2, device="cpu")


def test_sentence_transformer_rerank(llm_url: str, index: VectorStoreIndex, cross_encoder: Any) -> None:
    """Stock's answer, then two stand-ins': by default (the reranker alone per query) and with
    ``Options(batch_cross_encoder=True)`` (a lone query's predict goes straight through)."""
    def build() -> RetrieverQueryEngine:
        return rag(index, llm_url, top_k=4, node_postprocessors=[cross_encoder])

    stock = build()
    want = stock.query(QUESTION)
    assert len(str(want).split()) >= MIN_WORDS, f"the model stopped early: {str(want)!r}"
    for batched in (False, True):
        fast = ayo_llamaindex.optimize(build(), options=Options(batch_cross_encoder=batched))
        text = lowered_text(fast)
        assert "post0 = rerank" in text and ("cross_encoder_batching at post0" in text) == batched
        assert_same(want, fast.query(QUESTION))


def test_structured_llm_rerank(llm_url: str, index: VectorStoreIndex) -> None:
    """Its LLM as a function-calling model (as with OpenAI in LlamaIndex's docs; ``OpenAILike``'s default sends
    ``tool_choice`` without tools, which the server refuses before any decode). The small model may answer
    without the tool call the program parses: then Ayo must raise stock's error (type and message)."""
    def build() -> RetrieverQueryEngine:
        llm = make_llm(llm_url, is_function_calling_model=True)
        rerank = StructuredLLMRerank(llm=llm, choice_batch_size=3, top_n=2)
        return rag(index, llm_url, top_k=3, node_postprocessors=[rerank])

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert "postprocessor[0]: Transform[StructuredLLMRerank]" in lowered_text(fast)
    same_outcome(stock, fast)


def test_keyword_node_postprocessor(llm_url: str, index: VectorStoreIndex) -> None:
    """It matches keywords with spaCy: where spaCy is not installed, stock and Ayo raise the same ImportError."""
    def build() -> RetrieverQueryEngine:
        keywords = KeywordNodePostprocessor(required_keywords=["module"], exclude_keywords=["pickle"])
        return rag(index, llm_url, top_k=3, node_postprocessors=[keywords])

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert "postprocessor[0]: Transform[KeywordNodePostprocessor]" in lowered_text(fast)
    status, value = same_outcome(stock, fast)
    assert status == "ok" or isinstance(value, ImportError), value


def test_long_context_reorder(llm_url: str, index: VectorStoreIndex) -> None:
    stock = rag(index, llm_url, top_k=4, node_postprocessors=[LongContextReorder()])
    fast = ayo_llamaindex.optimize(rag(index, llm_url, top_k=4, node_postprocessors=[LongContextReorder()]))
    assert "postprocessor[0]: Transform[LongContextReorder]" in lowered_text(fast)
    same_answer(stock, fast)


def one_document() -> Document:
    return Document(text=" ".join(TEXTS), id_="stdlib")


def test_metadata_replacement_over_sentence_windows(llm_url: str, embed_model: Any) -> None:
    nodes = SentenceWindowNodeParser.from_defaults(window_size=1).get_nodes_from_documents([one_document()])
    index = VectorStoreIndex(nodes, embed_model=embed_model)

    def build() -> RetrieverQueryEngine:
        return rag(index, llm_url, node_postprocessors=[MetadataReplacementPostProcessor(target_metadata_key="window")])

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert "postprocessor[0]: Transform[MetadataReplacementPostProcessor]" in lowered_text(fast)
    want = same_answer(stock, fast)
    assert all(n.node.get_content() == n.node.metadata["window"] for n in want.source_nodes)


def test_prev_next_node_postprocessor(llm_url: str, embed_model: Any) -> None:
    nodes = SentenceSplitter(chunk_size=40, chunk_overlap=0).get_nodes_from_documents([one_document()])
    index = VectorStoreIndex(nodes, embed_model=embed_model)
    index.docstore.add_documents(nodes)

    def build() -> RetrieverQueryEngine:
        around = PrevNextNodePostprocessor(docstore=index.docstore, num_nodes=1, mode="both")
        return rag(index, llm_url, top_k=1, node_postprocessors=[around])

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert "postprocessor[0]: Transform[PrevNextNodePostprocessor]" in lowered_text(fast)
    want = same_answer(stock, fast)
    assert len(want.source_nodes) > 1  # its neighbours were added


# ---- retrievers -------------------------------------------------------------------------------------------


def test_auto_merging_retriever(llm_url: str, embed_model: Any) -> None:
    text = " ".join(TEXTS * 3)
    nodes = HierarchicalNodeParser.from_defaults(chunk_sizes=[160, 40], chunk_overlap=0).get_nodes_from_documents(
        [Document(text=text, id_="all")])
    storage = StorageContext.from_defaults()
    storage.docstore.add_documents(nodes)
    index = VectorStoreIndex(get_leaf_nodes(nodes), storage_context=storage, embed_model=embed_model)

    def build() -> RetrieverQueryEngine:
        retriever = AutoMergingRetriever(index.as_retriever(similarity_top_k=8), storage, simple_ratio_thresh=0.3)
        return RetrieverQueryEngine.from_args(retriever, llm=make_llm(llm_url))

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert "Retrieval+Transform(merge)" in lowered_text(fast)
    same_answer(stock, fast)


def recursive(url: str, embed_model: Any) -> RetrieverQueryEngine:
    per_doc = {name: VectorStoreIndex.from_documents([Document(text=t, id_=f"{name}{i}") for i, t in enumerate(texts)],
                                                     embed_model=embed_model) for name, texts in DOCS.items()}
    top = VectorStoreIndex([IndexNode(text=f"Python docs about {name}", index_id=name, id_=f"link-{name}")
                            for name in DOCS], embed_model=embed_model)
    engines = {name: rag(index, url, top_k=1) for name, index in per_doc.items()}
    retriever = RecursiveRetriever("root", retriever_dict={"root": top.as_retriever(similarity_top_k=2)},
                                   query_engine_dict=engines)
    return RetrieverQueryEngine.from_args(retriever, llm=make_llm(url))


def test_recursive_retriever_linking_query_engines(llm_url: str, embed_model: Any) -> None:
    stock, fast = recursive(llm_url, embed_model), ayo_llamaindex.optimize(recursive(llm_url, embed_model))
    assert "Retrieval+ToolCall(links at once)" in lowered_text(fast)
    want = same_answer(stock, fast, by="content")  # each build indexes its own nodes
    assert len(want.source_nodes) == 2  # both links followed: each linked engine's answer is a source
