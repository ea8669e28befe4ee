"""A FunctionAgent's tool calls start as soon as their arguments are complete in the model's stream.

The 135M model of this machine does not write tool calls on its own (see test_agents.py), so these
scheduling tests use a scripted OpenAI-style server on loopback (a fake, said here: no real model
here produces several tool calls in one message). It streams chunks with a delay between them, as
a server decoding would. The agent's model is LlamaIndex's real ``OpenAILike`` class, so the tool
calls are accumulated and parsed by LlamaIndex's own code. Compared: stock vs optimized, the same
answer, events (in order), memory and tool errors; the first tool started before the model's
message ended only in the optimized one.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context

import ayo_llamaindex
from tests.ayo_llamaindex.test_agents import run_agent
from tests.stub_http import JSONHandler, LoopbackServer

CHUNK_DELAY = 0.15
QUESTION = "What does json.loads do? And 2 * 21?"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _call(index: int, args: str, name: str | None = None, call_id: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": args}
    if name is not None:
        function["name"] = name
    part: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        part.update(id=call_id, type="function")
    return _chunk({"tool_calls": [part]})


TOOL_MESSAGE = [_chunk({"role": "assistant", "content": None}),
                _call(0, "", "search", "call-a"), _call(0, '{"query": "json'), _call(0, '.loads"}'),
                _call(1, "", "calculator", "call-b"), _call(1, '{"expression": '), _call(1, '"2 * 21"}'),
                _chunk({}, "tool_calls")]
ANSWER = [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "json.loads parses JSON; "}),
          _chunk({"content": "2 * 21 = 42."}), _chunk({}, "stop")]


def _whole(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streamed completion the chunks add up to."""
    content, calls, finish = "", {}, None
    for c in chunks:
        choice = c["choices"][0]
        finish = choice["finish_reason"] or finish
        content += choice["delta"].get("content") or ""
        for part in choice["delta"].get("tool_calls", []):
            call = calls.setdefault(part["index"], {"id": part.get("id"), "type": "function",
                                                    "function": {"name": "", "arguments": ""}})
            call["function"]["name"] += part["function"].get("name") or ""
            call["function"]["arguments"] += part["function"]["arguments"]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


