"""Offline: the deprecated ``RetrieverRouterQueryEngine`` (a retriever over nodes that describe query engines,
each node's ``tool_name`` mapped to its engine by the user's function, as LlamaIndex's docs build it)
lowered: the retrieval in an opaque node, then the chosen engine optimized; answers, source nodes, errors
and the whole span tree as stock's, under ``query()`` and ``aquery()`` (where stock still takes the sync
path: its ``_aquery`` calls ``_query``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.query_engine import RetrieverQueryEngine, RetrieverRouterQueryEngine
from llama_index.core.schema import TextNode

import ayo_llamaindex
from ayo_core.pipeline import Options
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.retriever_router import OptimizedRetrieverRouterQueryEngine, RetrieverRouterPlan
from tests.ayo_llamaindex.li_helpers import QUESTIONS, assert_same
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder

# one node per engine: its text is what the retriever matches the question against
DESCRIPTIONS = {"encoding": "Answers questions about encoding Python objects as JSON and serializing data.",
                "sorting": "Answers questions about keeping lists sorted and about heaps and priority queues."}


def engines(index: Any, url: str, callback_manager: CallbackManager | None = None) -> dict[str, Any]:
    """Two engines over the corpus, told apart by their answers' source nodes (one, or two)."""
    def engine(top_k: int) -> RetrieverQueryEngine:
        retriever = VectorIndexRetriever(index, similarity_top_k=top_k, callback_manager=callback_manager)
        return RetrieverQueryEngine.from_args(retriever, llm=make_llm(url), callback_manager=callback_manager)

    return {"encoding": engine(1), "sorting": engine(2)}


def router(index: Any, url: str, embed_model: Any, top_k: int = 1, cls: type = RetrieverRouterQueryEngine,
           callback_manager: CallbackManager | None = None) -> tuple[Any, list[str]]:
    """The engine and the ``tool_name``s its function was called with, in order (``callback_manager``: the
    one every part reports to)."""
    nodes = [TextNode(text=text, metadata={"tool_name": name}, id_=f"tool-{name}")
             for name, text in DESCRIPTIONS.items()]
    tools = VectorStoreIndex(nodes, embed_model=embed_model, callback_manager=callback_manager)
    retriever = tools.as_retriever(similarity_top_k=top_k)
    by_name, chosen = engines(index, url, callback_manager), []

    def node_to_query_engine(node: Any) -> Any:
        chosen.append(node.metadata["tool_name"])
        return by_name[node.metadata["tool_name"]]

    return cls(retriever, node_to_query_engine, callback_manager=callback_manager), chosen


def call(qe: Any, use_async: bool, question: str = QUESTIONS[0]) -> Any:
    return asyncio.run(qe.aquery(question)) if use_async else qe.query(question)


def raised(run: Callable[[], Any]) -> BaseException:
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - the test compares whatever stock raises
        return exc
    raise AssertionError("no exception")


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("question, tool", [(QUESTIONS[0], "encoding"), (QUESTIONS[1], "sorting")])
def test_answers_and_spans_are_stocks(server: Any, traced: Any, embed_model: Any,  # noqa: F811
                                      question: str, tool: str, use_async: bool) -> None:
    stock, stock_chosen = router(traced, server.url, embed_model)
    fast_engine, fast_chosen = router(traced, server.url, embed_model)
    fast = ayo_llamaindex.optimize(fast_engine)
    assert isinstance(fast, OptimizedRetrieverRouterQueryEngine)
    want, got = call(stock, use_async, question), call(fast, use_async, question)
    assert_same(want, got)
    assert stock_chosen == fast_chosen == [tool]
    assert span_tree(lambda: call(fast, use_async, question)) == span_tree(lambda: call(stock, use_async, question))
    assert len(fast.plan.engines) == 1  # the chosen engine's stand-in, built once


