"""An agent's next model call is warmed while its tools run, and nothing else changes.

A loopback OpenAI-compatible stub (a fake server, said here: this machine's vLLM is a CPU
server, where the device rule rightly warms nothing, and its 135M model does not call tools)
plays a vLLM: it says what device it runs on (``/server_info``) and its prefix cache settings
(``/metrics``), tokenizes ``messages`` + ``tools`` with a character tokenizer over a rendering
of them (``/tokenize``, as vLLM renders the chat template), records every request with its
arrival time, and answers a tool call, then a final answer. Stock and optimized agents run on
the same kind of stub; the real requests are compared byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import ayo_langchain
from ayo_core.engines import capabilities, device
from ayo_core.engines.prefix_warming import SAFETY_TOKENS

MODEL = "stub-model"
BLOCK = 4  # the stub's KV block size: warmed prefixes are whole blocks of it
TOOL_SECONDS = 1.0  # long enough for a first warm-up (device probe, two tokenizes) on a busy 2-core machine
QUESTION = "What does json.loads do?"
ANSWER = "json.loads parses a JSON document."
TOOL_CALL = {"index": 0, "id": "call-a", "type": "function",
             "function": {"name": "search", "arguments": json.dumps({"query": "json.loads"})}}


def render(body: dict[str, Any]) -> str:
    """The stub's chat template: every field of every message and the tools' schemas count."""
    text = f"<tools>{json.dumps(body.get('tools'), sort_keys=True)}</tools>"
    for m in body["messages"]:
        name = f":{m['name']}" if m.get("name") else ""
        calls = json.dumps(m.get("tool_calls"), sort_keys=True) if m.get("tool_calls") else ""
        text += f"<|{m['role']}{name}|>{m.get('content') or ''}{calls}{m.get('tool_call_id') or ''}<|end|>"
    return text + "<|assistant|>"


def tokens(body: dict[str, Any]) -> list[int]:
    return [ord(c) for c in render(body)]


class StubServer:
    """A fake vLLM on loopback (see the module doc)."""

    def __init__(self, device_name: str = "cuda", tokenize_status: int = 200, tokenize_delay: float = 0.0) -> None:
        self.requests: list[tuple[float, str, dict[str, Any]]] = []  # (arrival, path, body)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/server_info":
                    self._send(200, f"vllm_config: device_config={device_name}".encode(), "text/plain")
                elif self.path == "/metrics":
                    line = f'vllm:cache_config_info{{block_size="{BLOCK}",enable_prefix_caching="True"}} 1.0\n'
                    self._send(200, line.encode(), "text/plain")
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                stub.requests.append((time.perf_counter(), self.path, body))
                if self.path == "/tokenize":
                    time.sleep(tokenize_delay)
                    if tokenize_status != 200:
                        self._send(tokenize_status, b'{"error": {"message": "tokenizer down"}}')
                    else:
                        self._send(200, json.dumps({"tokens": tokens(body)}).encode())
                elif self.path == "/v1/completions":  # a prefill-only warm-up (max_tokens=1)
                    self._send(200, json.dumps({"id": "w", "object": "text_completion", "created": 0,
                                                "model": MODEL, "choices": [{"index": 0, "text": "x",
                                                                             "finish_reason": "length"}]}).encode())
                elif self.path == "/v1/chat/completions":
                    self._chat(body)
                else:
                    self._send(404, b"{}")

            def _chat(self, body: dict[str, Any]) -> None:
                answered = any(m["role"] == "tool" for m in body["messages"])
                if not body.get("stream"):
                    message = ({"role": "assistant", "content": ANSWER} if answered else
                               {"role": "assistant", "content": None,
                                "tool_calls": [{k: v for k, v in TOOL_CALL.items() if k != "index"}]})
                    out = {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL, "choices": [
                        {"index": 0, "message": message, "finish_reason": "stop" if answered else "tool_calls"}]}
                    self._send(200, json.dumps(out).encode())
                    return
                if answered:
                    deltas = [{"role": "assistant", "content": ANSWER[:10]}, {"content": ANSWER[10:]}]
                else:
                    head = {**TOOL_CALL, "function": {"name": "search", "arguments": ""}}
                    deltas = [{"role": "assistant", "content": None, "tool_calls": [head]},
                              {"tool_calls": [{"index": 0, "function": {"arguments": TOOL_CALL["function"]
                                                                        ["arguments"]}}]}]
                events = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
                events.append({"index": 0, "delta": {}, "finish_reason": "stop" if answered else "tool_calls"})
                payload = b"".join(b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0,
                                                           "model": MODEL, "choices": [e]}).encode() + b"\n\n"
                                   for e in events)
                self._send(200, payload + b"data: [DONE]\n\n", "text/event-stream")

            def _send(self, status: int, payload: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # a cancelled warm-up stopped reading
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # a port the OS reuses must not inherit what Ayo learned of an earlier stub there
        capabilities.forget(self.url)
        device._probed.pop(capabilities.root_url(self.url), None)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def posts(self, path: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, b) for t, p, b in self.requests if p == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def _device_from_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AYO_LLM_DEVICE", raising=False)  # the stub's /server_info decides


def agent(url: str, kind: str, ran: dict[str, float]) -> Any:
    @tool
    async def search(query: str) -> str:
        """Look a name up in the Python documentation."""
        ran["start"] = time.perf_counter()
        await asyncio.sleep(TOOL_SECONDS)
        ran["end"] = time.perf_counter()
        return f"[{query}] Deserialize a JSON document to a Python object."

    model = ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_retries=0)
    system = "Use the tools when they help, then answer briefly. " * 3  # a prefix worth whole blocks
    if kind == "create_agent":
        return create_agent(model, [search], system_prompt=system, name="helper")
    from langgraph.prebuilt import create_react_agent

    return create_react_agent(model, [search], prompt=system)


def canon(state: dict[str, Any]) -> list[Any]:
    return [(m.type, m.content, getattr(m, "name", None), [(c["name"], c["args"], c["id"])
                                                           for c in getattr(m, "tool_calls", [])],
             getattr(m, "tool_call_id", None)) for m in state["messages"]]


async def run(graph: Any, streaming: bool) -> list[Any]:
    x = {"messages": [("user", QUESTION)]}
    if not streaming:
        return canon(await graph.ainvoke(x))
    last = None
    async for mode, chunk in graph.astream(x, stream_mode=["messages", "values"]):
        if mode == "values":
            last = chunk
    return canon(last)


def stock_and_fast(kind: str, streaming: bool, **server: Any) -> tuple[Any, StubServer, Any, StubServer, dict]:
    """Stock on one stub, optimized on another of the same kind: (stock answer, its stub, fast answer, its
    stub, the optimized tool's run times)."""
    stock_stub, fast_stub = StubServer(**server), StubServer(**server)
    ran: dict[str, float] = {}
    try:
        want = asyncio.run(run(agent(stock_stub.url, kind, {}), streaming))
        fast = ayo_langchain.optimize(agent(fast_stub.url, kind, ran))
        got = asyncio.run(run(fast, streaming))
    finally:
        stock_stub.close()
        fast_stub.close()
    assert got == want
    # the real requests are stock's, but for the usage event Ayo's engine asks of a stream (the answer's token
    # counts, for its statistics; the caller gets no usage chunk it did not ask for)
    sent, stock_sent = ([b for _, b in stub.posts("/v1/chat/completions")] for stub in (fast_stub, stock_stub))
    for body, stock_body in zip(sent, stock_sent, strict=False):
        if body.get("stream") and body.get("stream_options") != stock_body.get("stream_options"):
            assert body.pop("stream_options") == {"include_usage": True} and "stream_options" not in stock_body
    assert sent == stock_sent
    assert not stock_stub.posts("/tokenize") and not stock_stub.posts("/v1/completions")
    return want, stock_stub, fast, fast_stub, ran


@pytest.mark.parametrize(("kind", "streaming"), [("create_agent", True), ("create_agent", False),
                                                 ("create_react_agent", True)])
def test_the_next_calls_prefix_is_warmed_while_the_tool_runs(kind: str, streaming: bool,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        want, _, fast, stub, ran = stock_and_fast(kind, streaming)
    assert want[-1][1] == ANSWER and [m[0] for m in want] == ["human", "ai", "tool", "ai"]
    (_, first), (next_at, following) = stub.posts("/v1/chat/completions")
    assert len(stub.posts("/v1/completions")) == 1, list(fast.ayo_plan.early_tools.warms.log)
    [(warm_at, warm)] = stub.posts("/v1/completions")
    ids = warm["prompt"]
    # a token prefix of the real next request, in whole blocks, that covers the whole conversation up to the
    # tool's result (the system prompt, the question, the tool call with its arguments, the tools' schemas)
    real = tokens(following)
    assert ids == real[:len(ids)] and len(ids) % BLOCK == 0
    assert '\\"query\\": \\"json.loads\\"' in "".join(map(chr, ids))  # the tool call's arguments
    # up to where the tool's result begins, minus the safety tokens, cut to a whole block
    result_at = render(following).index("[json.loads] Deserialize")
    assert result_at - SAFETY_TOKENS - BLOCK < len(ids) <= result_at - SAFETY_TOKENS
    # the server tokenized what the chat endpoint gets: the same messages and tools
    assert all(b["tools"] == first["tools"] for _, b in stub.posts("/tokenize"))
    # sent while the tool ran, before the next model request began
    assert warm_at < ran["end"] <= next_at
    entry = fast.ayo_plan.early_tools.warms.log[-1]
    assert entry["outcome"] == "warmed" and entry["tokens"] == len(ids) and entry["next_request"] is not None
    assert f"{len(ids)} tokens warmed" in str(fast.explain())
    assert "prompt prefix is warmed" in fast.ayo_plan.nodes["model" if kind == "create_agent" else "agent"].reason
    assert not fast.ayo_plan.early_tools.warms.tasks  # every warm-up task finished
    assert "Task was destroyed" not in caplog.text


def test_a_cpu_server_is_not_warmed() -> None:
    _, _, fast, stub, _ = stock_and_fast("create_agent", True, device_name="cpu")
    assert not stub.posts("/v1/completions") and not stub.posts("/tokenize")
    assert fast.ayo_plan.early_tools.warms.log[-1]["outcome"].startswith("not warmed: the device rule")


def test_a_failed_warm_up_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ayo_core.engines.next_call_warming"):
        _, _, fast, stub, _ = stock_and_fast("create_agent", False, tokenize_status=500)
    assert stub.posts("/tokenize") and not stub.posts("/v1/completions")
    assert fast.ayo_plan.early_tools.warms.log[-1]["outcome"].startswith("failed:")
    assert "warming the agent's next model call failed" in caplog.text


def test_a_warm_up_still_tokenizing_when_the_next_request_begins_is_cancelled() -> None:
    # the stub tokenizes for longer than the tool runs: a prefill sent after the request would only compete
    _, _, fast, stub, _ = stock_and_fast("create_react_agent", True, tokenize_delay=TOOL_SECONDS + 0.4)
    assert stub.posts("/tokenize") and not stub.posts("/v1/completions")
    assert fast.ayo_plan.early_tools.warms.log[-1]["outcome"].startswith("cancelled")
