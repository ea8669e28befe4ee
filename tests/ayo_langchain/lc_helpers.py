"""Helpers for the LangChain adapter tests.

Offline tests talk to :class:`FakeOpenAIServer`, an OpenAI-compatible server held in an
``httpx.MockTransport``: the stock ``ChatOpenAI``/``OpenAI`` reach it through their
``http_client``/``http_async_client``, Ayo's ``LLMEngine`` through its HTTP client, so
both sides send real request bodies that the tests compare, and get deterministic
answers derived from the prompt. Real-LLM tests (``@pytest.mark.llm``) use ``llm_url``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx

MODEL = "SmolLM2-135M-Instruct"
FAKE_URL = "http://fake-openai.test/v1"

DOCS = [
    ("json", "json.dumps serializes a Python object to a JSON formatted string."),
    ("json.loads", "json.loads parses a JSON document from a string into Python objects."),
    ("os.path", "os.path.join joins one or more path components intelligently."),
    ("re", "re.compile compiles a regular expression pattern into a pattern object."),
    ("datetime", "datetime.date represents a date in an idealized calendar."),
    ("collections", "collections.Counter is a dict subclass for counting hashable objects."),
    ("argparse", "argparse.ArgumentParser parses command line arguments and options."),
    ("hashlib", "hashlib.sha256 returns a hash object computing SHA-256 digests of bytes."),
]


def _answer(body: dict) -> str:
    """Deterministic 'generation' for a request: three lines that depend on the prompt."""
    if "messages" in body:
        prompt = "\n".join(str(m.get("content")) for m in body["messages"])
    else:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]  # as a server does: a one-prompt list is that prompt
        prompt = p if isinstance(p, str) else json.dumps(p)
    h = hashlib.sha256(prompt.encode()).hexdigest()
    words = [w for w in prompt.replace("\n", " ").split(" ") if w][-6:]
    text = f"Answer {h[:6]} about {' '.join(words)}\nWhat is {h[6:10]} json?\nHow to use {h[10:14]} paths?"
    if "```json" in prompt or "JSON object" in prompt:
        text = json.dumps({"answer": h[:8], "words": words[:2]})
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if limit:
        text = " ".join(text.split(" ")[: int(limit)])
    for s in body.get("stop") or []:
        if s in text:
            text = text[: text.index(s)]
    return text


class FakeOpenAIServer:
    """An OpenAI-compatible endpoint in memory; records every request body."""

    def __init__(self, answer: Callable[[dict], str] = _answer) -> None:
        self.answer = answer
        self.stream_delay = 0.0  # > 0: streamed answers trickle in (async clients only)
        self.requests: list[dict] = []
        self._lock = threading.Lock()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        path = request.url.path
        with self._lock:
            self.requests.append({"path": path, **body})
        if path.endswith("/tokenize"):
            text = json.dumps(body.get("messages")) if "messages" in body else body.get("prompt", "")
            return httpx.Response(200, json={"tokens": [ord(c) for c in text], "count": len(text)})
        chat = path.endswith("/chat/completions")
        prompts = body.get("prompt")
        if not chat and isinstance(prompts, list) and len(prompts) > 1 and isinstance(prompts[0], str):
            texts = [self.answer({**body, "prompt": [p]}) for p in prompts]  # a batch: one choice each
            return httpx.Response(200, json={
                "id": "cmpl-fake", "object": "text_completion", "created": 0, "model": body.get("model"),
                "choices": [{"index": i, "text": t, "finish_reason": "stop", "logprobs": None}
                            for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})
        text = self.answer(body)
        usage = {"prompt_tokens": 10, "completion_tokens": len(text.split(" ")), "total_tokens": 20}
        if body.get("stream"):
            data = _sse(body, text, chat, usage)
            content: Any = _trickle(data, self.stream_delay) if self.stream_delay else data
            return httpx.Response(200, content=content, headers={"content-type": "text/event-stream"})
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                  if chat else {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None})
        return httpx.Response(200, json={"id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion",
                                         "created": 0, "model": body.get("model"), "choices": [choice],
                                         "usage": usage})

    def completions(self) -> list[dict]:
        return [r for r in self.requests if not r["path"].endswith("/tokenize")]


async def _trickle(data: bytes, delay: float) -> Any:
    import asyncio

    for event in data.split(b"\n\n"):
        await asyncio.sleep(delay)
        yield event + b"\n\n"


def _sse(body: dict, text: str, chat: bool, usage: dict) -> bytes:
    pieces = [w + " " for w in text.split(" ")]
    pieces[-1] = pieces[-1][:-1]
    events = []
    for i, piece in enumerate(pieces):
        if chat:
            delta = {"content": piece, **({"role": "assistant"} if i == 0 else {})}
            choice = {"index": 0, "delta": delta, "finish_reason": None}
        else:
            choice = {"index": 0, "text": piece, "finish_reason": None, "logprobs": None}
        events.append({"id": "cmpl-fake", "object": "chunk", "created": 0, "model": body.get("model"),
                       "choices": [choice]})
    last = ({"index": 0, "delta": {"content": ""}, "finish_reason": "stop"} if chat
            else {"index": 0, "text": "", "finish_reason": "stop", "logprobs": None})
    events.append({"id": "cmpl-fake", "object": "chunk", "created": 0, "model": body.get("model"), "choices": [last]})
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({"id": "cmpl-fake", "object": "chunk", "created": 0, "model": body.get("model"),
                       "choices": [], "usage": usage})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def fake_chat(server: FakeOpenAIServer, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 40)
    return ChatOpenAI(model=MODEL, base_url=FAKE_URL, api_key="none", max_retries=0,
                      http_client=httpx.Client(transport=server.transport()),
                      http_async_client=httpx.AsyncClient(transport=server.transport()), **kw)


def fake_completion_llm(server: FakeOpenAIServer, **kw: Any) -> Any:
    from langchain_openai import OpenAI

    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 40)
    return OpenAI(model=MODEL, base_url=FAKE_URL, api_key="none", max_retries=0,
                  http_client=httpx.Client(transport=server.transport()),
                  http_async_client=httpx.AsyncClient(transport=server.transport()), **kw)


def format_docs(docs: list) -> str:
    return "\n\n".join(d.page_content for d in docs)


def concat(chunks: list) -> Any:
    """The streamed value: chunks added up (JSON parsers stream growing objects: the last one)."""
    if isinstance(chunks[0], dict) and not hasattr(chunks[0], "__add__"):
        return chunks[-1]
    out = chunks[0]
    for c in chunks[1:]:
        out = out + c
    return out


def plain(value: Any) -> Any:
    """Outputs made comparable: messages by type and content (ids and timings differ run to run)."""
    if hasattr(value, "content") and hasattr(value, "type"):
        return (value.type.replace("Chunk", "").replace("AIMessage", "ai"), value.content)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def check_equivalent(stock: Any, fast: Any, inputs: list[Any], stream: bool = True) -> list[Any]:
    """invoke, batch and the concatenated stream give the stock outputs; returns them."""
    expected = [plain(stock.invoke(x)) for x in inputs]
    assert [plain(fast.invoke(x)) for x in inputs] == expected
    assert plain(fast.batch(inputs)) == expected
    assert plain(stock.batch(inputs)) == expected
    if stream:
        for x, want in zip(inputs, expected, strict=True):
            assert plain(concat(list(stock.stream(x)))) == want
            assert plain(concat(list(fast.stream(x)))) == want
    return expected
