"""The dispatcher's spans of optimized composed engines against stock's (``test_spans.py``'s check):
TransformQueryEngine with HyDE under ``query()`` and ``aquery()`` (the transform's ``_run`` span with its
sync predict on both paths, then the inner engine's own ``query``/``_query`` spans around its steps).
Offline: the fake OpenAI server (its answers are not JSON, so the selector and question-generator
engines, Router and SubQuestion, are compared on the real server in their own tests' events)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
from llama_index.core.query_engine import TransformQueryEngine

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import QUESTIONS
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures


def hyde(index: Any, url: str) -> Any:
    llm = make_llm(url)
    return TransformQueryEngine(index.as_query_engine(llm=llm, similarity_top_k=2), HyDEQueryTransform(llm=llm))


BUILDERS = {"hyde": hyde}


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_composed_span_tree_is_stocks(server: Any, traced: Any, kind: str, use_async: bool) -> None:  # noqa: F811
    def run(engine: Any) -> Any:
        return lambda: asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])

    want = span_tree(run(BUILDERS[kind](traced, server.url)))
    got = span_tree(run(ayo_llamaindex.optimize(BUILDERS[kind](traced, server.url))))
    assert got == want
