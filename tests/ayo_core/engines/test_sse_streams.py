"""Ayo's LLM client reads every event-stream shape the stock client (the OpenAI SDK) reads, with the same text.

A loopback aiohttp server sends each shape (a test double: real servers each send one shape;
``transformers serve`` ends without ``[DONE]``); the SDK and Ayo's engine read the same bytes
and must agree: the same text where the SDK accepts the stream, a failure where it fails.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from aiohttp import web

from ayo_core.engines import capabilities, prefix_warming
from ayo_core.engines.llm_client import LLMEngine, LLMEngineError, LLMRequestError
from ayo_core.engines.sse import ServerSentEvent, SSEDecoder

MESSAGES = [{"role": "user", "content": "hi"}]
DELTAS = ["Hel", "lo", " wor", "ld\n", "é€"]  # a multi-byte tail: chunk borders may cut it


def chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra},
                      ensure_ascii=False)


def events(fmt: str = "data: {}\n\n") -> str:
    return "".join(fmt.format(chunk(d)) for d in DELTAS) + fmt.format(chunk(finish="stop"))


# name -> body; each is a stream the SDK reads as the text "".join(DELTAS)
ACCEPTED = {
    "vllm": events() + "data: [DONE]\n\n",
    "no_done": events(),  # transformers serve
    "data_without_space": events("data:{}\n\n"),
    "event_lines": events("event: completion.chunk\ndata: {}\n\n"),
    "comments": ": keep-alive\n\n" + events(": ping\ndata: {}\n\n") + ": bye\n\n",
    "id_and_retry": events("id: 7\nretry: 1000\ndata: {}\n\n") + "data: [DONE]\n\n",
    "crlf": events("data: {}\r\n\r\n") + "data: [DONE]\r\n\r\n",
    "bare_cr": events("data: {}\r\r"),
    "unknown_fields": events("foo: bar\ndata: {}\nbaz\n\n"),
    "done_then_junk": events() + "data: [DONE]\n\ndata: not json\n\n",
    "error_null": "".join(f"data: {chunk(d, error=None)}\n\n" for d in DELTAS),
    "usage_chunk_last": events() + "data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 0,
                                                          "model": "m", "choices": [], "usage": {
                                                              "prompt_tokens": 3, "completion_tokens": 5,
                                                              "total_tokens": 8}}) + "\n\n",
}


def split_data_lines(body: str) -> str:
    """Each event's JSON cut over two ``data:`` lines (the SDK joins them with a newline)."""
    out = []
    for line in body.split("\n"):
        if line.startswith("data: {"):
            cut = line.index('"choices"')
            out.append(line[:cut] + "\ndata: " + line[cut:])
        else:
            out.append(line)
    return "\n".join(out)


ACCEPTED["multi_line_data"] = split_data_lines(events())


# transformers serve's answer to a body with ``priority`` (FastAPI's 422, the field named)
TRANSFORMERS_422 = json.dumps({"detail": "Unexpected fields in the request: {'priority'}"})
ANSWER = {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}


@dataclass
class Stub:
    """What the loopback server sends: a stream's ``body`` in pieces of ``piece`` bytes (else :data:`ANSWER`);
    with ``reject_priority``, transformers serve's 422 to a body holding ``priority``."""

    body: str = ""
    piece: int = 7
    reject_priority: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


async def _handle(stub: Stub, request: web.Request) -> web.StreamResponse:
    body = await request.json()
    stub.requests.append(body)
    if stub.reject_priority and "priority" in body:
        return web.Response(text=TRANSFORMERS_422, status=422, content_type="application/json")
    if not body.get("stream"):
        return web.json_response(ANSWER)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    raw = stub.body.encode()
    for i in range(0, len(raw), stub.piece):
        await resp.write(raw[i:i + stub.piece])
    await resp.write_eof()
    return resp


@asynccontextmanager
async def serve(stub: Stub) -> AsyncIterator[Stub]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", lambda r: _handle(stub, r))
    app.router.add_post("/v1/completions", lambda r: _handle(stub, r))
    app.router.add_post("/tokenize", lambda r: web.json_response({"detail": "Not Found"}, status=404))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    stub.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield stub
    finally:
        await runner.cleanup()


async def stock_text(url: str) -> str:
    client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
    try:
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    finally:
        await client.close()


@pytest.mark.parametrize("piece", [3, 4096])
@pytest.mark.parametrize("shape", sorted(ACCEPTED))
async def test_every_stream_the_sdk_reads_reads_the_same_in_ayo(shape: str, piece: int) -> None:
    async with serve(Stub(ACCEPTED[shape], piece)) as stub:
        stock = await stock_text(stub.url)
        assert stock == "".join(DELTAS)  # the shape is one the SDK accepts
        engine = LLMEngine(stub.url, model="m")
        seen: list[str] = []
        result = await engine.chat(MESSAGES, stream_cb=seen.append)
        assert result.text == "".join(seen) == stock
        assert result.finish_reason == (None if shape == "error_null" else "stop")  # error_null has no finish chunk
        assert "".join([d async for d in engine.stream_chat(MESSAGES)]) == stock
        await engine.aclose()


