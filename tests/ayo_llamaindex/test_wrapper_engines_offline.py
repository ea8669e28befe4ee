"""Offline: engines that wrap another in their own loop (``RetryQueryEngine``, ``RetryGuidelineQueryEngine``,
``RetrySourceQueryEngine``, ``MultiStepQueryEngine``) against stock: their code runs as the user's, the inner
engine is Ayo's stand-in (its LLM on Ayo's engine, through the tests' fake OpenAI server). Answers, source
nodes, errors, and every instrumentation span with the events sent inside it, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult, GuidelineEvaluator, RelevancyEvaluator
from llama_index.core.indices.query.query_transform import StepDecomposeQueryTransform
from llama_index.core.query_engine import (
    CustomQueryEngine,
    MultiStepQueryEngine,
    RetryGuidelineQueryEngine,
    RetryQueryEngine,
    RetrySourceQueryEngine,
)

import ayo_llamaindex
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.source_evaluations import ConcurrentSourceEvaluator
from ayo_llamaindex.wrapper_engines import OptimizedWrapperEngine
from ayo_shims.llamaindex_engines import retry_source_evaluator
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


class GateEvaluator(BaseEvaluator):
    """Fails every response evaluation (all its sources as contexts); passes each per-source one after a
    short wait, counting how many are in flight at once. Its ``evaluate`` is the base one."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on, self.in_flight, self.most, self.sources = fail_on, 0, 0, []

    def _get_prompts(self) -> dict:
        return {}

    def _update_prompts(self, prompts: dict) -> None:
        pass

    async def aevaluate(self, query: Any = None, response: Any = None, contexts: Any = None,
                        **kwargs: Any) -> EvaluationResult:
        if contexts is None or len(contexts) != 1:  # the response's own evaluation
            return EvaluationResult(query=query, response=response, passing=False)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        self.sources.append(contexts[0])
        if self.fail_on is not None and self.fail_on in contexts[0]:
            raise RuntimeError(f"evaluator failed on {self.fail_on!r}")
        return EvaluationResult(query=query, response=response, passing=True)


def retry_source(index: Any, url: str, evaluator: BaseEvaluator) -> RetrySourceQueryEngine:
    inner = index.as_query_engine(llm=make_llm(url), similarity_top_k=2)
    return RetrySourceQueryEngine(inner, evaluator, llm=make_llm(url), max_retries=1)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_failed_evaluation_runs_the_per_source_evaluations_at_once(server: Any, traced: Any,  # noqa: F811
                                                                    use_async: bool) -> None:
    def call(engine: Any) -> Any:
        return asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])

    stock_eval, fast_eval = GateEvaluator(), GateEvaluator()
    stock = retry_source(traced, server.url, stock_eval)
    fast = ayo_llamaindex.optimize(retry_source(traced, server.url, fast_eval))
    assert_same(call(stock), call(fast), by="content")
    assert stock_eval.most == 1 and fast_eval.most == 2  # stock: one after another; Ayo: both at once
    assert sorted(fast_eval.sources) == sorted(stock_eval.sources) and len(stock_eval.sources) == 2
    concurrent = fast._evaluator  # noqa: SLF001 - the running copy's evaluator
    assert isinstance(concurrent, ConcurrentSourceEvaluator) and concurrent.started == 2
    assert not concurrent._ready  # noqa: SLF001 - every result run ahead was taken by stock's loop
    assert "the per-source evaluations run at once (GateEvaluator's own code)" in str(fast.explain())
    assert retry_source_evaluator(fast.stock) is fast_eval  # the user's engine keeps its evaluator


def test_a_failing_source_evaluation_raises_stocks_error(server: Any, traced: Any) -> None:  # noqa: F811
    nodes = traced.as_retriever(similarity_top_k=2).retrieve(QUESTIONS[0])
    last = nodes[1].node.get_content()[:20]  # the second source's evaluation fails
    stock = retry_source(traced, server.url, GateEvaluator(fail_on=last))
    fast = ayo_llamaindex.optimize(retry_source(traced, server.url, GateEvaluator(fail_on=last)))
    want, got = outcome(lambda: stock.query(QUESTIONS[0])), outcome(lambda: fast.query(QUESTIONS[0]))
    assert want[0] == "error" and got == want
    assert not fast._evaluator._ready  # noqa: SLF001 - nothing left behind for a later query


def test_an_evaluator_or_engine_with_its_own_evaluate_loop_is_left_as_it_is(server: Any, traced: Any) -> None:  # noqa: F811
    class OwnEvaluate(GateEvaluator):
        def evaluate(self, *args: Any, **kwargs: Any) -> EvaluationResult:
            return super().evaluate(*args, **kwargs)

    class OwnLoop(RetrySourceQueryEngine):
        def _query(self, query_bundle: Any) -> Any:
            return super()._query(query_bundle)

    own_eval = OwnEvaluate()
    fast = ayo_llamaindex.optimize(retry_source(traced, server.url, own_eval))
    assert fast._evaluator is own_eval  # noqa: SLF001
    inner = traced.as_query_engine(llm=make_llm(server.url), similarity_top_k=2)
    plain = GateEvaluator()
    fast = ayo_llamaindex.optimize(OwnLoop(inner, plain, llm=make_llm(server.url), max_retries=1))
    assert fast._evaluator is plain  # noqa: SLF001
    fast.query(QUESTIONS[0])
    assert plain.most == 1


class TwoEngines(CustomQueryEngine):
    """A ``CustomQueryEngine`` as its docs write one: fields holding the engines its ``custom_query`` calls."""

    first: BaseQueryEngine
    second: BaseQueryEngine

    def custom_query(self, query_str: str) -> str:
        return f"{self.first.query(query_str)} | {self.second.query(query_str)}"

    async def acustom_query(self, query_str: str) -> str:
        first, second = await asyncio.gather(self.first.aquery(query_str), self.second.aquery(query_str))
        return f"{first} | {second}"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_custom_engines_fields_are_optimized_under_its_own_code(server: Any, traced: Any,  # noqa: F811
                                                                   use_async: bool) -> None:
    def build() -> TwoEngines:
        return TwoEngines(first=traced.as_query_engine(llm=make_llm(server.url), similarity_top_k=1),
                          second=traced.as_query_engine(llm=make_llm(server.url), similarity_top_k=2))

    def call(engine: Any) -> Any:
        return lambda: asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])

    stock, user = build(), build()
    first = user.first
    fast = ayo_llamaindex.optimize(user)
    assert isinstance(fast, OptimizedWrapperEngine) and sorted(fast.inners) == ["first", "second"]
    assert all(isinstance(qe, OptimizedQueryEngine) and qe.plan.kind != "opaque" for qe in fast.inners.values())
    assert str(call(fast)()) == str(call(stock)())
    assert span_tree(call(fast)) == span_tree(call(stock))
    assert user.first is first  # the user's engine keeps its fields
    assert "the engines it calls are optimized (first: RetrieverQueryEngine, second: RetrieverQueryEngine)" in str(
        fast.explain())


def test_a_custom_engine_without_engine_fields_runs_as_the_users_object(server: Any) -> None:  # noqa: F811
    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return f"echo: {query_str}"

    fast = ayo_llamaindex.optimize(Echo())
    assert not isinstance(fast, OptimizedWrapperEngine) and str(fast.query("hi")) == "echo: hi"
