"""An agent's tool calls start as soon as their arguments are complete in the model's stream.

The 135M model of this machine does not emit tool calls (see the README's tool-call probe), so
these scheduling tests use a fake streaming chat model that emits OpenAI-style tool-call chunks
with a delay between them (a fake, said here: no real model here can produce them). What is
compared is stock LangGraph vs the optimized agent: the same final state and message stream, and
the tool started before the model's message ended only in the optimized one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

import ayo_langchain

CHUNK_DELAY = 0.15


class StreamingToolModel(BaseChatModel):
    """Plays a script: per call, a list of chunks, streamed with ``CHUNK_DELAY`` between them."""

    script: list[list[AIMessageChunk]]
    played: list[int] = [0]
    ended: list[float] = []

    @property
    def _llm_type(self) -> str:
        return "scripted-streaming"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _next(self) -> list[AIMessageChunk]:
        chunks = self.script[self.played[0] % len(self.script)]
        self.played[0] += 1
        return chunks

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        merged = self._next()
        message = merged[0]
        for c in merged[1:]:
            message = message + c
        self.ended.append(time.perf_counter())
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=message.content, tool_calls=message.tool_calls, id=message.id))])

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        await asyncio.sleep(CHUNK_DELAY)
        return self._generate(messages, stop)

    async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        for chunk in self._next():
            await asyncio.sleep(CHUNK_DELAY)
            yield ChatGenerationChunk(message=chunk.model_copy())
        self.ended.append(time.perf_counter())


def script() -> list[list[AIMessageChunk]]:
    def part(index: int, args: str, name: str | None = None, call_id: str | None = None) -> AIMessageChunk:
        return AIMessageChunk(content="", id="m1", tool_call_chunks=[
            {"name": name, "args": args, "id": call_id, "index": index}])

    return [
        [part(0, "", "search", "call-a"), part(0, '{"query": "json'), part(0, '.loads"}'),
         part(1, "", "calculator", "call-b"), part(1, '{"expression": '), part(1, '"2 * 21"}'),
         AIMessageChunk(content="", id="m1", response_metadata={"finish_reason": "tool_calls"})],
        [AIMessageChunk(content="json.loads parses JSON; ", id="m2"), AIMessageChunk(content="2 * 21 = 42.", id="m2")],
    ]


def build(starts: dict[str, float]) -> tuple[Any, StreamingToolModel]:
    @tool
    async def search(query: str) -> str:
        """Look a name up in the Python documentation."""
        starts["search"] = time.perf_counter()
        await asyncio.sleep(0.05)
        return f"[{query}] Deserialize a JSON document to a Python object."

    @tool
    def calculator(expression: str) -> str:
        """Do arithmetic on an expression like 12 * 7."""
        starts["calculator"] = time.perf_counter()
        a, _, b = expression.partition("*")
        return str(int(a) * int(b))

    model = StreamingToolModel(script=script(), played=[0], ended=[])
    return create_agent(model, [search, calculator]), model


def canon(state: dict[str, Any]) -> list[Any]:
    return [(m.type, m.content, [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])],
             getattr(m, "tool_call_id", None)) for m in state["messages"]]


async def streamed(graph: Any) -> tuple[list[Any], list[Any]]:
    x = {"messages": [("user", "What does json.loads do? And 2 * 21?")]}
    tokens, last = [], None
    async for mode, chunk in graph.astream(x, stream_mode=["messages", "values"]):
        if mode == "messages":
            tokens.append((chunk[1]["langgraph_node"], chunk[0].content, repr(chunk[0].tool_call_chunks)
                           if hasattr(chunk[0], "tool_call_chunks") else ""))
        else:
            last = chunk
    return tokens, canon(last)


def test_tool_starts_before_the_model_message_ends_and_the_run_is_stock() -> None:
    stock_starts: dict[str, float] = {}
    fast_starts: dict[str, float] = {}
    stock, stock_model = build(stock_starts)
    fast_graph, fast_model = build(fast_starts)
    fast = ayo_langchain.optimize(fast_graph)
    assert "start as soon as their arguments are complete" in fast.ayo_plan.nodes["tools"].reason

    want = asyncio.run(streamed(stock))
    got = asyncio.run(streamed(fast))
    assert got[1] == want[1]  # the final state

    def by_node(tokens: list[Any]) -> tuple[list[Any], list[Any]]:
        # the model's tokens in order; the tool messages of concurrent calls arrive as each finishes, in
        # stock too (here the early search is done first): compared as a set
        return [t for t in tokens if t[0] == "model"], sorted(t for t in tokens if t[0] != "model")

    assert by_node(got[0]) == by_node(want[0])
    assert want[1][-1][1] == "json.loads parses JSON; 2 * 21 = 42." and len(want[1]) == 5
    # stock ran the tool after the message ended; Ayo when the search call's arguments were complete
    assert stock_starts["search"] > stock_model.ended[0]
    assert fast_starts["search"] < fast_model.ended[0] - 2 * CHUNK_DELAY
    early = dict(fast.ayo_plan.early_tools.started_before_message_end())
    assert early["search"] > 2 * CHUNK_DELAY and "calculator" in early  # the last call starts at the end
    assert fast.ayo_plan.early_tools.untaken == 0  # every early start was taken by the tools node
    assert "search: started" in fast.explain()


def test_without_a_streaming_model_nothing_starts_early() -> None:
    starts: dict[str, float] = {}
    stock, _ = build({})
    graph, _ = build(starts)
    fast = ayo_langchain.optimize(graph)
    x = {"messages": [("user", "What does json.loads do? And 2 * 21?")]}
    assert canon(asyncio.run(fast.ainvoke(x))) == canon(asyncio.run(stock.ainvoke(x)))
    with pytest.raises(NotImplementedError):  # an async-only tool under a sync call: stock's error, both sides
        stock.invoke(x)
    with pytest.raises(NotImplementedError):
        fast.invoke(x)
    assert not fast.ayo_plan.early_tools.log


@pytest.mark.parametrize("handled", [False, True])
def test_a_tool_started_early_that_raises_behaves_as_stock(handled: bool) -> None:
    from langgraph.prebuilt import ToolNode, create_react_agent

    def agent() -> Any:
        @tool
        async def search(query: str) -> str:
            """Look a name up in the Python documentation."""
            raise ValueError(f"search service down for {query!r}")

        @tool
        def calculator(expression: str) -> str:
            """Do arithmetic on an expression like 12 * 7."""
            return "42"

        model = StreamingToolModel(script=script(), played=[0], ended=[])
        return create_react_agent(model, ToolNode([search, calculator], handle_tool_errors=handled))

    async def outcome(graph: Any) -> Any:
        try:
            return await streamed(graph)
        except Exception as exc:
            return type(exc).__name__, str(exc)

    fast = ayo_langchain.optimize(agent())
    want = asyncio.run(outcome(agent()))
    got = asyncio.run(outcome(fast))
    if handled:  # the tool messages of concurrent calls arrive as each finishes: compared as a set
        assert (sorted(got[0]), got[1]) == (sorted(want[0]), want[1])
    else:
        assert got == want
    assert fast.ayo_plan.early_tools.log  # it did start early
    if handled:
        assert any("search service down" in str(m[1]) for m in want[1])
    else:
        assert want[0] == "ValueError"


def test_astream_events_are_stocks_run_by_run() -> None:
    """Under ``astream_events`` the early-started tools report the runs stock's tools node reports: the same
    runs under the same parents, each with stock's events (when a tool's run starts is timing)."""
    from tests.ayo_langchain.test_event_stream import _runs

    x = {"messages": [("user", "What does json.loads do? And 2 * 21?")]}
    want_events, want_runs = asyncio.run(_runs(build({})[0], x))
    got_events, got_runs = asyncio.run(_runs(ayo_langchain.optimize(build({})[0]), x))
    assert got_runs == want_runs
    assert set(got_events) == set(want_events)
    for run in want_events:
        if run.split(" ")[0] in ("LangGraph", "LangGraph/tools"):
            # the two tool calls run at once: their messages come as each finishes (timing, in stock too)
            assert sorted(got_events[run]) == sorted(want_events[run]), run
        else:
            assert got_events[run] == want_events[run], run
