"""A call Ayo streams for a listener, where stock's is not streamed, reports the usage of a non-streamed answer.

vLLM writes a stream's usage event without its null fields (``exclude_none``) and a non-streamed body
with them (``prompt_tokens_details.multimodal_tokens: null`` for a text prompt, ``completion_tokens_details:
null``). The routed copy answers such a call from the stream, so it puts back what the server's
non-streamed body would have held; a server that is not vLLM is answered with its stream's usage as it
is. The server is a loopback stub answering as vLLM 0.32 does (a test double: the real server is
compared in ``tests/ayo_langchain/test_lc_observation_llm.py``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from ayo_core.engines.llm_client import LLMEngine
from ayo_langchain.runnable import routed_copy
from ayo_shims import openai_client
from tests.stub_http import JSONHandler, LoopbackServer, sse

MODEL = "SmolLM2-135M-Instruct"
DETAILS = {"cached_tokens": 0, "created_cache_tokens": 0}


def _handler(fingerprint: str) -> type[JSONHandler]:
    head = {"id": "chatcmpl-stub", "created": 1, "model": MODEL, "system_fingerprint": fingerprint}
    usage = {"prompt_tokens": 5, "total_tokens": 7, "completion_tokens": 2}

    class Handler(JSONHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if not self.json_body().get("stream"):  # vLLM's body: every usage field, null ones too
                body = {**head, "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "A file."}, "finish_reason": "stop",
                     "logprobs": None}],
                        "usage": {**usage, "prompt_tokens_details": {**DETAILS, "multimodal_tokens": None},
                                  "completion_tokens_details": None}}
                self.reply(200, json.dumps(body).encode())
                return
            chunk = {**head, "object": "chat.completion.chunk"}
            events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": f, "logprobs": None}]}
                      for d, f in (({"role": "assistant", "content": ""}, None), ({"content": "A "}, None),
                                   ({"content": "file."}, None), ({}, "stop"))]
            # vLLM's usage event: exclude_none, so no null field
            events.append({**chunk, "choices": [], "usage": {**usage, "prompt_tokens_details": DETAILS}})
            self.reply(200, sse(events), kind="text/event-stream")

    return Handler


def _usage_seen_by_stock(url: str) -> dict[str, Any]:
    model = ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_retries=0)
    return model.invoke("hi").response_metadata["token_usage"]


def _usage_seen_through_ayo(url: str) -> dict[str, Any]:
    async def routed() -> dict[str, Any]:
        engine = LLMEngine(url, model=MODEL)
        heard: list[str] = []
        try:  # a listener: the engine streams the call (as for a multi-query's lines)
            with openai_client.route(openai_client.Route(llm=engine, on_delta=heard.append)):
                model = ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_retries=0)
                message = await routed_copy(model).ainvoke("hi")
        finally:
            await engine.aclose()
        assert "".join(heard) == "A file."
        return message.response_metadata["token_usage"]

    return asyncio.run(routed())


@pytest.mark.parametrize("fingerprint", ["vllm-0.32.0-8a0fb69e", "other-server"])
def test_a_call_streamed_for_a_listener_reports_a_bodys_usage(fingerprint: str) -> None:
    stub = LoopbackServer(_handler(fingerprint))
    try:
        got, stock = _usage_seen_through_ayo(stub.url), _usage_seen_by_stock(stub.url)
    finally:
        stub.close()
    if fingerprint.startswith("vllm"):
        assert got == stock
        assert "multimodal_tokens" in got["prompt_tokens_details"], got  # the field the stream left out
    else:  # not vLLM: its stream's usage as it came (no field made up)
        assert "multimodal_tokens" not in got["prompt_tokens_details"], got
