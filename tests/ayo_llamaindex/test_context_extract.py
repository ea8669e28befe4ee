"""Contextual retrieval (``DocumentContextExtractor``) inside ``optimize(fn)``: each document's head is
prefilled once, every chunk request stays the stock call, so contexts and answers are stock's."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.extractors import DocumentContextExtractor
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import TEXTS, FakeLLM, assert_same

# two documents of several chunks each (the shared head is what gets prefilled) and a one-chunk one
LONG = [" ".join(TEXTS[i:] + TEXTS[:i]) for i in range(2)] + [TEXTS[0]]


def contextual_answer(llm: Any, embed_model: Any) -> Any:
    splitter = SentenceSplitter(chunk_size=48, chunk_overlap=0)

    def answer(question: str, documents: list[Document]) -> Any:
        docstore = SimpleDocumentStore()
        docstore.add_documents(documents)
        extractor = DocumentContextExtractor(docstore=docstore, llm=llm, max_context_length=2000,
                                             max_output_tokens=16, num_workers=8, show_progress=False)
        index = VectorStoreIndex.from_documents(documents, embed_model=embed_model,
                                                transformations=[splitter, extractor])
        return index.as_query_engine(llm=llm, similarity_top_k=3).query(question)

    return answer


def documents() -> list[Document]:
    return [Document(text=t, id_=f"long{i}") for i, t in enumerate(LONG)]


def contexts(response: Any) -> list[str]:
    return [n.node.metadata.get("context", "") for n in response.source_nodes]


def test_unrecognized_llm_runs_the_extractor_stock(embed_model) -> None:
    answer = contextual_answer(FakeLLM(), embed_model)
    fast = ayo_llamaindex.optimize(answer)
    stock = answer("How do I turn Python objects into JSON?", documents())
    optimized = fast("How do I turn Python objects into JSON?", documents())
    assert_same(stock, optimized, by="content")
    assert contexts(optimized) == contexts(stock)
    assert "DocumentContextExtractor: FakeLLM is not an OpenAI-compatible LLM class" in fast.explain()


def test_extractor_outside_an_optimized_call_is_untouched(embed_model) -> None:
    ayo_llamaindex.optimize(contextual_answer(FakeLLM(), embed_model))  # installs the hooks
    nodes = SentenceSplitter(chunk_size=48, chunk_overlap=0).get_nodes_from_documents(documents())
    docstore = SimpleDocumentStore()
    docstore.add_documents(documents())
    extractor = DocumentContextExtractor(docstore=docstore, llm=FakeLLM(), max_output_tokens=16, show_progress=False)
    assert all("context" in m for m in extractor.extract(nodes))


@pytest.mark.llm
def test_document_prefill_keeps_contexts_and_answer(llm_url, embed_model) -> None:
    llm = OpenAILike(model="SmolLM2-135M-Instruct", api_base=llm_url, api_key="none", is_chat_model=True,
                     temperature=0.0, max_tokens=24, context_window=8192)
    answer = contextual_answer(llm, embed_model)
    fast = ayo_llamaindex.optimize(answer)
    question = "Which module keeps a list in sorted order?"
    stock = answer(question, documents())
    optimized = fast(question, documents())
    assert_same(stock, optimized, by="content")
    assert contexts(optimized) == contexts(stock) and any(contexts(stock))
    text = fast.explain()
    assert "contextual extraction: DocumentContextExtractor[llm=OpenAILike" in text
    assert "(2 documents with 2+ chunks)" in text
    assert fast._last.extraction.tokens_prefilled >= 2 * 32
