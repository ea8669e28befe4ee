"""Offline equivalence: stock query() vs optimized query() with a deterministic fake LLM.

The fake LLM is not an OpenAI class, so it is called as the user's object, but every
other step (retrieval, fusion, rerank batching and parsing, compact/refine/tree/simple
control flow and PromptHelper packing) runs through Ayo's lowered graph.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.postprocessor import LLMRerank, SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever, QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM, assert_same, compare


def outcome(engine: Any, q: str) -> tuple[str, Any]:
    try:
        return "ok", engine.query(q)
    except Exception as exc:  # noqa: BLE001 - compared below
        return "error", exc


@pytest.mark.parametrize("mode", ["compact", "refine", "tree_summarize", "simple_summarize"])
@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("context_window", [3900, 760, 220])
def test_synthesis_modes(index, mode, use_async, context_window) -> None:
    llm = FakeLLM(context_window=context_window, num_output=32)
    stock = index.as_query_engine(llm=llm, similarity_top_k=4, response_mode=mode, use_async=use_async)
    fast = ayo_llamaindex.optimize(stock)
    for q in QUESTIONS:
        (s_kind, s_val), (f_kind, f_val) = outcome(stock, q), outcome(fast, q)
        assert s_kind == f_kind, (s_val, f_val)
        if s_kind == "ok":
            assert_same(s_val, f_val)
        else:
            assert type(f_val) is type(s_val) and str(s_val) in str(f_val)


def test_tree_summarize_leaves_run_concurrently(index) -> None:
    llm = FakeLLM(context_window=220, num_output=32)
    stock = index.as_query_engine(llm=llm, similarity_top_k=6, response_mode="tree_summarize")
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert fast.explain().count("synthesize") >= 1


@pytest.mark.parametrize("mode", ["simple", "reciprocal_rerank", "relative_score", "dist_based_score"])
@pytest.mark.parametrize("use_async", [True, False])
def test_fusion_rerank_refine(index, mode, use_async) -> None:
    llm = FakeLLM()
    fusion = QueryFusionRetriever([index.as_retriever(similarity_top_k=2), index.as_retriever(similarity_top_k=3)],
                                  llm=llm, num_queries=3, similarity_top_k=4, mode=mode, use_async=use_async)
    stock = RetrieverQueryEngine(
        fusion, response_synthesizer=get_response_synthesizer(llm=llm, response_mode="refine"),
        node_postprocessors=[LLMRerank(llm=llm, choice_batch_size=2, top_n=3)])
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    plan_text = fast.explain()
    assert "QueryExpansion" in plan_text and "Rerank[LLMRerank]" in plan_text


def test_fusion_single_query_has_no_expansion(index) -> None:
    llm = FakeLLM()
    fusion = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=llm, num_queries=1)
    stock = RetrieverQueryEngine.from_args(fusion, llm=llm)
    compare(stock, ayo_llamaindex.optimize(stock))


def test_similarity_postprocessor_and_hand_built_engine(index) -> None:
    llm = FakeLLM()
    retriever = index.as_retriever(similarity_top_k=5)
    stock = RetrieverQueryEngine(retriever, response_synthesizer=get_response_synthesizer(llm=llm),
                                 node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.25)])
    compare(stock, ayo_llamaindex.optimize(stock))


def test_as_query_engine_equals_hand_built(index) -> None:
    llm = FakeLLM()
    a = ayo_llamaindex.optimize(index.as_query_engine(llm=llm, similarity_top_k=3))
    b = ayo_llamaindex.optimize(RetrieverQueryEngine.from_args(index.as_retriever(similarity_top_k=3), llm=llm))
    for q in QUESTIONS:
        assert_same(a.query(q), b.query(q))


class KeywordRetriever(BaseRetriever):
    """A user's own retriever: Ayo cannot lower it, so it runs as an opaque node."""

    def __init__(self, nodes: list[TextNode]) -> None:
        super().__init__()
        self._nodes = nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        words = set(query_bundle.query_str.lower().split())
        scored = [NodeWithScore(node=n, score=float(len(words & set(n.text.lower().split())))) for n in self._nodes]
        return sorted([s for s in scored if s.score], key=lambda s: -s.score)[:3]


def test_custom_retriever_is_opaque_and_matches(documents) -> None:
    llm = FakeLLM()
    nodes = [TextNode(text=d.text, id_=f"n{i}") for i, d in enumerate(documents)]
    stock = RetrieverQueryEngine.from_args(KeywordRetriever(nodes), llm=llm, response_mode="refine")
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, questions=[*QUESTIONS, "the list module"])
    assert "KeywordRetriever" in fast.explain() and "Opaque" in fast.explain()


def test_retriever_returning_nothing(documents) -> None:
    llm = FakeLLM()
    stock = RetrieverQueryEngine.from_args(KeywordRetriever([]), llm=llm)
    fast = ayo_llamaindex.optimize(stock)
    s, f = stock.query("anything"), fast.query("anything")
    assert str(f) == str(s) == "Empty Response"
    assert f.source_nodes == s.source_nodes == []


async def test_aquery_matches_stock(index) -> None:
    llm = FakeLLM()
    stock = index.as_query_engine(llm=llm, similarity_top_k=3, response_mode="refine")
    fast = ayo_llamaindex.optimize(stock)
    for q in QUESTIONS:
        assert_same(await stock.aquery(q), await fast.aquery(q))


def test_explain_and_trace(index) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(stock)
    assert fast.last_trace is None
    fast.query(QUESTIONS[0])
    text = fast.explain()
    for part in ("== module graph ==", "== primitive graph ==", "passes:", "retrieve.search", "FakeLLM"):
        assert part in text
    assert fast.last_trace.status == "done"
    assert fast.last_trace.critical_path_bound() > 0
