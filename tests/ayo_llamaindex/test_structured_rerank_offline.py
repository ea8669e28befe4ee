"""``StructuredLLMRerank``: its batches' structured calls together under ``query()`` (stock: one after
another), its own async path under ``aquery()``; the same nodes, answers and events as stock.

The reranker's LLM here is the tests' fake LLM with a structured ``structured_predict`` that takes
0.3 s a call and scores documents by a word they share with the question (a fake: offline, and its
timing lets the test see whether the calls overlap).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.postprocessor import StructuredLLMRerank
from llama_index.core.postprocessor.structured_llm_rerank import DocumentRelevanceList, DocumentWithRelevance

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM, assert_same

CALL_SECONDS = 0.3


class StructuredFakeLLM(FakeLLM):
    """Scores each numbered document in the prompt by whether it shares a word with the question."""

    def structured_predict(self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **args: Any) -> Any:
        start = time.monotonic()
        time.sleep(CALL_SECONDS)
        if "fail" in args["query_str"]:
            raise ValueError(f"structured call failed on {args['context_str'][:20]!r}")
        words = {w.strip("?").lower() for w in args["query_str"].split()}
        docs = [part for part in args["context_str"].split("Document ")[1:]]
        scored = [DocumentWithRelevance(document_number=i + 1, relevance=1 + 3 * len(words & set(d.lower().split())))
                  for i, d in enumerate(docs)]
        CALLS.append((start, time.monotonic(), threading.get_ident()))
        return DocumentRelevanceList(documents=scored)

    async def astructured_predict(self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **args: Any) -> Any:
        return await asyncio.to_thread(self.structured_predict, output_cls, prompt, llm_kwargs, **args)


CALLS: list[tuple[float, float, int]] = []


def engine(index: Any, debug: LlamaDebugHandler | None = None) -> Any:
    llm = StructuredFakeLLM()
    rerank = StructuredLLMRerank(llm=llm, choice_batch_size=2, top_n=2)
    qe = index.as_query_engine(llm=FakeLLM(), similarity_top_k=6, node_postprocessors=[rerank])
    if debug is not None:
        cm = CallbackManager([debug])
        for part in (qe, qe.retriever, qe._response_synthesizer, rerank):  # noqa: SLF001 - the test's own engine
            part.callback_manager = cm
    return qe


def overlapping(calls: list[tuple[float, float, int]]) -> bool:
    return max(start for start, _, _ in calls) < min(end for _, end, _ in calls)


def test_batches_run_together_under_query(index) -> None:
    stock = engine(index)
    fast = ayo_llamaindex.optimize(engine(index))
    CALLS.clear()
    want = stock.query(QUESTIONS[0])
    assert len(CALLS) == 3 and not overlapping(CALLS)  # stock: three batches one after another
    CALLS.clear()
    assert_same(want, fast.query(QUESTIONS[0]))
    assert len(CALLS) == 3 and overlapping(CALLS)
    assert "postprocessor[0]: Transform" in str(fast.explain()) or "Transform" in str(fast.explain())


def test_aquery_takes_the_rerankers_own_async_path(index) -> None:
    stock, fast = engine(index), ayo_llamaindex.optimize(engine(index))
    assert_same(asyncio.run(stock.aquery(QUESTIONS[1])), asyncio.run(fast.aquery(QUESTIONS[1])))


def test_events_match_stock(index) -> None:
    def pairs(optimized: bool) -> list[tuple[str, int]]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        qe = engine(index, debug)
        (ayo_llamaindex.optimize(qe) if optimized else qe).query(QUESTIONS[0])
        return [(p[0].event_type.value, len(p[1].payload.get("nodes", []) if p[1].payload else []))
                for p in debug.get_event_pairs(CBEventType.RERANKING)]

    assert pairs(True) == pairs(False) and pairs(False)


def test_a_failing_batch_raises_stocks_error(index) -> None:
    stock, fast = engine(index), ayo_llamaindex.optimize(engine(index))
    with pytest.raises(ValueError) as stock_error:
        stock.query("fail json")
    with pytest.raises(ValueError) as fast_error:
        fast.query("fail json")
    assert str(fast_error.value) == str(stock_error.value)


def test_a_subclass_overriding_its_loop_stays_opaque(index) -> None:
    class Mine(StructuredLLMRerank):
        def _postprocess_nodes(self, nodes: Any, query_bundle: Any = None) -> Any:
            return nodes[:1]

    qe = index.as_query_engine(llm=FakeLLM(), similarity_top_k=4,
                               node_postprocessors=[Mine(llm=StructuredFakeLLM(), top_n=2)])
    fast = ayo_llamaindex.optimize(qe)
    assert_same(qe.query(QUESTIONS[0]), fast.query(QUESTIONS[0]))
    assert "overrides" in str(fast.explain())
