"""Offline: ``RecursiveRetriever`` (IndexNodes linking to per-document query engines or retrievers, as
LlamaIndex's recursive-retrieval guides build it) lowered: the root retriever on Ayo's engines, each level's
links followed at once; answers, source nodes, span trees as stock's under ``query()`` and ``aquery()``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import RecursiveRetriever
from llama_index.core.schema import IndexNode, QueryBundle

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import QUESTIONS, TEXTS, assert_same
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder

DOCS = {"serialization": [TEXTS[0], TEXTS[5]], "containers": [TEXTS[2], TEXTS[3]]}


def recursive_engine(url: str, embed_model: Any, links: str, linked: dict[str, Any] | None = None) -> Any:
    per_doc = {name: VectorStoreIndex.from_documents([Document(text=t, id_=f"{name}{i}") for i, t in enumerate(texts)],
                                                     embed_model=embed_model) for name, texts in DOCS.items()}
    top = VectorStoreIndex([IndexNode(text=f"Python docs about {name}", index_id=name, id_=f"link-{name}")
                            for name in DOCS], embed_model=embed_model)
    retrievers: dict[str, Any] = {"root": top.as_retriever(similarity_top_k=2)}
    engines: dict[str, Any] = {}
    if links == "engines":
        engines = linked or {name: index.as_query_engine(llm=make_llm(url), similarity_top_k=1)
                             for name, index in per_doc.items()}
    else:
        retrievers.update({name: index.as_retriever(similarity_top_k=1) for name, index in per_doc.items()})
    recursive = RecursiveRetriever("root", retriever_dict=retrievers, query_engine_dict=engines)
    return RetrieverQueryEngine.from_args(recursive, llm=make_llm(url))


def call(qe: Any, use_async: bool) -> Any:
    return asyncio.run(qe.aquery(QUESTIONS[0])) if use_async else qe.query(QUESTIONS[0])


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("links", ["engines", "retrievers"])
def test_answers_and_spans_are_stocks(server: Any, traced: Any, embed_model: Any, links: str,  # noqa: F811
                                      use_async: bool) -> None:
    stock = recursive_engine(server.url, embed_model, links)
    fast = ayo_llamaindex.optimize(recursive_engine(server.url, embed_model, links))
    want = call(stock, use_async)
    assert len(want.source_nodes) == 2  # both links followed
    assert_same(want, call(fast, use_async), by="content")  # each build indexes its own nodes
    assert span_tree(lambda: call(fast, use_async)) == span_tree(lambda: call(stock, use_async))
    explained = fast.explain()
    assert "Retrieval+ToolCall(links at once)" in str(explained) and explained.opaque == []


class Slow(BaseQueryEngine):
    """A user's engine that takes 0.2 s and counts how many of its kind run at once."""

    running = 0
    most = 0
    lock = threading.Lock()

    def __init__(self, name: str) -> None:
        super().__init__(callback_manager=None)
        self.name = name

    def _get_prompt_modules(self) -> dict:
        return {}

    def _query(self, query_bundle: QueryBundle) -> Response:
        with Slow.lock:
            Slow.running += 1
            Slow.most = max(Slow.most, Slow.running)
        time.sleep(0.2)
        with Slow.lock:
            Slow.running -= 1
        return Response(response=f"{self.name} on {query_bundle.query_str}")

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        return self._query(query_bundle)


def test_linked_query_engines_run_at_once(server: Any, traced: Any, embed_model: Any) -> None:  # noqa: F811
    def most_at_once(optimized: bool) -> tuple[int, str]:
        Slow.most = 0
        qe = recursive_engine(server.url, embed_model, "engines", {name: Slow(name) for name in DOCS})
        response = (ayo_llamaindex.optimize(qe) if optimized else qe).query(QUESTIONS[0])
        return Slow.most, sorted(n.node.get_content() for n in response.source_nodes)

    stock_most, stock_sources = most_at_once(False)
    fast_most, fast_sources = most_at_once(True)
    assert (stock_most, fast_most) == (1, 2) and fast_sources == stock_sources