async def test_usage_of_a_stream_without_done_is_read() -> None:
    async with serve(Stub(ACCEPTED["usage_chunk_last"])) as stub:
        result = await LLMEngine(stub.url, model="m").chat(MESSAGES, stream_cb=lambda d: None)
    assert (result.prompt_tokens, result.completion_tokens, result.text) == (3, 5, "".join(DELTAS))


async def test_an_event_the_body_ends_before_its_blank_line_is_dropped_as_by_the_sdk() -> None:
    body = events() + "data: " + chunk("TAIL") + "\n"  # no blank line: never dispatched (SSE rules)
    async with serve(Stub(body)) as stub:
        stock = await stock_text(stub.url)
        result = await LLMEngine(stub.url, model="m").chat(MESSAGES, stream_cb=lambda d: None)
    assert result.text == stock == "".join(DELTAS)


async def test_an_error_event_fails_the_call_with_the_servers_message_as_in_the_sdk() -> None:
    body = f"data: {chunk('Hel')}\n\n" + 'data: {"error": {"message": "out of KV blocks", "code": 500}}\n\n'
    async with serve(Stub(body)) as stub:
        with pytest.raises(openai.APIError, match="out of KV blocks"):
            await stock_text(stub.url)
        seen: list[str] = []
        with pytest.raises(LLMRequestError, match="out of KV blocks") as info:
            await LLMEngine(stub.url, model="m").chat(MESSAGES, stream_cb=seen.append)
    assert seen == ["Hel"] and info.value.status_code == 500 and "out of KV blocks" in (info.value.body or "")


async def test_a_malformed_event_fails_in_both() -> None:
    async with serve(Stub(f"data: {chunk('Hel')}\n\ndata: {{not json\n\n")) as stub:
        with pytest.raises(ValueError):
            await stock_text(stub.url)
        with pytest.raises(LLMEngineError, match="malformed stream event"):
            await LLMEngine(stub.url, model="m").chat(MESSAGES, stream_cb=lambda d: None)


async def test_completions_stream_without_done() -> None:
    texts = ["The", " sky", " is"]
    body = "".join("data: " + json.dumps({"choices": [{"index": 0, "text": t}]}) + "\n\n" for t in texts)
    async with serve(Stub(body)) as stub:
        engine = LLMEngine(stub.url, model="m")
        assert (await engine.complete("x", stream_cb=lambda d: None)).text == "The sky is"
        assert [d async for d in engine.stream_complete("x")] == texts


def test_decoder_follows_the_event_stream_rules() -> None:
    decoder = SSEDecoder()
    lines = ["id: 1", "event: a", "data: x", "data:y", "", ": comment", "", "retry: no", "data:  two spaces", ""]
    got = [e for e in map(decoder.decode, lines) if e is not None]
    # the last event id is kept for later events (the spec); an id-only blank line dispatches an empty event
    assert got == [ServerSentEvent("x\ny", "a", "1"), ServerSentEvent("", None, "1"),
                   ServerSentEvent(" two spaces", None, "1")]


# -- what transformers serve lacks, handled as stock handles it (stock never sends these) ------------------------

@pytest.mark.parametrize("streamed", [False, True])
async def test_a_422_naming_priority_drops_it_once_for_the_server(streamed: bool) -> None:
    async with serve(Stub(events(), reject_priority=True)) as stub:
        engine = LLMEngine(stub.url, model="m")
        cb = (lambda d: None) if streamed else None
        result = await engine.chat(MESSAGES, priority=3, stream_cb=cb)
        assert result.text == ("".join(DELTAS) if streamed else "ok")
        assert [("priority" in b) for b in stub.requests] == [True, False] and engine.accepts_priority is False
        await engine.chat(MESSAGES, priority=3, stream_cb=cb)
        assert len(stub.requests) == 3 and "priority" not in stub.requests[-1]  # no second 422


async def test_a_server_without_tokenize_is_never_warmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AYO_LLM_DEVICE", "cuda")  # an accelerator: warming would pay if the server could
    async with serve(Stub()) as stub:
        monkeypatch.setitem(capabilities._cache_info, capabilities.root_url(stub.url), (None, None))  # no /metrics
        assert await prefix_warming.warm_budget(stub.url) is not None
        with pytest.raises(LLMRequestError):
            await LLMEngine(stub.url, model="m").tokenize(prompt="x")
        try:
            assert (await capabilities.server_capabilities(stub.url)).tokenizes is False
            assert await prefix_warming.warm_budget(stub.url) is None
        finally:
            capabilities.forget(stub.url)
