"""``RetrieverRouterQueryEngine`` on the real server (64 output tokens): the engine the retrieved node names
answers through Ayo's engine with stock's text and source nodes, under ``query()`` and ``aquery()``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.query_engine import RetrieverRouterQueryEngine
from llama_index.core.schema import TextNode

import ayo_llamaindex
from ayo_llamaindex.retriever_router import OptimizedRetrieverRouterQueryEngine
from tests.ayo_llamaindex.conftest import QUESTIONS, assert_same
from tests.ayo_llamaindex.test_accumulate_llm import make_llm
from tests.ayo_llamaindex.test_retriever_router_offline import DESCRIPTIONS

pytestmark = pytest.mark.llm


def router(llm_url: str, index: Any, embed_model: Any) -> RetrieverRouterQueryEngine:
    """As LlamaIndex's docs build it: one node per engine (its ``tool_name`` and what it answers), a top-1
    retriever over them, and a function from the node to its engine."""
    llm = make_llm(llm_url)  # max_tokens=64
    by_name = {"encoding": index.as_query_engine(llm=llm, similarity_top_k=1),
               "sorting": index.as_query_engine(llm=llm, similarity_top_k=2, response_mode="tree_summarize")}
    nodes = [TextNode(text=text, metadata={"tool_name": name}) for name, text in DESCRIPTIONS.items()]
    retriever = VectorStoreIndex(nodes, embed_model=embed_model).as_retriever(similarity_top_k=1)
    return RetrieverRouterQueryEngine(retriever, lambda node: by_name[node.metadata["tool_name"]])


@pytest.mark.parametrize("question", QUESTIONS)
def test_same_answers_as_stock(llm_url: str, index: Any, embed_model: Any, question: str) -> None:
    stock = router(llm_url, index, embed_model)
    fast = ayo_llamaindex.optimize(router(llm_url, index, embed_model))
    assert isinstance(fast, OptimizedRetrieverRouterQueryEngine)
    assert_same(stock.query(question), fast.query(question))
    assert_same(asyncio.run(stock.aquery(question)), asyncio.run(fast.aquery(question)))
    [chosen] = fast.plan.engines.values()  # the chosen engine's stand-in, built once for both paths
    assert chosen.last_trace.engine_calls  # its synthesis went through Ayo's LLM engine
