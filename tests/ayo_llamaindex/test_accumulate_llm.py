"""``accumulate`` / ``compact_accumulate`` on the real server: same text as stock, per-chunk calls concurrent."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import Accumulate
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, assert_same

pytestmark = pytest.mark.llm
MAX_TOKENS = 64


def make_llm(url: str, chat: bool = True, **kw: Any) -> OpenAILike:
    return OpenAILike(model=kw.pop("model", "SmolLM2-135M-Instruct"), api_base=url, api_key="none",
                      is_chat_model=chat, temperature=0.0, max_tokens=kw.pop("max_tokens", MAX_TOKENS), **kw)


def synth_calls(fast: Any) -> list[Any]:
    return [c for c in fast.last_trace.engine_calls if c.node == "synthesize"]


# two of the four pairs in the default suite (CI time), each mode and each model kind once; all in make test-long
@pytest.mark.parametrize(("chat", "mode"), [
    pytest.param(True, "accumulate", id="True-accumulate"),
    pytest.param(False, "compact_accumulate", id="False-compact_accumulate"),
    pytest.param(True, "compact_accumulate", id="True-compact_accumulate", marks=pytest.mark.long),
    pytest.param(False, "accumulate", id="False-accumulate", marks=pytest.mark.long)])
def test_same_text_calls_concurrent(llm_url, index, mode, chat) -> None:
    # a small context window makes compact_accumulate pack the 3 chunks into more than one call
    llm = make_llm(llm_url, chat=chat, context_window=(200 if chat else 150) if mode == "compact_accumulate" else 3900)
    stock = index.as_query_engine(llm=llm, similarity_top_k=3, response_mode=mode)
    fast = ayo_llamaindex.optimize(stock)
    expected = stock.query(QUESTIONS[0])
    got = fast.query(QUESTIONS[0])
    assert_same(expected, got)
    assert str(got).startswith("Response 1: ") and "\n---------------------\nResponse 2: " in str(got)
    calls = synth_calls(fast)
    assert len(calls) >= 2
    assert max(c.start for c in calls) < min(c.end for c in calls)  # all in flight at once (stock: one by one)
    text = fast.explain()
    assert f"Synthesis(mode={mode})" in text and "(opaque)" not in text
    assert_same(asyncio.run(stock.aquery(QUESTIONS[1])), asyncio.run(fast.aquery(QUESTIONS[1])))


def test_hand_built_accumulate_use_async(llm_url, index) -> None:
    llm = make_llm(llm_url)
    synth = Accumulate(llm=llm, use_async=True)
    stock = RetrieverQueryEngine(index.as_retriever(similarity_top_k=2), response_synthesizer=synth)
    assert_same(stock.query(QUESTIONS[1]), ayo_llamaindex.optimize(stock).query(QUESTIONS[1]))


def test_streaming_accumulate_raises_as_stock(llm_url, index) -> None:
    """Stock refuses to stream in accumulate mode; Ayo runs it as stock does (opaque) and raises the same."""
    stock = index.as_query_engine(llm=make_llm(llm_url), similarity_top_k=2, response_mode="accumulate",
                                  streaming=True)
    fast = ayo_llamaindex.optimize(stock)
    with pytest.raises(ValueError, match="Unable to stream in Accumulate response mode"):
        stock.query(QUESTIONS[0])
    with pytest.raises(ValueError, match="Unable to stream in Accumulate response mode"):
        fast.query(QUESTIONS[0])
    assert "streaming=True" in fast.explain()


@pytest.mark.parametrize("mode", ["accumulate", "compact_accumulate"])
def test_server_rejection_raises_the_sdks_error(llm_url, index, mode) -> None:
    llm = make_llm(llm_url, model="no-such-model", max_retries=0)
    stock = index.as_query_engine(llm=llm, similarity_top_k=3, response_mode=mode)
    with pytest.raises(openai.NotFoundError) as stock_error:
        stock.query(QUESTIONS[0])
    with pytest.raises(openai.NotFoundError) as fast_error:
        ayo_llamaindex.optimize(stock).query(QUESTIONS[0])
    assert str(fast_error.value) == str(stock_error.value)


def test_output_cls_stays_opaque(llm_url, index) -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        text: str

    synth = get_response_synthesizer(llm=make_llm(llm_url), response_mode="accumulate", output_cls=Answer)
    fast = ayo_llamaindex.optimize(RetrieverQueryEngine(index.as_retriever(similarity_top_k=2),
                                                        response_synthesizer=synth))
    assert "output_cls is set" in fast.explain()


@pytest.mark.parametrize("mode", ["generation", "no_text", "context_only"])
@pytest.mark.parametrize("chat", [True, False])
def test_node_free_modes_same_as_stock(llm_url, index, mode, chat, monkeypatch) -> None:
    """generation: its one call (on the question alone) on Ayo's engine; no_text / context_only: no call."""
    from llama_index.core import Settings

    llm = make_llm(llm_url, chat=chat)
    monkeypatch.setattr(Settings, "_llm", llm)  # NoText / ContextOnly are built from Settings.llm (OpenAI by default)
    stock = index.as_query_engine(llm=llm, similarity_top_k=3, response_mode=mode)
    fast = ayo_llamaindex.optimize(stock)
    assert_same(stock.query(QUESTIONS[0]), fast.query(QUESTIONS[0]))
    assert len(synth_calls(fast)) == (1 if mode == "generation" else 0)
    assert f"Synthesis(mode={mode})" in str(fast.explain())
    assert_same(asyncio.run(stock.aquery(QUESTIONS[1])), asyncio.run(fast.aquery(QUESTIONS[1])))
