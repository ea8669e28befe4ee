"""Offline: ``TransformQueryEngine`` (HyDE and other transforms) against stock, with the fake LLM (called as the
user's object) and the real embedding model (Ayo's engine, so the original query's embedding is prefetched).
The same pipelines on the real server, with the decode on Ayo's engine: ``test_hyde.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.query_engine import TransformQueryEngine
from llama_index.core.schema import QueryBundle

import ayo_llamaindex
from ayo_llamaindex import embedding
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.transform import OptimizedTransformQueryEngine
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM, assert_same


def hyde_engine(index: Any, include_original: bool = True, **kwargs: Any) -> TransformQueryEngine:
    inner = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, **kwargs)
    return TransformQueryEngine(inner, HyDEQueryTransform(llm=FakeLLM(), include_original=include_original))


@pytest.mark.parametrize("include_original", [True, False])
def test_hyde_matches_stock_sync_and_async(index, include_original: bool) -> None:
    stock = hyde_engine(index, include_original)
    fast = ayo_llamaindex.optimize(stock)
    assert isinstance(fast, OptimizedTransformQueryEngine)
    for q in QUESTIONS:
        assert_same(stock.query(q), fast.query(q))
        assert_same(asyncio.run(stock.aquery(q)), asyncio.run(fast.aquery(q)))
    nodes = {n.name for n in fast.graph.nodes.values()} if hasattr(fast.graph, "nodes") else set()
    assert ("transform.prefetch" in nodes) == include_original or not nodes


def test_the_original_query_vector_is_taken_from_the_prefetch(index, monkeypatch) -> None:
    taken: list[bool] = []
    original = embedding.EmbedBinding._embed

    async def spy(self: Any, send: Any, texts: list[str], kind: str, ready: Any = None) -> Any:
        taken.append(ready is not None)
        return await original(self, send, texts, kind, ready)

    monkeypatch.setattr(embedding.EmbedBinding, "_embed", spy)
    stock = hyde_engine(index)
    fast = ayo_llamaindex.optimize(stock)
    assert_same(stock.query(QUESTIONS[0]), fast.query(QUESTIONS[0]))
    # the hypothetical document is encoded by the retrieval, the original query came ready
    assert sorted(taken) == [False, True]
    assert "hyde_prefetch" in str(fast.explain())


def test_events_match_stock(index) -> None:
    def run(make_fast: bool) -> list[tuple[str, int]]:
        debug = LlamaDebugHandler()
        stock = hyde_engine(index)
        stock.callback_manager = CallbackManager([debug])
        inner = stock._query_engine  # noqa: SLF001 - the test builds the stock engine's parts
        inner.callback_manager = stock.callback_manager
        inner.retriever.callback_manager = stock.callback_manager
        inner._response_synthesizer.callback_manager = stock.callback_manager  # noqa: SLF001
        engine = ayo_llamaindex.optimize(stock) if make_fast else stock
        engine.query(QUESTIONS[1])
        return sorted((e.value, len(debug.get_event_pairs(e))) for e in CBEventType
                      if debug.get_event_pairs(e))

    assert run(True) == run(False)


class Upper(BaseQueryTransform):
    """A user's own transform: not lowered, run as the user's object."""

    def _get_prompts(self) -> dict:
        return {}

    def _update_prompts(self, prompts: dict) -> None:
        return None

    def _run(self, query_bundle: QueryBundle, metadata: dict) -> QueryBundle:
        return QueryBundle(query_str=query_bundle.query_str.upper())


def test_another_transform_runs_as_the_users_object(index) -> None:
    stock = TransformQueryEngine(index.as_query_engine(llm=FakeLLM(), similarity_top_k=2), Upper())
    fast = ayo_llamaindex.optimize(stock)
    assert isinstance(fast, OptimizedTransformQueryEngine)
    assert_same(stock.query(QUESTIONS[0]), fast.query(QUESTIONS[0]))
    assert "Upper is a query transform Ayo does not lower" in str(fast.explain())


class AuditedTransformEngine(TransformQueryEngine):
    def _query(self, query_bundle: QueryBundle) -> Any:
        return super()._query(query_bundle)


def test_a_subclass_overriding_the_control_flow_stays_the_users(index) -> None:
    stock = hyde_engine(index)
    audited = AuditedTransformEngine(stock._query_engine, stock._query_transform)  # noqa: SLF001
    fast = ayo_llamaindex.optimize(audited)
    assert type(fast) is OptimizedQueryEngine
    assert "AuditedTransformEngine" in fast.not_lowered_reason
    assert_same(audited.query(QUESTIONS[0]), fast.query(QUESTIONS[0]))
