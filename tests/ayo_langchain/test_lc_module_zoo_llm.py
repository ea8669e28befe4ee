"""LangChain modules Ayo lowers (``docs/modules.md``) in an LCEL RAG chain on the real vLLM server at 64-token
answers: ``ParentDocumentRetriever`` and ``MultiVectorRetriever`` (Chroma chunks, parents in an
``InMemoryStore``) and ``model.with_retry()``, each chain ending ``prompt | model | StrOutputParser()``.

Stock first, then Ayo's stand-in of the same chain built again: the answer called (``invoke``) and streamed
(``stream``: every chunk, in order) must be stock's exactly. Their offline tests
(``test_parent_document_offline.py``, ``test_model_retry.py``) use a fake server with a few words per answer;
a difference late in a real decode or at a stream boundary shows only here. Each test also checks the module
is lowered (``explain()``), so it fails if Ayo silently falls back to running it opaque.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_classic.retrievers import MultiVectorRetriever
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.stores import InMemoryStore

import ayo_langchain
from tests.ayo_langchain.lc_helpers import format_docs, plain
from tests.ayo_langchain.test_lc_long_answers import PROMPT, QUESTION, chat
from tests.ayo_langchain.test_parent_document_offline import PARENTS, parent_retriever

pytestmark = pytest.mark.llm
MAX_TOKENS = 64
MIN_WORDS = MAX_TOKENS // 3  # a 64-token answer has at least this many words: the model did not stop early


def rag(retriever: Runnable, model: Runnable) -> Runnable:
    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | model | StrOutputParser()


def multi_vector_retriever(folder: Path, embeddings: Any) -> MultiVectorRetriever:
    """The docs' summary use: one vector per parent (its first sentence), the parents in a docstore."""
    import chromadb
    from langchain_chroma import Chroma

    store = Chroma(collection_name="summaries", embedding_function=embeddings,
                   client=chromadb.PersistentClient(path=str(folder)))
    retriever = MultiVectorRetriever(vectorstore=store, docstore=InMemoryStore(), search_kwargs={"k": 2})
    ids = [f"p{i}" for i in range(len(PARENTS))]
    store.add_documents([Document(page_content=t.split(".")[0], metadata={"doc_id": i})
                         for t, i in zip(PARENTS, ids, strict=True)])
    retriever.docstore.mset([(i, Document(page_content=t)) for i, t in zip(ids, PARENTS, strict=True)])
    return retriever


def same_called_and_streamed(stock: Runnable, fast: Any) -> None:
    """Stock streamed first (its chunks add up to its answer: at temperature 0 the same as its ``invoke``,
    which ``test_lc_long_answers.py`` checks), then Ayo called and streamed: the text and every chunk stock's."""
    stock_chunks = [plain(c) for c in stock.stream(QUESTION)]
    want = "".join(stock_chunks)
    assert len(want.split()) >= MIN_WORDS, f"the model stopped early: {want!r}"
    assert fast.invoke(QUESTION) == want
    assert [plain(c) for c in fast.stream(QUESTION)] == stock_chunks


def assert_lowered(fast: Any, module: str) -> None:
    text = str(fast.explain())
    assert module in text and "opaque (0)" in text, text


def test_parent_document_retriever_chain(llm_url: str, tmp_path: Path, embeddings: Any) -> None:
    stock = rag(parent_retriever(tmp_path / "stock", embeddings), chat(llm_url, MAX_TOKENS))
    fast = ayo_langchain.optimize(rag(parent_retriever(tmp_path / "ayo", embeddings), chat(llm_url, MAX_TOKENS)))
    assert_lowered(fast, "Retrieval[ParentDocumentRetriever]")
    same_called_and_streamed(stock, fast)


def test_multi_vector_retriever_chain(llm_url: str, tmp_path: Path, embeddings: Any) -> None:
    stock = rag(multi_vector_retriever(tmp_path / "stock", embeddings), chat(llm_url, MAX_TOKENS))
    fast = ayo_langchain.optimize(rag(multi_vector_retriever(tmp_path / "ayo", embeddings),
                                      chat(llm_url, MAX_TOKENS)))
    assert_lowered(fast, "Retrieval[MultiVectorRetriever]")
    same_called_and_streamed(stock, fast)


def test_model_with_retry_chain(llm_url: str, vectorstore: Any) -> None:
    def build() -> Runnable:
        return rag(vectorstore.as_retriever(search_kwargs={"k": 2}),
                   chat(llm_url, MAX_TOKENS).with_retry(stop_after_attempt=2))

    stock, fast = build(), ayo_langchain.optimize(build())
    assert_lowered(fast, "LLMCall[RunnableRetry]")
    same_called_and_streamed(stock, fast)