class ScriptedServer(LoopbackServer):
    """Streams TOOL_MESSAGE to a conversation without tool results, ANSWER to one with them;
    records when each stream ended."""

    def __init__(self) -> None:
        self.ended: list[float] = []
        ended = self.ended

        class Handler(JSONHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.json_body()
                answered = any(m.get("role") == "tool" for m in body["messages"])
                if not body.get("stream"):
                    self.reply(200, json.dumps(_whole(ANSWER if answered else TOOL_MESSAGE)).encode())
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for chunk in [*(ANSWER if answered else TOOL_MESSAGE), "[DONE]"]:
                    time.sleep(CHUNK_DELAY)
                    if chunk == "[DONE]":
                        # the stream's end, taken before the client can read it (a time taken after the
                        # write races with a client that reads [DONE] and the body's end at once)
                        ended.append(time.perf_counter())
                    data = b"data: " + (chunk.encode() if isinstance(chunk, str) else json.dumps(chunk).encode())
                    data += b"\n\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        super().__init__(Handler)


def _concurrent(item: Any) -> bool:
    """A tool call's events or result message: the calls of one message run concurrently (in stock
    too), so their events interleave and their results arrive in the order the tools finish, which
    the early start changes."""
    if isinstance(item, tuple) and item and item[0] in {"ToolCall", "ToolCallResult"}:
        return True
    return isinstance(item, dict) and str(item.get("role")) in {"tool", "MessageRole.TOOL"}


def canon(value: Any, key: str = "") -> Any:
    """``run_agent``'s outcome with the results of concurrent tool calls in a fixed order."""
    if isinstance(value, dict):
        return {k: canon(v, k) for k, v in value.items()}
    if not isinstance(value, list | tuple):
        return value
    items = [canon(v) for v in value]
    if key == "tool_calls":
        return sorted(items, key=repr)
    out: list[Any] = []
    run: list[Any] = []
    for item in [*items, None]:
        if item is not None and _concurrent(item):
            run.append(item)
            continue
        out.extend(sorted(run, key=repr))
        run = []
        if item is not None:
            out.append(item)
    return type(value)(out) if isinstance(value, tuple) and not hasattr(value, "_fields") else out


@pytest.fixture
def server() -> Any:
    s = ScriptedServer()
    yield s
    s.close()


def make_agent(url: str, starts: dict[str, float], search_raises: bool = False) -> FunctionAgent:
    from llama_index.llms.openai_like import OpenAILike

    async def search(query: str) -> str:
        """Look a name up in the Python documentation."""
        starts["search"] = time.perf_counter()
        await asyncio.sleep(0.05)
        if search_raises:
            raise ValueError(f"search service down for {query!r}")
        return f"[{query}] Deserialize a JSON document to a Python object."

    def calculator(expression: str) -> str:
        """Do arithmetic on an expression like 12 * 7."""
        starts["calculator"] = time.perf_counter()
        a, _, b = expression.partition("*")
        return str(int(a) * int(b))

    llm = OpenAILike(model="scripted", api_base=url, api_key="none", is_chat_model=True,
                     is_function_calling_model=True, temperature=0.0)
    return FunctionAgent(tools=[FunctionTool.from_defaults(async_fn=search),
                                FunctionTool.from_defaults(fn=calculator)], llm=llm)


@pytest.mark.parametrize("search_raises", [False, True])
def test_a_tool_starts_before_the_message_ends_and_the_run_is_stock(server: ScriptedServer,
                                                                     search_raises: bool) -> None:
    stock_starts: dict[str, float] = {}
    fast_starts: dict[str, float] = {}
    stock = make_agent(server.url, stock_starts, search_raises)
    fast = ayo_llamaindex.optimize(make_agent(server.url, fast_starts, search_raises))

    want = asyncio.run(run_agent(stock, QUESTION))
    stock_ended = server.ended[0]
    got = asyncio.run(run_agent(fast, QUESTION))
    fast_ended = server.ended[2]
    assert canon(got) == canon(want)  # answer, every event in order, memory (concurrent results as a set)
    assert want[0] == "json.loads parses JSON; 2 * 21 = 42."
    names = [name for name, _ in want[1]]
    assert names.count("ToolCall") == 2 and names.count("ToolCallResult") == 2
    results = {e["tool_name"]: e for name, e in want[1] if name == "ToolCallResult"}
    assert results["search"]["tool_output"]["is_error"] is search_raises
    # stock ran the search after the message ended; Ayo as soon as its arguments were complete
    assert stock_starts["search"] > stock_ended
    assert fast_starts["search"] < fast_ended - 2 * CHUNK_DELAY
    assert fast_starts["calculator"] > fast_ended  # the last call of a message: no early start
    run = fast.last_run
    assert [e["tool"] for e in run.early_tools.log] == ["search"]
    assert run.early_tools.untaken == 0  # the call_tool step took it
    assert "1 tool call(s) started as soon as their arguments were complete" in str(fast.explain())


def test_not_streaming_or_needing_the_context_nothing_starts_early(server: ScriptedServer) -> None:
    starts: dict[str, float] = {}
    quiet = make_agent(server.url, starts)
    quiet.streaming = False
    fast = ayo_llamaindex.optimize(quiet)
    got = asyncio.run(run_agent(fast, QUESTION))
    assert got[0] == "json.loads parses JSON; 2 * 21 = 42." and not fast.last_run.early_tools.log

    async def search(ctx: Context, query: str) -> str:
        """Look a name up in the Python documentation."""
        return f"[{query}] Deserialize a JSON document to a Python object."

    search.__annotations__ = {"ctx": Context, "query": str, "return": str}  # real types (future annotations)
    with_ctx = make_agent(server.url, starts)
    with_ctx.tools = [FunctionTool.from_defaults(async_fn=search), with_ctx.tools[1]]
    fast = ayo_llamaindex.optimize(with_ctx)
    got = asyncio.run(run_agent(fast, QUESTION))
    assert got[0] == "json.loads parses JSON; 2 * 21 = 42." and not fast.last_run.early_tools.log
