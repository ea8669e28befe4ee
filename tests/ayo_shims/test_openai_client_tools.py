"""Tool-calling requests through Ayo's LLM engine (the openai client shim): the message a model's own
client gets, now with the request scheduled by the engine instead of bypassing it.

Equivalence on the real server (``tools_llm_url``: vLLM's hermes parser and the tool-aware
template), with ``tool_choice="required"`` because the 135M model does not call a tool on its own.
The stream of several calls in one message, which that model does not write, runs against a
loopback stub server (a test double, said here) that streams a fixed message the way vLLM does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from ayo_core.engines.llm_client import LLMEngine, merge_tool_call_deltas
from ayo_langchain.runnable import routed_copy
from ayo_shims import openai_client
from tests.stub_http import JSONHandler, LoopbackServer, sse

MODEL = "SmolLM2-135M-Instruct"
QUESTIONS = ["What is 12 plus 30?", "Add 7 and 5.", "Please compute 100 + 23 with the tool."]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


class CountingEngine:
    """The engine, counting the requests it was given (to show the request went through it)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine, self.model, self.requests = engine, engine.model, []

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        return await self.engine.chat(messages, **kwargs)


def model(url: str, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=48, **kw)


def calls(message: Any) -> list[tuple[str, Any]]:
    return [(c["name"], c["args"]) for c in message.tool_calls]


async def summed(stream: Any) -> AIMessageChunk:
    total = None
    async for chunk in stream:
        total = chunk if total is None else total + chunk
    assert total is not None
    return total


async def outcome(call: Any) -> tuple[Any, ...]:
    """What a caller sees: the message's calls, text and finish reason, or the error. The 135M model's
    forced calls often have arguments that are not an object (e.g. ``[12, 30]``), which LangChain's
    ``AIMessage`` refuses when the message is not streamed: stock and Ayo must then fail alike."""
    try:
        m = await call
    except Exception as exc:  # noqa: BLE001 - compared with stock's outcome
        return "error", type(exc).__name__, str(exc)
    return "message", calls(m), m.content, m.response_metadata.get("finish_reason")


async def routed_answers(url: str, stream: bool) -> tuple[list[Any], CountingEngine]:
    """The routed copy's outcomes on QUESTIONS (bound to the tools, a call required), and its engine."""
    engine = CountingEngine(LLMEngine(url, model=MODEL))
    fast = routed_copy(model(url)).bind_tools([add, weather], tool_choice="required")
    out = []
    with openai_client.route(openai_client.Route(llm=engine)):
        for q in QUESTIONS:
            out.append(await outcome(summed(fast.astream(q)) if stream else fast.ainvoke(q)))
    return out, engine


@pytest.mark.llm
@pytest.mark.parametrize("stream", [False, True], ids=["ainvoke", "astream"])
def test_a_tool_calling_request_goes_through_the_engine_with_stocks_answer(tools_llm_url: str,
                                                                           stream: bool) -> None:
    stock = model(tools_llm_url).bind_tools([add, weather], tool_choice="required")

    async def stock_answers() -> list[Any]:
        return [await outcome(summed(stock.astream(q)) if stream else stock.ainvoke(q)) for q in QUESTIONS]

    expected = asyncio.run(stock_answers())
    got, engine = asyncio.run(routed_answers(tools_llm_url, stream))
    assert len(engine.requests) == len(QUESTIONS)
    assert all(r["tools"] and r["tool_choice"] == "required" for r in engine.requests)
    assert got == expected
    # the server did answer with tool calls (or arguments LangChain refuses, which only a call makes)
    assert any(o[0] == "error" or o[1] for o in expected)


# -- several calls in one streamed message (loopback stub: a test double) ----------------------

TWO_CALLS = [
    {"index": 0, "id": "call-a", "type": "function", "function": {"name": "add", "arguments": ""}},
    {"index": 0, "function": {"arguments": '{"a": 2, '}},
    {"index": 0, "function": {"arguments": '"b": 3}'}},
    {"index": 1, "id": "call-b", "type": "function", "function": {"name": "weather", "arguments": ""}},
    {"index": 1, "function": {"arguments": '{"city": "Oslo"}'}},
]


def _event(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}


class ToolStreamHandler(JSONHandler):
    """Streams "Let me check." and then the two calls, one delta per event, as vLLM does."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.json_body()
        if not body.get("stream"):
            message = {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call-a", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]}
            reply = {"id": "chatcmpl-stub", "object": "chat.completion", "created": 1, "model": MODEL,
                     "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}
            self.reply(200, json.dumps(reply).encode())
            return
        events = [_event({"role": "assistant", "content": ""}), _event({"content": "Let me "}),
                  _event({"content": "check."})]
        events += [_event({"tool_calls": [d]}) for d in TWO_CALLS]
        events.append(_event({}, "tool_calls"))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                           "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}})
        self.reply(200, sse(events), kind="text/event-stream")


@pytest.fixture
def stub() -> Any:
    server = LoopbackServer(ToolStreamHandler)
    yield server
    server.close()


def test_tool_call_deltas_merge_by_index() -> None:
    merged: list[dict[str, Any]] = []
    for delta in TWO_CALLS:
        merge_tool_call_deltas(merged, [delta])
    assert merged == [
        {"id": "call-a", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}},
        {"id": "call-b", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
    ]


def test_the_engine_hands_on_each_tool_call_delta_in_order_with_the_text(stub: Any) -> None:
    seen: list[Any] = []

    async def run() -> Any:
        engine = LLMEngine(stub.url, model=MODEL)
        try:
            return await engine.chat([{"role": "user", "content": "hi"}], tools=[{"type": "function"}],
                                     stream_cb=lambda t: seen.append(t), tool_call_cb=lambda d: seen.append(d))
        finally:
            await engine.aclose()

    result = asyncio.run(run())
    assert seen == ["Let me ", "check."] + [[d] for d in TWO_CALLS]
    assert result.text == "Let me check." and result.finish_reason == "tool_calls"
    assert [c["function"]["name"] for c in result.tool_calls] == ["add", "weather"]


@pytest.mark.parametrize("stream", [False, True], ids=["ainvoke", "astream"])
def test_the_routed_message_with_tool_calls_is_stocks(stub: Any, stream: bool) -> None:
    async def answer(chat: Any, route: bool) -> Any:
        bound = chat.bind_tools([add, weather])
        engine = CountingEngine(LLMEngine(stub.url, model=MODEL))
        ctx = openai_client.route(openai_client.Route(llm=engine)) if route else contextlib.nullcontext()
        with ctx:
            message = await (summed(bound.astream("hi")) if stream else bound.ainvoke("hi"))
        assert len(engine.requests) == int(route)
        return message

    expected = asyncio.run(answer(model(stub.url, max_retries=0), route=False))
    got = asyncio.run(answer(routed_copy(model(stub.url, max_retries=0)), route=True))
    assert got.content == expected.content == "Let me check."
    assert got.tool_calls == expected.tool_calls
    assert len(got.tool_calls) == (2 if stream else 1)
    assert got.response_metadata.get("finish_reason") == expected.response_metadata.get("finish_reason")
