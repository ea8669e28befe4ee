"""Stock vs optimized on the real vLLM server (fp32, eager, greedy): same text, same source nodes.

Corpora are tiny and ``max_tokens`` small so the suite stays quick on 2 cores.
"""

from __future__ import annotations

import uuid
from typing import Any

import chromadb
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex, get_response_synthesizer
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor import LLMRerank, SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.llms.openai_like import OpenAILike
from llama_index.vector_stores.chroma import ChromaVectorStore
from pydantic import PrivateAttr

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, assert_same, compare
from tests.ayo_llamaindex.test_equivalence_offline import KeywordRetriever

pytestmark = pytest.mark.llm
MAX_TOKENS = 24


def make_llm(url: str, chat: bool = True, **kw: Any) -> OpenAILike:
    return OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=chat,
                      temperature=0.0, max_tokens=kw.pop("max_tokens", MAX_TOKENS), **kw)


@pytest.mark.parametrize("mode", ["compact", "refine", "tree_summarize", "simple_summarize"])
@pytest.mark.parametrize("use_async", [False, True])
def test_synthesis_modes_chat(llm_url, index, mode, use_async) -> None:
    stock = index.as_query_engine(llm=make_llm(llm_url), similarity_top_k=2, response_mode=mode, use_async=use_async)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, questions=QUESTIONS[:1])
    assert "(opaque)" not in fast.explain()


@pytest.mark.parametrize("mode", ["compact", "refine"])
def test_completion_endpoint(llm_url, index, mode) -> None:
    stock = index.as_query_engine(llm=make_llm(llm_url, chat=False), similarity_top_k=2, response_mode=mode)
    compare(stock, ayo_llamaindex.optimize(stock), questions=QUESTIONS[:1])


def test_tree_summarize_several_leaves(llm_url, index) -> None:
    llm = make_llm(llm_url, context_window=200)
    stock = index.as_query_engine(llm=llm, similarity_top_k=5, response_mode="tree_summarize", use_async=True)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, questions=QUESTIONS[:1])
    calls = [c for c in fast.last_trace.engine_calls if c.node == "synthesize"]
    assert len(calls) >= 3  # leaves + root


def test_fusion_rerank_refine(llm_url, index) -> None:
    llm = make_llm(llm_url)
    fusion = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=llm, num_queries=3,
                                  similarity_top_k=4, use_async=True)
    stock = RetrieverQueryEngine(fusion, response_synthesizer=get_response_synthesizer(llm=llm, response_mode="refine"),
                                 node_postprocessors=[LLMRerank(llm=llm, choice_batch_size=2, top_n=3)])
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    generated = [s for s in fast.last_trace.nodes if s.node == "retrieve.generated"]
    expand = next(s for s in fast.last_trace.nodes if s.node == "retrieve.expand")
    assert generated and min(s.start for s in generated) < expand.end  # pipelined into the decode


def test_similarity_postprocessor_hand_built(llm_url, index) -> None:
    llm = make_llm(llm_url)
    stock = RetrieverQueryEngine(index.as_retriever(similarity_top_k=4),
                                 response_synthesizer=get_response_synthesizer(llm=llm, use_async=True),
                                 node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.3)])
    compare(stock, ayo_llamaindex.optimize(stock), questions=QUESTIONS[:1])


def test_chroma_store(llm_url, embed_model, documents, tmp_path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("docs"))
    index = VectorStoreIndex.from_documents(documents, embed_model=embed_model,
                                            storage_context=StorageContext.from_defaults(vector_store=store))
    stock = index.as_query_engine(llm=make_llm(llm_url), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, questions=QUESTIONS[:1])
    assert "store=ChromaVectorStore" in fast.explain()


def test_custom_retriever(llm_url, documents) -> None:
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=d.text, id_=f"n{i}") for i, d in enumerate(documents)]
    stock = RetrieverQueryEngine.from_args(KeywordRetriever(nodes), llm=make_llm(llm_url))
    compare(stock, ayo_llamaindex.optimize(stock), questions=["the json module"])


class CountingLLM(OpenAILike):
    """A user's subclass that changes how calls are made: Ayo calls it as the user's object."""

    _calls: int = PrivateAttr(default=0)

    def chat(self, messages: Any, **kwargs: Any) -> Any:
        self._calls += 1
        return super().chat(messages, **kwargs)


def test_custom_llm_subclass(llm_url, index) -> None:
    llm = CountingLLM(model="SmolLM2-135M-Instruct", api_base=llm_url, api_key="none", is_chat_model=True,
                      temperature=0.0, max_tokens=MAX_TOKENS)
    stock = index.as_query_engine(llm=llm, similarity_top_k=2, response_mode="refine")
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, questions=QUESTIONS[:1])
    assert llm._calls >= 2  # both runs went through the user's own chat()
    assert "CountingLLM" in fast.explain() and "overrides chat" in fast.explain()


def test_docqa_function(llm_url, embed_model, documents, tmp_path) -> None:
    llm = make_llm(llm_url)
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    splitter = SentenceSplitter(chunk_size=64, chunk_overlap=8)

    def answer(question: str, docs: list[Document]) -> Any:
        name = f"qa-{uuid.uuid4().hex}"
        store = ChromaVectorStore(chroma_collection=client.get_or_create_collection(name))
        try:
            index = VectorStoreIndex.from_documents(docs, embed_model=embed_model, transformations=[splitter],
                                                    storage_context=StorageContext.from_defaults(vector_store=store))
            retriever = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=llm, num_queries=3)
            return RetrieverQueryEngine.from_args(retriever, llm=llm, response_mode="compact").query(question)
        finally:
            client.delete_collection(name)

    fast = ayo_llamaindex.optimize(answer)
    assert_same(answer(QUESTIONS[0], documents), fast(QUESTIONS[0], documents), by="content")
    assert "ingest0.embed" in fast.explain()


def test_rerank_speculation_keeps_stock_answers(llm_url, index) -> None:
    """A lenient rerank parser (as examples/advanced_rag.py) lets synthesis start during the rerank
    decode; answers and sources must still be stock's."""
    import re

    def parse_choices(answer: str, num_choices: int):
        picks = [int(n) for n in re.findall(r"Doc(?:ument)?\s*:?\s*(\d+)", answer)]
        picks = list(dict.fromkeys(p for p in picks if 1 <= p <= num_choices)) or list(range(1, num_choices + 1))
        return picks, [1.0] * len(picks)

    llm = make_llm(llm_url, max_tokens=48)
    stock = index.as_query_engine(llm=llm, similarity_top_k=4, response_mode="refine", node_postprocessors=[
        LLMRerank(llm=llm, top_n=2, choice_batch_size=4, parse_choice_select_answer_fn=parse_choices)])
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert "speculative synthesis" in fast.explain()
