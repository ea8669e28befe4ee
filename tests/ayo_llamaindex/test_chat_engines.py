"""Chat engines, stock vs optimized on the real vLLM server (fp32, eager, greedy): every recognized chat mode
in every call style gives the same response text, sources, source nodes, stream chunks and memory contents
after each turn; errors are stock's; a user's subclass runs as the user's object with a warning."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from ayo_llamaindex.chat_engine import OptimizedChatEngine

pytestmark = pytest.mark.llm
MODES = ["condense_plus_context", "context", "condense_question"]
STYLES = ["chat", "achat", "stream_chat", "astream_chat"]
TURNS = ["How do I turn Python objects into JSON?", "And how do I read it back?", "Which module keeps a list sorted?"]
LONG_TURNS = ["What does the json module do?", "How is it different from pickle?", "What is a heap queue?",
              "Which module handles spreadsheets data?", "How do I keep a list sorted without sorting it again?"]


def make_llm(url: str, max_tokens: int = 16, model: str = "SmolLM2-135M-Instruct") -> OpenAILike:
    return OpenAILike(model=model, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                      max_tokens=max_tokens, context_window=8192)


def make_engine(index: Any, url: str, mode: str, max_tokens: int = 16, **kw: Any) -> Any:
    return index.as_chat_engine(chat_mode=mode, llm=make_llm(url, max_tokens), similarity_top_k=2, **kw)


def node_facts(nodes: Any) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, None if n.score is None else round(n.score, 5)) for n in nodes or []]


def memory_facts(engine: Any) -> list[tuple[str, str]]:
    return [(str(m.role), str(m.content)) for m in engine.chat_history]


def source_facts(response: Any) -> list[tuple[str, str, Any]]:
    return [(s.tool_name, s.content, s.raw_input) for s in response.sources]


async def one_turn(engine: Any, style: str, message: str) -> dict[str, Any]:
    """One turn in ``style``: the response's text (and stream deltas), sources, nodes, then the memory."""
    deltas: list[str] = []
    if style == "chat":
        response = await asyncio.to_thread(engine.chat, message)
    elif style == "achat":
        response = await engine.achat(message)
    elif style == "stream_chat":
        response = await asyncio.to_thread(engine.stream_chat, message)
        deltas = await asyncio.to_thread(lambda: list(response.response_gen))  # joins the history writer
    else:
        response = await engine.astream_chat(message)
        deltas = [d async for d in response.async_response_gen()]  # awaits the history writer
    text = "".join(deltas) if deltas else str(response.response)
    if style.endswith("stream_chat"):
        # it streamed, and the chunks add up to the text; where one chunk ends is the server's timing (vLLM
        # coalesces tokens a slow reader has not taken yet), not the pipeline's: stock's own runs differ there
        assert len(deltas) > 1 and text.strip() == str(response.response).strip(), deltas
    return {"text": text, "sources": source_facts(response),
            "nodes": node_facts(response.source_nodes), "memory": memory_facts(engine)}


