"""Offline: configurations users write that Ayo only partly lowers (or not at all) still match stock."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload, LlamaDebugHandler
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import CitationQueryEngine
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores import ExactMatchFilter, MetadataFilters

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM, assert_same, compare


@pytest.fixture
def settings_llm(monkeypatch):
    """Some LlamaIndex classes build parts from ``Settings.llm`` (OpenAI by default: needs a key)."""
    from llama_index.core import Settings

    monkeypatch.setattr(Settings, "_llm", FakeLLM())


def test_streaming_response(index) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, streaming=True)
    fast = ayo_llamaindex.optimize(stock)
    s, f = stock.query(QUESTIONS[0]), fast.query(QUESTIONS[0])
    assert type(f) is type(s)
    assert "".join(f.response_gen) == "".join(s.response_gen)
    assert [n.node.node_id for n in f.source_nodes] == [n.node.node_id for n in s.source_nodes]
    assert "streaming=True" in fast.explain()


@pytest.mark.parametrize("mode", ["accumulate", "compact_accumulate"])
def test_accumulate_modes_are_lowered(index, mode, settings_llm) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=3, response_mode=mode)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert f"Synthesis(mode={mode})" in fast.explain()
    assert f"{mode}: one LLM call per chunk, all in flight at once" in str(fast.explain())


@pytest.mark.parametrize("mode", ["no_text", "generation", "context_only"])
def test_node_free_response_modes_are_lowered(index, mode, settings_llm) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=3, response_mode=mode)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert_same(asyncio.run(stock.aquery(QUESTIONS[1])), asyncio.run(fast.aquery(QUESTIONS[1])))
    text = str(fast.explain())
    assert f"Synthesis(mode={mode})" in text and "Opaque" not in text


@pytest.mark.parametrize("mode", ["no_text", "generation", "context_only"])
def test_node_free_modes_streaming_or_subclassed_stay_opaque(index, mode, settings_llm) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, response_mode=mode, streaming=True)
    assert "streaming=True" in str(ayo_llamaindex.optimize(stock).explain())
    synth = stock._response_synthesizer  # noqa: SLF001 - the test's own engine

    class Custom(type(synth)):
        def get_response(self, *args, **kwargs):  # a user's own answer
            return "custom"

    custom = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2,
                                   response_synthesizer=Custom(llm=FakeLLM()))
    fast = ayo_llamaindex.optimize(custom)
    compare(custom, fast)
    assert "overrides" in str(fast.explain())


def test_mmr_and_metadata_filters(embed_model) -> None:
    from llama_index.core import Document, VectorStoreIndex

    docs = [Document(text=t, metadata={"kind": "data" if i % 2 else "algo"}) for i, t in enumerate(
        ["json encodes objects", "heapq is a priority queue", "csv reads tables", "bisect keeps lists sorted"])]
    index = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
    filters = MetadataFilters(filters=[ExactMatchFilter(key="kind", value="algo")])
    for kwargs in ({"vector_store_query_mode": "mmr"}, {"filters": filters}):
        stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, **kwargs)
        compare(stock, ayo_llamaindex.optimize(stock))


def test_citation_query_engine_is_lowered(index, settings_llm) -> None:
    stock = CitationQueryEngine.from_args(index, llm=FakeLLM(), similarity_top_k=2, citation_chunk_size=64)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, by="content")  # citation nodes get fresh ids on every query
    assert_same(asyncio.run(stock.aquery(QUESTIONS[0])), asyncio.run(fast.aquery(QUESTIONS[0])), by="content")
    assert "citations: Transform" in str(fast.explain())
    assert fast.not_lowered_reason is None


def test_citation_events_match_stock(index, settings_llm) -> None:
    def pairs(optimized: bool) -> list[tuple[str, int, list[str]]]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        stock = CitationQueryEngine.from_args(index, llm=FakeLLM(), similarity_top_k=2)
        cm = CallbackManager([debug])
        for part in (stock, stock.retriever, stock._response_synthesizer):  # noqa: SLF001 - the test's own engine
            part.callback_manager = cm
        (ayo_llamaindex.optimize(stock) if optimized else stock).query(QUESTIONS[1])
        out = []
        for event_type in (CBEventType.QUERY, CBEventType.RETRIEVE, CBEventType.SYNTHESIZE):
            ends = [end.payload for _, end in debug.get_event_pairs(event_type)]
            texts = sorted(n.node.get_content() for p in ends for n in p.get(EventPayload.NODES, []))
            out.append((event_type.value, len(ends), texts))
        return out

    assert pairs(True) == pairs(False)


def test_a_query_engine_ayo_does_not_lower(index, settings_llm) -> None:
    from llama_index.core.base.base_query_engine import BaseQueryEngine

    class Delegating(BaseQueryEngine):
        """A user's own engine class: runs as the user's object, in one opaque node."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner
            super().__init__(callback_manager=None)

        def _get_prompt_modules(self) -> dict:
            return {}

        def _query(self, query_bundle: QueryBundle) -> Any:
            return self._inner.query(query_bundle)

        async def _aquery(self, query_bundle: QueryBundle) -> Any:
            return self._inner.query(query_bundle)

    stock = Delegating(index.as_query_engine(llm=FakeLLM(), similarity_top_k=2))
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert "Delegating is a query engine Ayo does not lower" in fast.explain()


