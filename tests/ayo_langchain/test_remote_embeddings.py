"""LangChain ``OpenAIEmbeddings(base_url=..., check_embedding_ctx_length=False)`` at a real embedding server
(all-MiniLM-L6-v2 on loopback): Ayo embeds a retriever's queries on its remote embedding engine with
stock's vectors, documents and answers, in fewer requests when queries run together."""

from __future__ import annotations

from typing import Any

import chromadb
import openai
import pytest
from langchain_chroma import Chroma
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnablePassthrough
from langchain_openai import OpenAIEmbeddings
from lc_helpers import DOCS, check_equivalent, format_docs
from test_llm_equivalence import PROMPT, QUESTIONS, chat

import ayo_langchain
from ayo_core.engines.remote_embedding import RemoteEmbeddingError
from ayo_langchain import capture as cap
from ayo_langchain import engines as eng
from tests.ayo_core.engines.embedding_server import MODEL_NAME, serve_embeddings


@pytest.fixture(scope="module")
def server():
    with serve_embeddings() as srv:
        yield srv


def remote(server: Any, **kw: Any) -> OpenAIEmbeddings:
    kw.setdefault("check_embedding_ctx_length", False)
    return OpenAIEmbeddings(model=MODEL_NAME, base_url=server.url, api_key="unused", **kw)


@pytest.fixture
def store(server: Any, tmp_path: Any) -> Chroma:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    vs = Chroma(collection_name="docs", embedding_function=remote(server), client=client)
    vs.add_texts([text for _, text in DOCS], metadatas=[{"source": s} for s, _ in DOCS], ids=[s for s, _ in DOCS])
    return vs


@pytest.mark.parametrize("kw", [{}, {"chunk_size": 2, "dimensions": 384}, {"model_kwargs": {"encoding_format": "float"}}])
def test_vectors_and_requests_are_stocks(server, kw) -> None:
    emb = remote(server, **kw)
    assert cap.embeddings_supported(emb) == ""
    texts = [*(t for _, t in DOCS[:4]), "a query\nwith a newline"]
    server.clear()
    stock = emb.embed_documents(texts), [emb.embed_query(q) for q in QUESTIONS]
    stock_sent = sorted(server.texts_sent())
    server.clear()
    engine = eng.embedding_engine_for(emb)
    assert (engine.embed(texts), [engine.embed([q])[0] for q in QUESTIONS]) == stock  # exact
    assert sorted(server.texts_sent()) == stock_sent  # the same fields per text (no newline replacement)
    assert max(len(b["input"]) for b in server.requests) <= emb.chunk_size


@pytest.mark.parametrize(("kw", "why"), [
    ({"check_embedding_ctx_length": True}, "check_embedding_ctx_length=True"),
    ({"model_kwargs": {"extra_body": {"truncate": True}}}, "request fields ['extra_body']"),
    ({"default_query": {"v": "1"}}, "default_query"),
])
def test_what_ayo_cannot_reproduce_runs_stock_with_the_reason(server, tmp_path, kw, why) -> None:
    emb = remote(server, **kw)
    assert why in cap.embeddings_supported(emb)
    vs = Chroma(collection_name="opaque", embedding_function=emb,
                client=chromadb.PersistentClient(path=str(tmp_path / "c")))
    fast = ayo_langchain.optimize(vs.as_retriever() | format_docs)
    assert why in fast.explain()


def test_concurrent_queries_share_requests_with_stocks_documents(server, store) -> None:
    chain = store.as_retriever(search_kwargs={"k": 2}) | format_docs
    fast = ayo_langchain.optimize(chain)
    questions = [f"{q} ({i})" for i in range(4) for q in QUESTIONS]
    server.clear()
    stock_out = chain.batch(questions)
    stock_requests = len(server.requests)
    server.clear()
    assert fast.batch(questions) == stock_out
    assert stock_requests == len(questions) and len(server.requests) < stock_requests, len(server.requests)
    assert f"RemoteEmbeddingEngine('{server.url}'" in fast.explain()


def test_a_server_error_fails_the_query_naming_the_server(server, store) -> None:
    chain = store.as_retriever(search_kwargs={"k": 2}) | format_docs
    fast = ayo_langchain.optimize(chain)
    server.fail_with[:] = [400]
    with pytest.raises(openai.BadRequestError):
        chain.invoke(QUESTIONS[0])
    server.fail_with[:] = [400]
    with pytest.raises(RemoteEmbeddingError, match=rf"{server.url}/embeddings rejected.*HTTP 400.*injected"):
        fast.invoke(QUESTIONS[0])
    server.fail_with.clear()


@pytest.mark.llm
def test_rag_chain_answers_are_stocks(server, store, llm_url) -> None:
    chain = ({"context": store.as_retriever(search_kwargs={"k": 2}) | format_docs, "question": RunnablePassthrough()}
             | PROMPT | chat(llm_url) | StrOutputParser())
    check_equivalent(chain, ayo_langchain.optimize(chain), QUESTIONS)
