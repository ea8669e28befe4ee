"""A chat stream through Ayo's engine opens as the server behind it opens it.

Servers differ: vLLM opens with an empty role chunk (``{"role": "assistant", "content": ""}``),
transformers serve with a role-only one (``{"role": "assistant"}``), other OpenAI-compatible servers
name the role on the first text and send no opening chunk. A stock model's stream (and so its
``on_chat_model_stream`` events and the chain's chunks) has one chunk more or less accordingly; the
routed copy's must match. The three servers are loopback stubs here (a test double: the real vLLM
and transformers serve are compared in ``tests/ayo_*/test_second_server_*.py``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from ayo_core.engines.llm_client import LLMEngine, StreamOpening
from ayo_langchain.runnable import routed_copy
from ayo_shims import openai_client
from tests.stub_http import JSONHandler, LoopbackServer, sse

MODEL = "SmolLM2-135M-Instruct"
WORDS = ["A ", "module ", "is ", "a ", "file."]
OPENINGS = {
    "vllm": {"role": "assistant", "content": ""},
    "transformers_serve": {"role": "assistant"},
    "role_with_text": None,
}


def _event(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}


def _handler(opening: dict[str, Any] | None) -> type[JSONHandler]:
    class Handler(JSONHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.json_body()
            events = [] if opening is None else [_event(opening)]
            for i, word in enumerate(WORDS):
                role = {"role": "assistant"} if opening is None and i == 0 else {}
                events.append(_event({"content": word, **role}))
            events.append(_event({}, "stop"))
            self.reply(200, sse(events), kind="text/event-stream")

    return Handler


@pytest.fixture(params=list(OPENINGS))
def server(request: pytest.FixtureRequest) -> Any:
    stub = LoopbackServer(_handler(OPENINGS[request.param]))
    stub.opening = OPENINGS[request.param]
    yield stub
    stub.close()


def _model(url: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_retries=0)


async def _chunks(chat: Any) -> list[tuple[str, str]]:
    return [(c.content, json.dumps(c.response_metadata, sort_keys=True)) async for c in chat.astream("hi")]


def test_the_routed_stream_opens_as_the_servers(server: Any) -> None:
    async def routed() -> tuple[list[tuple[str, str]], LLMEngine]:
        engine = LLMEngine(server.url, model=MODEL)
        try:
            with openai_client.route(openai_client.Route(llm=engine)):
                return await _chunks(routed_copy(_model(server.url))), engine
        finally:
            await engine.aclose()

    want = asyncio.run(_chunks(_model(server.url)))
    got, engine = asyncio.run(routed())
    assert got == want
    assert (want[0][0] == "") == (server.opening is not None)  # an opening chunk exactly where the server sends one
    assert engine.chat_stream_opening == StreamOpening(server.opening, server.opening is None)


@pytest.mark.parametrize(("event", "opening"), [
    (_event({"role": "assistant", "content": ""}), StreamOpening({"role": "assistant", "content": ""})),
    (_event({"role": "assistant"}), StreamOpening({"role": "assistant"})),
    (_event({"role": "assistant", "content": "Hi"}), StreamOpening(None, True)),
    (_event({"content": "Hi"}), StreamOpening(None, False)),
    ({"choices": [], "usage": {}}, None),
])
def test_the_opening_a_first_event_shows(event: dict[str, Any], opening: StreamOpening | None) -> None:
    assert StreamOpening.of(event) == opening