def test_a_retry_engine_runs_its_loop_over_the_optimized_engine(index, settings_llm) -> None:
    from llama_index.core.evaluation import GuidelineEvaluator
    from llama_index.core.query_engine import RetryQueryEngine

    inner = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
    stock = RetryQueryEngine(inner, GuidelineEvaluator(llm=FakeLLM(), guidelines="Answer briefly."), max_retries=0)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert "RetryQueryEngine: its own control flow runs as the user's code" in fast.explain()


def test_query_bundle_with_custom_embedding_strs(index) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(stock)
    bundle = lambda: QueryBundle("what sorts?", custom_embedding_strs=["bisect sorted list", "heap queue"])  # noqa: E731
    assert_same(stock.query(bundle()), fast.query(bundle()))


def test_concurrent_callers_from_threads(index) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=3, response_mode="refine")
    fast = ayo_llamaindex.optimize(stock)
    questions = [f"{q} ({i})" for i in range(4) for q in QUESTIONS]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(fast.query, questions))
    for q, f in zip(questions, got, strict=True):
        assert_same(stock.query(q), f)


def test_optimize_returns_unknown_llamaindex_objects_unchanged(index) -> None:
    retriever = index.as_retriever()
    assert ayo_llamaindex.optimize(retriever) is retriever


def test_sentence_transformer_rerank(index) -> None:
    """A cross-encoder reranker runs as a RERANK node on the user's own model (same scores)."""
    from llama_index.core.postprocessor import SentenceTransformerRerank

    from ayo_core.models import embedding_model_path

    # no cross-encoder weights offline: the MiniLM folder with a fresh (but fixed) scoring head
    rerank = SentenceTransformerRerank(model=str(embedding_model_path()), top_n=2)
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=4, node_postprocessors=[rerank])
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast)
    assert "post0 = rerank" in fast.explain()


class _Boom(BaseNodePostprocessor):
    def _postprocess_nodes(self, nodes: list, query_bundle: QueryBundle | None = None) -> list:
        raise ValueError("postprocessor exploded")


def test_a_failing_citation_query_ends_events_as_stock(index, settings_llm) -> None:
    """Stock's ``RETRIEVE`` block ends with the error; its ``QUERY`` block then sees ``event_added`` and stays open."""
    def ends(optimized: bool) -> list[tuple[str, int, int]]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        stock = CitationQueryEngine.from_args(index, llm=FakeLLM(), similarity_top_k=2, node_postprocessors=[_Boom()])
        cm = CallbackManager([debug])
        for part in (stock, stock.retriever, stock._response_synthesizer):  # noqa: SLF001 - the test's own engine
            part.callback_manager = cm
        with pytest.raises(ValueError, match="postprocessor exploded"):
            (ayo_llamaindex.optimize(stock) if optimized else stock).query(QUESTIONS[1])
        out = []
        for event_type in (CBEventType.QUERY, CBEventType.RETRIEVE):
            events = debug.get_events(event_type)
            failed = sum(1 for e in events if e.payload and EventPayload.EXCEPTION in e.payload)
            out.append((event_type.value, len(events), failed))
        return out

    assert ends(True) == ends(False)
