"""Offline: ``AutoMergingRetriever`` (hierarchical nodes, as LlamaIndex's guide builds it) lowered: its vector
retriever on Ayo's embedding engine, then its own merging; the same nodes, answers, events and spans as stock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload, LlamaDebugHandler
from llama_index.core.node_parser import HierarchicalNodeParser, get_leaf_nodes
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import AutoMergingRetriever

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import TEXTS, FakeLLM, assert_same
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder

QUESTIONS = ["How do I turn Python objects into JSON?", "How can a list stay sorted?", "What reads csv files?"]


@pytest.fixture(scope="module")
def hierarchy(embed_model: Any) -> tuple[Any, set[str]]:
    text = " ".join(TEXTS * 3)
    nodes = HierarchicalNodeParser.from_defaults(chunk_sizes=[160, 40], chunk_overlap=0).get_nodes_from_documents(
        [Document(text=text, id_="all")])
    leaves = get_leaf_nodes(nodes)
    storage = StorageContext.from_defaults()
    storage.docstore.add_documents(nodes)
    index = VectorStoreIndex(leaves, storage_context=storage, embed_model=embed_model)
    return (index, storage), {n.node_id for n in leaves}


def engine(hierarchy: Any, cm: CallbackManager | None = None) -> RetrieverQueryEngine:
    (index, storage), _leaves = hierarchy
    retriever = AutoMergingRetriever(index.as_retriever(similarity_top_k=8), storage, simple_ratio_thresh=0.3)
    qe = RetrieverQueryEngine.from_args(retriever, llm=FakeLLM())
    if cm is not None:
        for part in (qe, retriever, retriever._vector_retriever, qe._response_synthesizer):  # noqa: SLF001
            part.callback_manager = cm
    return qe


def test_merged_nodes_and_answers_as_stock(hierarchy: Any) -> None:
    stock = engine(hierarchy)
    fast = ayo_llamaindex.optimize(stock)
    merged = 0
    for q in QUESTIONS:
        want = stock.query(q)
        assert_same(want, fast.query(q))
        assert_same(asyncio.run(stock.aquery(q)), asyncio.run(fast.aquery(q)))
        merged += sum(n.node.node_id not in hierarchy[1] for n in want.source_nodes)
    assert merged > 0  # the retriever did merge leaves into parents
    assert [m.name for m in fast.explain().opaque] == ["FakeLLM"]  # the offline fake LLM: the user's object
    assert "Retrieval+Transform(merge)" in str(fast.explain())


def test_events_as_stock(hierarchy: Any) -> None:
    def pairs(optimized: bool) -> list[tuple[str, int, list[str]]]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        qe = engine(hierarchy, CallbackManager([debug]))
        (ayo_llamaindex.optimize(qe) if optimized else qe).query(QUESTIONS[0])
        out = []
        for event_type in (CBEventType.QUERY, CBEventType.RETRIEVE, CBEventType.SYNTHESIZE):
            ends = [end.payload for _, end in debug.get_event_pairs(event_type)]
            out.append((event_type.value, len(ends),
                        sorted(n.node.node_id for p in ends for n in p.get(EventPayload.NODES, []))))
        return out

    assert pairs(True) == pairs(False)


@pytest.mark.parametrize("use_async", [False, True])
def test_span_tree_as_stock(server: Any, traced: Any, hierarchy: Any, use_async: bool) -> None:  # noqa: F811
    # its vector retriever's spans inside its own retrieve > _retrieve, on the sync path (under aquery too:
    # it keeps the base _aretrieve, which calls _retrieve, which calls the vector retriever's retrieve())
    def run(qe: Any) -> Any:
        return lambda: asyncio.run(qe.aquery(QUESTIONS[0])) if use_async else qe.query(QUESTIONS[0])

    want = span_tree(run(engine(hierarchy)))
    assert any("AutoMergingRetriever._retrieve/VectorIndexRetriever.retrieve" in path for path in want)
    assert span_tree(run(ayo_llamaindex.optimize(engine(hierarchy)))) == want
