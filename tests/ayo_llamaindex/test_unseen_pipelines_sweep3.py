"""Pipelines from the third stock-vs-optimized sweep (citation / retry / multi-step engines, hand-built
synthesizers, postprocessors, index changes after ``optimize``, errors), each compared with stock."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import CitationQueryEngine, CustomQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM
from tests.ayo_llamaindex.li_helpers import EventNames


@pytest.fixture
def event_names() -> Iterator[list[str]]:
    """Names of every instrumentation event the root dispatcher sees during the test."""
    handler = EventNames(names=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield handler.names
    finally:
        root.event_handlers.remove(handler)


def _failing_events(call: Any, names: list[str]) -> tuple[str, collections.Counter]:
    names.clear()
    with pytest.raises(Exception) as info:  # noqa: PT011 - compared with stock's by the caller
        call()
    return f"{type(info.value).__name__}: {info.value}", collections.Counter(names)


class Boom(BaseNodePostprocessor):
    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list:
        raise ValueError("postprocessor exploded")


class FailingEngine(CustomQueryEngine):
    def custom_query(self, query_str: str) -> str:
        raise RuntimeError("custom engine failed")


# -- spans: a failing query drops as many spans as stock (SpanDropEvent counts) ---------------------

@pytest.mark.parametrize("build", [
    lambda index: index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, node_postprocessors=[Boom()]),
    lambda index: CitationQueryEngine.from_args(index, llm=FakeLLM(), node_postprocessors=[Boom()]),
    lambda index: FailingEngine(),
], ids=["lowered", "opaque-engine", "custom-query-engine"])
def test_a_failing_query_drops_as_many_spans_as_stock(index, event_names, build) -> None:
    stock = build(index)
    fast = ayo_llamaindex.optimize(stock)
    for method in ("query", "aquery"):
        def run(engine: Any, method: str = method) -> Any:
            call = getattr(engine, method)(QUESTIONS[0])
            return asyncio.run(call) if method == "aquery" else call

        expected = _failing_events(lambda: run(stock), event_names)
        assert expected[1]["SpanDropEvent"] >= 1
        assert _failing_events(lambda: run(fast), event_names) == expected, method


# -- event order and nesting: RETRIEVE holds the query's EMBEDDING, as in stock ----------------------

class _Tree(BaseCallbackHandler):
    """(event type, parent event type) of every callback event, in start order."""

    def __init__(self) -> None:
        super().__init__([], [])
        self.types: dict[str, str] = {}
        self.edges: list[tuple[str, str]] = []

    def on_event_start(self, event_type: Any, payload: Any = None, event_id: str = "", parent_id: str = "",
                       **kwargs: Any) -> str:
        self.types[event_id] = event_type.value
        self.edges.append((event_type.value, self.types.get(parent_id, parent_id)))
        return event_id

    def on_event_end(self, event_type: Any, payload: Any = None, event_id: str = "", **kwargs: Any) -> None:
        """Only starts are compared."""

    def start_trace(self, trace_id: str | None = None) -> None:
        """Traces are not compared."""

    def end_trace(self, trace_id: str | None = None, trace_map: Any = None) -> None:
        """Traces are not compared."""


@pytest.mark.parametrize("method", ["query", "aquery"])
def test_retrieve_events_wrap_the_query_embedding_as_in_stock(embed_model, documents, event_names, method) -> None:
    """Stock ``retrieve()`` starts ``RETRIEVE`` / ``RetrievalStartEvent`` before it embeds the query."""
    def run(build_fast: bool) -> tuple[list[str], list[tuple[str, str]]]:
        tree = _Tree()
        Settings.callback_manager = CallbackManager([tree])
        try:
            index = VectorStoreIndex.from_documents(documents, embed_model=embed_model)
            engine = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
            engine = ayo_llamaindex.optimize(engine) if build_fast else engine
            tree.edges.clear()
            event_names.clear()
            call = getattr(engine, method)(QUESTIONS[0])
            if method == "aquery":
                asyncio.run(call)
        finally:
            Settings.callback_manager = None
        return list(event_names), tree.edges

    stock = run(False)
    assert ("embedding", "retrieve") in stock[1]
    assert run(True) == stock
