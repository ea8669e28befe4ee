"""Offline: ``ToolRetrieverRouterQueryEngine`` (an ObjectIndex retriever of query engine tools, as LlamaIndex's
docs build it) lowered: the retrieved tools' engines optimized and run at once, their answers combined by its
summarizer; answers, source nodes, ``retrieved_tools`` and the whole span tree as stock's, under
``query()`` (where stock runs the engines one after another) and ``aquery()``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.objects import ObjectIndex
from llama_index.core.query_engine import ToolRetrieverRouterQueryEngine
from llama_index.core.tools import QueryEngineTool

import ayo_llamaindex
from ayo_llamaindex.tool_router import OptimizedToolRetrieverRouterQueryEngine
from tests.ayo_llamaindex.li_helpers import QUESTIONS, assert_same
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder


def engine(index: Any, url: str, embed_model: Any, top_k: int = 2) -> ToolRetrieverRouterQueryEngine:
    tools = [QueryEngineTool.from_defaults(index.as_query_engine(llm=make_llm(url), similarity_top_k=k), name=name,
                                           description=about)
             for k, name, about in ((1, "precise", "the one best passage about Python modules"),
                                    (2, "broad", "several passages about Python modules"))]
    objects = ObjectIndex.from_objects(tools, index_cls=VectorStoreIndex, embed_model=embed_model)
    return ToolRetrieverRouterQueryEngine(objects.as_retriever(similarity_top_k=top_k), llm=make_llm(url))


def call(qe: Any, use_async: bool) -> Any:
    return asyncio.run(qe.aquery(QUESTIONS[0])) if use_async else qe.query(QUESTIONS[0])


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("top_k", [1, 2])
def test_answers_metadata_and_spans_are_stocks(server: Any, traced: Any, embed_model: Any,  # noqa: F811
                                               top_k: int, use_async: bool) -> None:
    stock = engine(traced, server.url, embed_model, top_k)
    fast = ayo_llamaindex.optimize(engine(traced, server.url, embed_model, top_k))
    assert isinstance(fast, OptimizedToolRetrieverRouterQueryEngine)
    want, got = call(stock, use_async), call(fast, use_async)
    assert_same(want, got)
    names = [t.metadata.name for t in want.metadata["retrieved_tools"]]
    assert len(names) == top_k and [t.metadata.name for t in got.metadata["retrieved_tools"]] == names
    assert span_tree(lambda: call(fast, use_async)) == span_tree(lambda: call(stock, use_async))
    assert [m.name for m in fast.explain().opaque] == ["retriever"]

