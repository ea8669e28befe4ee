"""``TransformQueryEngine`` + ``HyDEQueryTransform``: stock vs optimized on the real vLLM server (fp32, eager,
greedy), with 64-token hypothetical documents and answers.

Built as LlamaIndex's HyDE guide builds it: ``TransformQueryEngine(index.as_query_engine(...),
HyDEQueryTransform(include_original=True))``. The hypothetical document's decode goes to Ayo's engine;
the original query is embedded while it decodes; the inner engine is optimized.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
from llama_index.core.query_engine import TransformQueryEngine

import ayo_llamaindex
from ayo_llamaindex.transform import OptimizedTransformQueryEngine
from tests.ayo_llamaindex.li_helpers import TEXTS
from tests.ayo_llamaindex.test_sub_question import make_llm

pytestmark = pytest.mark.llm
QUESTIONS = ["How do I turn Python objects into JSON?", "How can a list stay sorted?",
             "Which module reads spreadsheet files?"]


@pytest.fixture(scope="module")
def hyde_index(embed_model: Any) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents([Document(text=t, id_=f"doc{i}") for i, t in enumerate(TEXTS)],
                                           embed_model=embed_model)


def hyde_engine(url: str, index: VectorStoreIndex, include_original: bool = True,
                debug: LlamaDebugHandler | None = None) -> TransformQueryEngine:
    cm = CallbackManager([debug] if debug else [])
    llm = make_llm(url, 64)
    llm.callback_manager = cm
    inner = index.as_query_engine(llm=llm, similarity_top_k=2)
    for part in (inner, inner.retriever, inner._response_synthesizer):  # noqa: SLF001 - the test's own engine
        part.callback_manager = cm
    return TransformQueryEngine(inner, HyDEQueryTransform(llm=llm, include_original=include_original),
                                callback_manager=cm)


def outcome(response: Any) -> tuple:
    return str(response), [(n.node.node_id, round(n.score, 5)) for n in response.source_nodes]


@pytest.mark.parametrize("include_original", [pytest.param(True, marks=pytest.mark.long), False])
def test_hyde_answers_as_stock(llm_url: str, hyde_index: VectorStoreIndex, include_original: bool) -> None:
    stock = hyde_engine(llm_url, hyde_index, include_original)
    fast = ayo_llamaindex.optimize(stock)
    assert isinstance(fast, OptimizedTransformQueryEngine)
    assert not fast.explain().opaque
    for q in QUESTIONS[:2]:
        expected = outcome(stock.query(q))
        assert len(expected[0].split()) >= 20, expected  # a long answer: a late difference would show
        assert outcome(fast.query(q)) == expected, q


def test_concurrent_aquery_as_stock(llm_url: str, hyde_index: VectorStoreIndex) -> None:
    stock = hyde_engine(llm_url, hyde_index)
    fast = ayo_llamaindex.optimize(stock)

    async def all_of(engine: Any) -> list[tuple]:
        return [outcome(r) for r in await asyncio.gather(*(engine.aquery(q) for q in QUESTIONS))]

    assert asyncio.run(all_of(fast)) == asyncio.run(all_of(stock))


def test_llm_and_embedding_events_as_stock(llm_url: str, hyde_index: VectorStoreIndex) -> None:
    def events(optimized: bool) -> list[tuple[str, int]]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        stock = hyde_engine(llm_url, hyde_index, debug=debug)
        (ayo_llamaindex.optimize(stock) if optimized else stock).query(QUESTIONS[0])
        return sorted((e.value, len(debug.get_event_pairs(e))) for e in CBEventType if debug.get_event_pairs(e))

    assert events(True) == events(False)