@pytest.mark.parametrize("use_async", [False, True])
def test_callback_events_are_stocks(server: Any, traced: Any, embed_model: Any, use_async: bool) -> None:  # noqa: F811
    def events(optimized: bool) -> list[tuple[str, int]]:
        debug = LlamaDebugHandler()
        engine = router(traced, server.url, embed_model, callback_manager=CallbackManager([debug]))[0]
        call(ayo_llamaindex.optimize(engine) if optimized else engine, use_async)
        return sorted((e.value, len(debug.get_event_pairs(e))) for e in CBEventType if debug.get_event_pairs(e))

    want = events(False)
    assert ("query", 1) in want and ("retrieve", 2) in want  # the chosen engine's QUERY only; both retrievals
    assert events(True) == want


@pytest.mark.parametrize("use_async", [False, True])
def test_more_than_one_node_raises_stocks_error(server: Any, traced: Any, embed_model: Any,  # noqa: F811
                                                use_async: bool) -> None:
    stock, _ = router(traced, server.url, embed_model, top_k=2)
    fast = ayo_llamaindex.optimize(router(traced, server.url, embed_model, top_k=2)[0])
    want, got = raised(lambda: call(stock, use_async)), raised(lambda: call(fast, use_async))
    assert type(got) is type(want) is ValueError and str(got) == str(want) == "Retrieved more than one node."
    assert span_tree(lambda: raised(lambda: call(fast, use_async))) == \
        span_tree(lambda: raised(lambda: call(stock, use_async)))


def test_no_node_raises_stocks_error(server: Any, traced: Any, embed_model: Any) -> None:  # noqa: F811
    def empty() -> RetrieverRouterQueryEngine:
        retriever = VectorStoreIndex([], embed_model=embed_model).as_retriever(similarity_top_k=1)
        return RetrieverRouterQueryEngine(retriever, lambda node: pytest.fail("no node to map"))

    fast = ayo_llamaindex.optimize(empty())
    assert isinstance(fast, OptimizedRetrieverRouterQueryEngine)
    want, got = raised(lambda: call(empty(), False)), raised(lambda: call(fast, False))
    assert type(got) is type(want) is IndexError


def test_explain_names_the_opaque_retriever_and_the_routing(server: Any, traced: Any,  # noqa: F811
                                                            embed_model: Any) -> None:
    fast = ayo_llamaindex.optimize(router(traced, server.url, embed_model)[0])
    call(fast, False)
    explained = fast.explain()
    assert [m.name for m in explained.opaque] == ["retriever"]
    text = str(explained)
    assert "retriever: Opaque (VectorIndexRetriever)" in text
    assert "ToolCall (node_to_query_engine on the one retrieved node" in text
    assert "engines chosen so far: RetrieverQueryEngine" in text


def test_a_subclass_overriding_query_stays_opaque_with_a_warning(server: Any, traced: Any, embed_model: Any,  # noqa: F811
                                                                 caplog: Any) -> None:
    class LoudRouter(RetrieverRouterQueryEngine):
        def _query(self, query_bundle: Any) -> Any:
            response = super()._query(query_bundle)
            response.response = f"ROUTED: {response.response}"
            return response

    stock = router(traced, server.url, embed_model, cls=LoudRouter)[0]
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
        fast = ayo_llamaindex.optimize(router(traced, server.url, embed_model, cls=LoudRouter)[0])
    assert type(fast) is OptimizedQueryEngine and fast.not_lowered_reason is not None
    assert "LoudRouter runs as the user's object" in caplog.text and "LoudRouter overrides _query" in caplog.text
    want, got = call(stock, False), call(fast, False)
    assert str(got).startswith("ROUTED: ")
    assert_same(want, got)


def test_the_engine_cache_is_bounded_and_keeps_its_engines(server: Any, traced: Any) -> None:  # noqa: F811
    plan = RetrieverRouterPlan(None, {}, Options())
    plan.engines.maxsize = 2
    a, b, c = (engines(traced, server.url)["encoding"] for _ in range(3))
    first = plan.standin(a)
    assert plan.standin(a) is first and first.stock is a
    plan.standin(b)
    plan.standin(c)  # a, the least recently used, goes
    assert len(plan.engines) == 2 and plan.standin(a) is not first
