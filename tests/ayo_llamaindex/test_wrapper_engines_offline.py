"""Offline: engines that wrap another in their own loop (``RetryQueryEngine``, ``RetryGuidelineQueryEngine``,
``RetrySourceQueryEngine``, ``MultiStepQueryEngine``) against stock: their code runs as the user's, the inner
engine is Ayo's stand-in (its LLM on Ayo's engine, through the tests' fake OpenAI server). Answers, source
nodes, errors, and every instrumentation span with the events sent inside it, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.evaluation import GuidelineEvaluator, RelevancyEvaluator
from llama_index.core.indices.query.query_transform import StepDecomposeQueryTransform
from llama_index.core.query_engine import (
    MultiStepQueryEngine,
    RetryGuidelineQueryEngine,
    RetryQueryEngine,
    RetrySourceQueryEngine,
)

import ayo_llamaindex
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.wrapper_engines import OptimizedWrapperEngine
from tests.ayo_llamaindex.li_helpers import QUESTIONS, assert_same
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures and the recorder


def wrapper(kind: str, index: Any, url: str) -> Any:
    inner = index.as_query_engine(llm=make_llm(url), similarity_top_k=2)
    if kind == "retry":
        return RetryQueryEngine(inner, RelevancyEvaluator(llm=make_llm(url)), max_retries=2)
    if kind == "retry_source":
        return RetrySourceQueryEngine(inner, RelevancyEvaluator(llm=make_llm(url)), llm=make_llm(url), max_retries=1)
    if kind == "retry_guideline":
        return RetryGuidelineQueryEngine(inner, GuidelineEvaluator(llm=make_llm(url)), max_retries=1)
    transform = StepDecomposeQueryTransform(llm=make_llm(url), verbose=False)
    return MultiStepQueryEngine(inner, query_transform=transform, index_summary="Python standard library docs",
                                num_steps=2)


def outcome(run: Any) -> Any:
    try:
        return ("ok", run())
    except Exception as exc:  # noqa: BLE001 - compared with stock's
        return ("error", type(exc).__name__, str(exc))


KINDS = ["retry", "retry_source", "retry_guideline", "multistep"]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_answers_spans_and_events_are_stocks(server: Any, traced: Any, kind: str, use_async: bool) -> None:  # noqa: F811
    def call(engine: Any) -> Any:
        return lambda: asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])

    stock = wrapper(kind, traced, server.url)
    fast = ayo_llamaindex.optimize(wrapper(kind, traced, server.url))
    assert isinstance(fast, OptimizedWrapperEngine)
    assert isinstance(fast.inner, OptimizedQueryEngine) and fast.inner.plan.kind != "opaque"
    want, got = outcome(call(stock)), outcome(call(fast))
    assert got[0] == want[0]
    if want[0] == "ok":  # a source retry's SummaryIndex and multi-step's step notes are new nodes per call
        assert_same(want[1], got[1], by="content" if kind in ("retry_source", "multistep") else "id")
    else:
        assert got == want
    assert span_tree(lambda: outcome(call(fast))) == span_tree(lambda: outcome(call(stock)))


def test_the_users_engine_is_left_as_it_was(server: Any, traced: Any) -> None:  # noqa: F811
    stock = wrapper("retry", traced, server.url)
    inner = stock._query_engine  # noqa: SLF001 - the object the user built
    fast = ayo_llamaindex.optimize(stock)
    fast.query(QUESTIONS[1])
    assert stock._query_engine is inner and fast.stock is stock  # noqa: SLF001
    assert fast.max_retries == 2  # the wrapper's own attributes read through
    assert ayo_llamaindex.optimize(fast) is fast
    text = str(fast.explain())
    assert "RetryQueryEngine: its own control flow runs as the user's code" in text
    assert fast.last_trace is not None and fast.last_trace.status == "done"
