"""Offline: optimize(fn) for document QA (index per call, then query) with a fake LLM.

Node ids are random per from_documents call (uuid4), so answers are compared by text
and source nodes by content.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import chromadb
import pytest
from llama_index.core import Document, StorageContext, SummaryIndex, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.vector_stores.chroma import ChromaVectorStore

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM, assert_same
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder


def make_answer(embed_model: Any, store: str = "simple", chroma_path: str = "", fusion: bool = False) -> Any:
    llm = FakeLLM()
    splitter = SentenceSplitter(chunk_size=64, chunk_overlap=8)
    client = chromadb.PersistentClient(path=chroma_path) if store == "chroma" else None

    def answer(question: str, documents: list[Document]) -> Any:
        name = f"t-{uuid.uuid4().hex}"
        sc = None
        if client is not None:
            sc = StorageContext.from_defaults(
                vector_store=ChromaVectorStore(chroma_collection=client.get_or_create_collection(name)))
        try:
            index = VectorStoreIndex.from_documents(documents, storage_context=sc, embed_model=embed_model,
                                                    transformations=[splitter])
            if fusion:
                retriever = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=llm, num_queries=3)
                engine = RetrieverQueryEngine.from_args(retriever, llm=llm, response_mode="refine")
            else:
                engine = index.as_query_engine(llm=llm, similarity_top_k=3, response_mode="compact")
            return engine.query(question)
        finally:
            if client is not None:
                client.delete_collection(name)

    return answer


@pytest.mark.parametrize("store", ["simple", "chroma"])
@pytest.mark.parametrize("fusion", [False, True])
def test_docqa_matches_stock(embed_model, documents, tmp_path, store, fusion) -> None:
    answer = make_answer(embed_model, store, str(tmp_path / "chroma"), fusion)
    fast = ayo_llamaindex.optimize(answer)
    for q in QUESTIONS:
        assert_same(answer(q, documents), fast(q, documents), by="content")
    text = fast.explain()
    assert "indexing (build): VectorStoreIndex" in text and "ingest0.add" in text
    assert fast.last_trace is not None and fast.last_trace.status == "done"


async def test_docqa_acall_matches_stock(embed_model, documents) -> None:
    answer = make_answer(embed_model)
    fast = ayo_llamaindex.optimize(answer)
    results = await asyncio.gather(*(fast.acall(q, documents) for q in QUESTIONS))
    for q, r in zip(QUESTIONS, results, strict=True):
        assert_same(answer(q, documents), r, by="content")


async def test_async_docqa_function(embed_model, documents) -> None:
    llm = FakeLLM()

    async def answer(question: str, docs: list[Document]) -> Any:
        index = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
        return await index.as_query_engine(llm=llm, similarity_top_k=2).aquery(question)

    fast = ayo_llamaindex.optimize(answer)
    assert_same(await answer(QUESTIONS[0], documents), await fast(QUESTIONS[0], documents), by="content")
    assert "ingest0.add" in fast.explain()


def test_index_left_to_the_user_is_complete(embed_model, documents) -> None:
    """A function that returns its index (never queries): the vectors are in before it returns."""

    def build(docs: list[Document]) -> VectorStoreIndex:
        return VectorStoreIndex.from_documents(docs, embed_model=embed_model)

    fast = ayo_llamaindex.optimize(build)
    stock_index, fast_index = build(documents), fast(documents)
    s = stock_index.as_retriever(similarity_top_k=3).retrieve(QUESTIONS[0])
    f = fast_index.as_retriever(similarity_top_k=3).retrieve(QUESTIONS[0])
    assert [n.node.get_content() for n in f] == [n.node.get_content() for n in s]
    assert len(fast_index.vector_store.data.embedding_dict) == len(stock_index.vector_store.data.embedding_dict)


def test_direct_retrieval_inside_the_call_waits_for_vectors(embed_model, documents) -> None:
    """Retrieval outside a query engine (not intercepted) still sees every vector (store barrier)."""

    def retrieve(question: str, docs: list[Document]) -> list[str]:
        index = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
        return [n.node.get_content() for n in index.as_retriever(similarity_top_k=2).retrieve(question)]

    assert ayo_llamaindex.optimize(retrieve)(QUESTIONS[1], documents) == retrieve(QUESTIONS[1], documents)


def test_untraceable_index_runs_stock(documents) -> None:
    llm = FakeLLM()

    def answer(question: str, docs: list[Document]) -> Any:
        return SummaryIndex.from_documents(docs).as_query_engine(llm=llm).query(question)

    fast = ayo_llamaindex.optimize(answer)
    assert str(fast(QUESTIONS[0], documents)) == str(answer(QUESTIONS[0], documents))
    assert "SummaryIndex" in fast.explain()


def test_empty_documents(embed_model) -> None:
    answer = make_answer(embed_model)
    fast = ayo_llamaindex.optimize(answer)
    s, f = answer("anything?", []), fast("anything?", [])
    assert str(f) == str(s) == "Empty Response"


def test_errors_in_the_function_propagate_unchanged(embed_model, documents) -> None:
    def broken(question: str, docs: list[Document]) -> Any:
        VectorStoreIndex.from_documents(docs, embed_model=embed_model)
        raise KeyError("user bug")

    with pytest.raises(KeyError, match="user bug"):
        ayo_llamaindex.optimize(broken)(QUESTIONS[0], documents)


def test_constructor_and_insert_are_deferred_too(embed_model, documents) -> None:
    """Users also build from nodes and insert documents one by one: same answers, writes deferred."""
    llm = FakeLLM()
    splitter = SentenceSplitter(chunk_size=64, chunk_overlap=8)

    def answer(question: str, docs: list[Document]) -> Any:
        index = VectorStoreIndex(splitter.get_nodes_from_documents(docs[:3]), embed_model=embed_model)
        for doc in docs[3:]:
            index.insert(doc)
        return index.as_query_engine(llm=llm, similarity_top_k=3).query(question)

    fast = ayo_llamaindex.optimize(answer)
    for q in QUESTIONS:
        assert_same(answer(q, documents), fast(q, documents), by="content")
    text = fast.explain()
    assert "indexing (build)" in text and "indexing (insert)" in text
    assert "ingest3.add" in text  # one build + three inserts, landing in order


def test_docqa_span_tree_is_stocks(server: Any, traced: Any, embed_model: Any, documents: Any) -> None:  # noqa: F811
    answer = make_answer(embed_model)
    want = span_tree(lambda: answer(QUESTIONS[0], documents))
    fast = ayo_llamaindex.optimize(make_answer(embed_model))
    assert span_tree(lambda: fast(QUESTIONS[0], documents)) == want


def test_async_docqa_span_tree_is_stocks(server: Any, traced: Any, embed_model: Any, documents: Any) -> None:  # noqa: F811
    """Through ``aquery``: the engine's aquery > _aquery spans, the deferred indexing's embedding span."""
    def make() -> Any:
        async def answer(question: str, docs: list[Document]) -> Any:
            index = VectorStoreIndex.from_documents(docs, embed_model=embed_model, insert_batch_size=3)
            return await index.as_query_engine(llm=FakeLLM(), similarity_top_k=2).aquery(question)
        return answer

    want = span_tree(lambda: asyncio.run(make()(QUESTIONS[0], documents)))
    fast = ayo_llamaindex.optimize(make())
    assert span_tree(lambda: asyncio.run(fast(QUESTIONS[0], documents))) == want
    assert sum(n for path, n in want.items() if path.endswith("get_text_embedding_batch ['EmbeddingEndEvent', "
                                                               "'EmbeddingStartEvent']")) > 1  # one per insert batch


def test_the_functions_own_code_is_recorded_apart_from_ayos_hooks(embed_model, documents) -> None:
    """The user's code inside an optimized function is the caller's time (stock runs it too); the
    hooks and the graph are Ayo's: what ``ayo compare`` leaves out of Ayo's overhead."""
    import time

    from ayo_core.trace import collect_traces

    answer = make_answer(embed_model)

    def slow_user_code(question: str, docs: list[Document]) -> Any:
        time.sleep(0.05)                        # the user's own work before indexing
        return answer(question, docs)

    fast = ayo_llamaindex.optimize(slow_user_code)
    with collect_traces() as sink:
        t0 = time.monotonic()
        fast(QUESTIONS[0], documents)
        t1 = time.monotonic()
    (trace,) = sink
    caller = sink.caller_code
    assert caller and all(t0 <= lo <= hi <= t1 for lo, hi in caller)
    assert sum(hi - lo for lo, hi in caller) >= 0.05
    # the graph ran inside a hook: none of it is the caller's
    assert all(hi <= trace.start or lo >= trace.end for lo, hi in caller)
    assert caller[0][1] - caller[0][0] >= 0.05   # the sleep, before the first hook (indexing)
