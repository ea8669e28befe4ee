"""Long answers on the real server (issue 30 item 3): each pattern the adapter lowers, stock vs Ayo at
64, 128 and 256 output tokens with ``make test-long``, and in the default suite the token-by-token
stream at 256 (marked ``slow``; a greedy 256-token answer holds the shorter ones as its prefix; the
other patterns' 256-token cases left CI's run when it neared its 90 minutes): the text,
the source nodes, and for the streamed patterns every token in order (cut where stock's stream is cut,
but for a server's merged events: ``tests/server_streams.py``). The short-answer suites (24-48 tokens)
cannot see a difference late in a decode or at a stream boundary. One question per pattern, called
once (the async paths are compared at shorter lengths elsewhere): a 128-token answer takes this 2-core
machine's server about 6 s.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
from llama_index.core.query_engine import RetrieverQueryEngine, TransformQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import assert_same
from tests.server_streams import assert_same_stream

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]
QUESTION = "Explain in detail how to serialize a Python object to JSON and read it back."
# issue 30 asks for at least 64 tokens (128 where the model writes that much) and asked for 256 per pattern
# in CI; CI's 70 minutes now hold one streamed pattern at 256 (LENGTHS), the others run in make test-long
LONG_ONLY = [pytest.param(n, marks=pytest.mark.long) for n in (64, 128, 256)]
LENGTHS = [*LONG_ONLY[:2], pytest.param(256, marks=pytest.mark.slow)]
MODES = ["compact", "refine", "tree_summarize", "accumulate", "generation"]


def make_llm(url: str, tokens: int) -> OpenAILike:
    return OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                      temperature=0.0, max_tokens=tokens)


def long_enough(text: str, tokens: int) -> bool:
    """The answer used most of its token budget (about 3 words per 4 tokens here): it did not end early."""
    return len(text.split()) >= tokens // 3


def check(stock: Any, fast: Any, tokens: int) -> None:
    want = stock.query(QUESTION)
    assert_same(want, fast.query(QUESTION))
    assert long_enough(str(want), tokens), "the model ended its answer early: pick a question it answers at length"


@pytest.mark.parametrize("tokens", LONG_ONLY)
@pytest.mark.parametrize("mode", [m for m in MODES if m != "refine"])
def test_synthesis_modes(llm_url: str, index: Any, mode: str, tokens: int) -> None:
    stock = index.as_query_engine(llm=make_llm(llm_url, tokens), similarity_top_k=2, response_mode=mode)
    check(stock, ayo_llamaindex.optimize(stock), tokens)


@pytest.mark.parametrize("tokens", LONG_ONLY)
def test_refine_long(llm_url: str, index: Any, tokens: int) -> None:
    stock = index.as_query_engine(llm=make_llm(llm_url, tokens), similarity_top_k=2, response_mode="refine")
    check(stock, ayo_llamaindex.optimize(stock), tokens)


@pytest.mark.parametrize("tokens", LENGTHS)
def test_streamed_response_token_by_token(llm_url: str, index: Any, tokens: int) -> None:
    stock = index.as_query_engine(llm=make_llm(llm_url, tokens), similarity_top_k=2, streaming=True)
    fast = ayo_llamaindex.optimize(stock)
    want = list(stock.query(QUESTION).response_gen)
    assert_same_stream(list(fast.query(QUESTION).response_gen), want)
    assert long_enough("".join(want), tokens)

    async def tokens_of(engine: Any) -> list[str]:
        response = await engine.aquery(QUESTION)
        return [t async for t in response.async_response_gen()]

    assert_same_stream(asyncio.run(tokens_of(fast)), asyncio.run(tokens_of(stock)))


@pytest.mark.parametrize("tokens", LONG_ONLY)
def test_fusion_refine(llm_url: str, index: Any, tokens: int) -> None:
    # no LLMRerank here: this model's choice lists rarely parse, so stock keeps no node and answers
    # "Empty Response" (the short-answer suites compare that); the refine chain's long answers are the point
    short = make_llm(llm_url, 64)  # the query generation: its lines are parsed
    fusion = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=short, num_queries=3,
                                  similarity_top_k=3)
    stock = RetrieverQueryEngine(
        fusion, response_synthesizer=get_response_synthesizer(llm=make_llm(llm_url, tokens), response_mode="refine"))
    check(stock, ayo_llamaindex.optimize(stock), tokens)


@pytest.mark.parametrize("tokens", LONG_ONLY)
def test_hyde(llm_url: str, index: Any, tokens: int) -> None:
    llm = make_llm(llm_url, tokens)
    stock = TransformQueryEngine(index.as_query_engine(llm=llm, similarity_top_k=2), HyDEQueryTransform(llm=llm))
    check(stock, ayo_llamaindex.optimize(stock), tokens)


@pytest.mark.parametrize("tokens", LONG_ONLY)
def test_chat_engine_streamed(llm_url: str, index: Any, tokens: int) -> None:
    """``condense_plus_context``: two turns, the second condensed from the first long answer, streamed."""
    def engine() -> Any:
        return index.as_chat_engine(chat_mode="condense_plus_context", llm=make_llm(llm_url, tokens),
                                    similarity_top_k=2)

    stock, fast = engine(), ayo_llamaindex.optimize(engine())
    for turn in (QUESTION, "Now give a complete example program that does both."):
        want = list(stock.stream_chat(turn).response_gen)
        assert_same_stream(list(fast.stream_chat(turn).response_gen), want)
    assert [str(m) for m in fast.chat_history] == [str(m) for m in stock.chat_history]
