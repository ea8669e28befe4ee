"""``ContextualCompressionRetriever`` with ``LLMChainExtractor`` / ``LLMChainFilter`` on the real server:
identical outputs (invoke, batch, stream), the per-document decodes in flight together."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import LLMChainExtractor, LLMChainFilter
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from lc_helpers import MODEL, check_equivalent, format_docs

import ayo_langchain

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]
QUESTION = "How do I serialize an object to JSON?"
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question using only the context. Keep the answer concise."),
    ("human", "Question: {question}\nContext: {context}\nAnswer:"),
])


def chat(url: str, max_tokens: int = 64, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=kw.pop("model", MODEL), base_url=url, api_key="none", temperature=0,
                      max_tokens=max_tokens, **kw)


def llm_calls(fast: Any) -> list[Any]:
    return [c for c in fast.last_trace.engine_calls if c.engine == "llm"]


def overlapping(calls: list[Any]) -> bool:
    return len(calls) >= 2 and max(c.start for c in calls) < min(c.end for c in calls)


@pytest.mark.parametrize("compressor", [LLMChainExtractor, LLMChainFilter])
def test_compression_retriever_alone(llm_url: str, vectorstore: Any, compressor: Any) -> None:
    retriever = ContextualCompressionRetriever(base_compressor=compressor.from_llm(chat(llm_url)),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 3}))
    fast = ayo_langchain.optimize(retriever)
    expected = retriever.invoke(QUESTION)
    got = fast.invoke(QUESTION)
    assert [(d.page_content, d.metadata) for d in got] == [(d.page_content, d.metadata) for d in expected]
    assert len(llm_calls(fast)) == 3 and overlapping(llm_calls(fast))  # stock: one document after another
    text = fast.explain()
    assert "DocumentCompression" in text and "opaque (0)" in text


@pytest.mark.long  # the default suite has this chain: test_lc_long_answers.py's "compression" pattern
def test_extractor_in_a_rag_chain(llm_url: str, vectorstore: Any) -> None:
    llm = chat(llm_url)
    retriever = ContextualCompressionRetriever(base_compressor=LLMChainExtractor.from_llm(llm),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 3}))
    chain = ({"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm
             | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [QUESTION])
    assert "opaque (0)" in fast.explain()


@pytest.mark.parametrize("compressor", [LLMChainExtractor, LLMChainFilter])
def test_server_rejection_raises_the_sdks_error(llm_url: str, vectorstore: Any, compressor: Any) -> None:
    llm = chat(llm_url, model="no-such-model", max_retries=0)
    retriever = ContextualCompressionRetriever(base_compressor=compressor.from_llm(llm),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 2}))
    with pytest.raises(openai.NotFoundError) as stock_error:
        retriever.invoke(QUESTION)
    with pytest.raises(openai.NotFoundError) as fast_error:
        ayo_langchain.optimize(retriever).invoke(QUESTION)
    assert str(fast_error.value) == str(stock_error.value)


def test_a_local_compressor_runs_in_its_node(vectorstore: Any, embeddings: Any) -> None:
    """An ``EmbeddingsFilter`` (no model call) runs as the user's object after the lowered retriever."""
    from langchain_classic.retrievers.document_compressors import EmbeddingsFilter

    retriever = ContextualCompressionRetriever(base_compressor=EmbeddingsFilter(embeddings=embeddings),
                                               base_retriever=vectorstore.as_retriever())
    fast = ayo_langchain.optimize(retriever)
    assert [d.page_content for d in fast.invoke(QUESTION)] == [d.page_content for d in retriever.invoke(QUESTION)]
    assert "EmbeddingsFilter runs as the user's object" in str(fast.explain())