def converse(engine: Any, style: str, turns: list[str]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [await one_turn(engine, style, message) for message in turns]

    return asyncio.run(run())


def assert_same_conversation(stock: list[dict[str, Any]], fast: list[dict[str, Any]]) -> None:
    assert len(stock) == len(fast)
    for i, (s, f) in enumerate(zip(stock, fast, strict=True)):
        assert f == s, f"turn {i} differs:\nstock={s}\nfast={f}"


# The default suite (CI time) runs each mode with one sync and one async style, one streamed and one not,
# and every style at least once; make test-long runs the other six pairs.
DEFAULT_PAIRS = {("condense_plus_context", "chat"), ("condense_plus_context", "astream_chat"),
                 ("context", "achat"), ("context", "stream_chat"),
                 ("condense_question", "stream_chat"), ("condense_question", "achat")}
MODE_STYLE = [pytest.param(m, s, id=f"{m}-{s}", marks=() if (m, s) in DEFAULT_PAIRS else pytest.mark.long)
              for m in MODES for s in STYLES]


@pytest.mark.parametrize(("mode", "style"), MODE_STYLE)
def test_each_mode_and_call_style_matches_stock(llm_url, index, mode, style) -> None:
    stock = make_engine(index, llm_url, mode)
    fast = ayo_llamaindex.optimize(make_engine(index, llm_url, mode))
    assert isinstance(fast, OptimizedChatEngine) and fast.mode == mode
    expected = converse(stock, style, TURNS)
    assert_same_conversation(expected, converse(fast, style, TURNS))
    assert expected[-1]["memory"] and len(expected[-1]["memory"]) == 2 * len(TURNS)
    assert fast.last_trace is not None  # the turn ran as an Ayo graph
    if mode == "condense_question":  # the last turn's condense decode went to Ayo's engine (streamed turns too)
        assert fast.last_trace.engine_calls
    fast.reset()
    stock.reset()
    assert fast.chat_history == stock.chat_history == []


# five-turn conversations: long (make test-long); the default suite's long turns are
# test_li_long_answers.py::test_chat_engine_streamed (two streamed turns at 64 tokens)
@pytest.mark.long
def test_five_questions_with_long_answers_match_stock(llm_url, index) -> None:
    """``condense_plus_context`` with 64-token outputs: a five-turn conversation, every condense step real."""
    stock = make_engine(index, llm_url, "condense_plus_context", max_tokens=64)
    fast = ayo_llamaindex.optimize(make_engine(index, llm_url, "condense_plus_context", max_tokens=64))
    expected = converse(stock, "achat", LONG_TURNS)
    assert_same_conversation(expected, converse(fast, "achat", LONG_TURNS))
    assert max(len(t["text"]) for t in expected) > 100  # long answers really ran


@pytest.mark.long
def test_condense_question_streams_five_long_turns_as_stock(llm_url, index) -> None:
    """``condense_question`` streamed (``astream_chat``), 64-token outputs: the condense decodes on Ayo's engine."""
    stock = make_engine(index, llm_url, "condense_question", max_tokens=64)
    fast = ayo_llamaindex.optimize(make_engine(index, llm_url, "condense_question", max_tokens=64))
    expected = converse(stock, "astream_chat", LONG_TURNS)
    assert_same_conversation(expected, converse(fast, "astream_chat", LONG_TURNS))
    assert sum(len(t["text"].split()) > 30 for t in expected) >= 3
    assert fast.last_trace.engine_calls  # the last turn's condense step


def test_explicit_chat_history_and_classes_built_directly(llm_url, index) -> None:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    history = [ChatMessage(role=MessageRole.USER, content="I work with Python files."),
               ChatMessage(role=MessageRole.ASSISTANT, content="Good: the standard library helps.")]

    def build() -> Any:
        return CondensePlusContextChatEngine.from_defaults(index.as_retriever(similarity_top_k=2),
                                                           llm=make_llm(llm_url), system_prompt="Be brief.")

    stock, fast = build(), ayo_llamaindex.optimize(build())
    s, f = stock.chat(TURNS[1], chat_history=history), fast.chat(TURNS[1], chat_history=history)
    assert (str(f), source_facts(f), node_facts(f.source_nodes)) == (str(s), source_facts(s), node_facts(s.source_nodes))
    assert memory_facts(fast) == memory_facts(stock)


def test_errors_are_stocks_and_leave_memory_unchanged(llm_url, index) -> None:
    import openai

    stock = index.as_chat_engine(chat_mode="context", llm=make_llm(llm_url, model="no-such-model"))
    fast = ayo_llamaindex.optimize(index.as_chat_engine(chat_mode="context", llm=make_llm(llm_url, model="no-such-model")))
    with pytest.raises(openai.NotFoundError) as stock_error:
        stock.chat(TURNS[0])
    with pytest.raises(openai.NotFoundError) as fast_error:
        fast.chat(TURNS[0])
    assert fast_error.value.status_code == stock_error.value.status_code
    assert memory_facts(fast) == memory_facts(stock) == []


class BrokenRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise ValueError(f"index offline for {query_bundle.query_str!r}")


def test_a_failing_user_retriever_raises_its_own_error(llm_url) -> None:
    def build() -> Any:
        return CondensePlusContextChatEngine.from_defaults(BrokenRetriever(), llm=make_llm(llm_url))

    stock, fast = build(), ayo_llamaindex.optimize(build())
    assert isinstance(fast, OptimizedChatEngine)
    for engine in (stock, fast):
        with pytest.raises(ValueError, match="index offline for 'How do I turn"):
            asyncio.run(engine.achat(TURNS[0]))
        assert memory_facts(engine) == []


def test_a_users_subclass_runs_as_the_users_object_with_a_warning(llm_url, index, caplog) -> None:
    class ShoutingEngine(CondensePlusContextChatEngine):
        def _condense_question(self, chat_history: list, latest_message: str) -> str:
            return latest_message.upper()

    engine = ShoutingEngine.from_defaults(index.as_retriever(), llm=make_llm(llm_url))
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
        assert ayo_llamaindex.optimize(engine) is engine
    assert "ShoutingEngine" in caplog.text and "_condense_question" in caplog.text
    simple = index.as_chat_engine(chat_mode="simple", llm=make_llm(llm_url))
    assert ayo_llamaindex.optimize(simple) is simple


def test_explain_lists_what_was_lowered(llm_url, index) -> None:
    fast = ayo_llamaindex.optimize(make_engine(index, llm_url, "condense_plus_context"))
    text = str(fast.explain())
    for expected in ("condense", "LLMCall", "Retrieval", "Synthesis(mode=compact)", "condense_plus_context"):
        assert expected in text, text
    fast.chat(TURNS[0])
    fast.chat(TURNS[1])
    explained = fast.explain()
    assert explained.node("condense") is not None and explained.node("retrieve.search") is not None
    assert ayo_llamaindex.optimize(fast) is fast
