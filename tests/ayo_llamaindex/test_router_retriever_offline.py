"""Offline: ``RouterRetriever`` (a selector choosing among retriever tools) lowered inside a query engine:
the selector's decode through Ayo's engine in its ``_select`` span, the chosen retrievers lowered and run at
once; answers, source nodes, callback events and the whole span tree as stock's, single and multi selection,
``query()`` and ``aquery()`` (the fake OpenAI server answers the selector's prompt with the JSON it parses)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload, LlamaDebugHandler
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.selectors import LLMMultiSelector, LLMSingleSelector
from llama_index.core.tools import RetrieverTool

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import QUESTIONS, assert_same
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder


def engine(index: Any, url: str, multi: bool, cm: CallbackManager | None = None) -> RetrieverQueryEngine:
    tools = [RetrieverTool.from_defaults(index.as_retriever(similarity_top_k=k), name=name, description=about)
             for k, name, about in ((1, "precise", "the one best passage"), (3, "broad", "several passages"))]
    selector = (LLMMultiSelector if multi else LLMSingleSelector).from_defaults(llm=make_llm(url))
    router = RouterRetriever(selector=selector, retriever_tools=tools, llm=make_llm(url))
    qe = RetrieverQueryEngine.from_args(router, llm=make_llm(url))
    if cm is not None:
        for part in (qe, router, *(t.retriever for t in tools)):
            part.callback_manager = cm
    return qe


def call(qe: Any, use_async: bool) -> Any:
    return asyncio.run(qe.aquery(QUESTIONS[0])) if use_async else qe.query(QUESTIONS[0])


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("multi", [False, True])
def test_answers_spans_and_plan_are_stocks(server: Any, traced: Any, multi: bool, use_async: bool) -> None:  # noqa: F811
    stock, fast = engine(traced, server.url, multi), ayo_llamaindex.optimize(engine(traced, server.url, multi))
    want = call(stock, use_async)
    assert len(want.source_nodes) == (3 if multi else 1)  # the fake selector picks the first (and second) tool
    assert_same(want, call(fast, use_async))
    assert span_tree(lambda: call(fast, use_async)) == span_tree(lambda: call(stock, use_async))
    explained = fast.explain()
    assert explained.opaque == [] and "Selection+Retrieval" in str(explained)


@pytest.mark.parametrize("use_async", [False, True])
def test_callback_events_are_stocks(server: Any, traced: Any, use_async: bool) -> None:  # noqa: F811
    def pairs(optimized: bool) -> list[Any]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        qe = engine(traced, server.url, True, CallbackManager([debug]))
        call(ayo_llamaindex.optimize(qe) if optimized else qe, use_async)
        out = []
        for start, end in debug.get_event_pairs(CBEventType.RETRIEVE):
            nodes = [(n.node.node_id, round(n.score, 5)) for n in end.payload.get(EventPayload.NODES, [])]
            out.append((start.payload.get(EventPayload.QUERY_STR), nodes))
        return sorted(out)

    want = pairs(False)
    assert len(want) == 4  # the retriever's retrieve(), its own nested event, the two chosen retrievers'
    assert pairs(True) == want
