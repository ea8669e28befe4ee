"""Chat engines offline (the deterministic fake LLM, the real embedding model): every mode and call style
matches stock, explicit ``chat_history``/``prev_chunks`` behave as stock, what is not recognized stays the
user's object. The real-server equivalence is in test_chat_engines.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

import ayo_llamaindex
from ayo_llamaindex.chat_engine import OptimizedChatEngine
from tests.ayo_llamaindex.li_helpers import FakeLLM

MODES = ["condense_plus_context", "context", "condense_question"]
TURNS = ["How do I turn Python objects into JSON?", "And how do I read it back?"]


def history_of(engine: Any) -> list[tuple[str, str]]:
    return [(str(m.role), str(m.content)) for m in engine.chat_history]


async def turn(engine: Any, style: str, message: str, **kw: Any) -> tuple[str, list[str], list[Any]]:
    if style == "chat":
        r = await asyncio.to_thread(engine.chat, message, **kw)
    elif style == "achat":
        r = await engine.achat(message, **kw)
    elif style == "stream_chat":
        r = await asyncio.to_thread(engine.stream_chat, message, **kw)
        await asyncio.to_thread(lambda: list(r.response_gen))
    else:
        r = await engine.astream_chat(message, **kw)
        _ = [d async for d in r.async_response_gen()]
    nodes = [n.node.node_id for n in r.source_nodes or []]
    return str(r.response), nodes, [s.raw_input for s in r.sources]


@pytest.mark.parametrize("style", ["chat", "achat", "stream_chat", "astream_chat"])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_and_style_matches_stock_offline(index, mode, style) -> None:
    stock = index.as_chat_engine(chat_mode=mode, llm=FakeLLM(), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(index.as_chat_engine(chat_mode=mode, llm=FakeLLM(), similarity_top_k=2))
    assert isinstance(fast, OptimizedChatEngine)
    for message in TURNS:
        expected = asyncio.run(turn(stock, style, message))
        assert asyncio.run(turn(fast, style, message)) == expected
        assert history_of(fast) == history_of(stock)


def test_explicit_history_replaces_memory_as_in_stock(index) -> None:
    history = [ChatMessage(role=MessageRole.USER, content="I parse files."),
               ChatMessage(role=MessageRole.ASSISTANT, content="Which format?")]
    for mode in MODES:
        stock = index.as_chat_engine(chat_mode=mode, llm=FakeLLM())
        fast = ayo_llamaindex.optimize(index.as_chat_engine(chat_mode=mode, llm=FakeLLM()))
        for engine in (stock, fast):
            engine.chat(TURNS[0])
        assert str(fast.chat(TURNS[1], chat_history=history)) == str(stock.chat(TURNS[1], chat_history=history))
        assert history_of(fast) == history_of(stock), mode


class EmptyRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return []


def test_context_prev_chunks_and_the_argument_only_context_takes(index) -> None:
    prev = [NodeWithScore(node=TextNode(text="The csv module reads spreadsheets.", id_="prev"), score=1.0)]
    stock = ContextChatEngine.from_defaults(EmptyRetriever(), llm=FakeLLM())
    fast = ayo_llamaindex.optimize(ContextChatEngine.from_defaults(EmptyRetriever(), llm=FakeLLM()))
    s, f = stock.chat(TURNS[0], prev_chunks=prev), fast.chat(TURNS[0], prev_chunks=prev)
    assert (str(f), [n.node.node_id for n in f.source_nodes]) == (str(s), ["prev"])
    other = ayo_llamaindex.optimize(index.as_chat_engine(chat_mode="condense_plus_context", llm=FakeLLM()))
    with pytest.raises(TypeError, match="prev_chunks"):
        other.chat(TURNS[0], prev_chunks=prev)


def test_unrecognized_engines_stay_the_users_object_with_a_warning(index, caplog) -> None:
    class Tweaked(ContextChatEngine):
        def _get_nodes(self, message: str) -> list[NodeWithScore]:
            return []

    cases = [(index.as_chat_engine(chat_mode="simple", llm=FakeLLM()), "condense_plus_context"),
             (Tweaked.from_defaults(index.as_retriever(), llm=FakeLLM()), "overrides _get_nodes"),
             (index.as_chat_engine(chat_mode="condense_question", llm=FakeLLM(), streaming=True), "streaming=True")]
    for engine, why in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
            assert ayo_llamaindex.optimize(engine) is engine
        assert type(engine).__name__ in caplog.text and "returned unchanged" in caplog.text and why in caplog.text


def test_reoptimizing_and_the_stock_api(index) -> None:
    fast = ayo_llamaindex.optimize(index.as_chat_engine(chat_mode="context", llm=FakeLLM()))
    assert ayo_llamaindex.optimize(fast) is fast
    other = ayo_llamaindex.optimize(fast, policy="fifo")
    assert other is not fast and other.stock is fast.stock
    fast.chat(TURNS[0])
    assert len(fast.chat_history) == 2 and fast.stock.chat_history == fast.chat_history
    fast.reset()
    assert fast.chat_history == []
    text = str(fast.explain())
    assert "Retrieval" in text and "FakeLLM" in text  # the fake LLM is called as the user's object, and says so
