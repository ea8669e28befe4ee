"""Shared by the adapter conformance cases (``from tests.adapters.common import ...``): the user
component's knobs, the fake model server on loopback, event paths, Ayo's loop tasks."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from tests.ayo_langchain.lc_helpers import DOCS, FakeOpenAIServer
from tests.stub_http import JSONHandler, LoopbackServer

QUESTIONS = ["What does json.dumps do?", "How do I join paths?"]
Event = tuple[str, ...]  # an event's labels from its root run down to itself

__all__ = ["DOCS", "QUESTIONS", "Event", "Knobs", "VLLMLikeServer", "ayo_loop_tasks", "event_paths",
           "serve_on_loopback"]


class VLLMLikeServer(FakeOpenAIServer):
    """The tests' fake OpenAI server, opening a chat stream as vLLM does: with an empty role chunk.

    Ayo's engine stands in for a vLLM server, so its streams open that way too (``ayo_shims.openai_client``);
    a stock client reading this fake then sees the same chunks as one reading Ayo's.
    """

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = super().handle(request)
        if not (request.url.path.endswith("/chat/completions") and json.loads(request.content).get("stream")):
            return response
        first, sep, rest = response.content.partition(b"\n\n")
        event = json.loads(first.removeprefix(b"data: "))
        opening = {**event, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}]}
        content = b"data: " + json.dumps(opening).encode() + sep + first + sep + rest
        return httpx.Response(200, content=content, headers={"content-type": "text/event-stream"})


@dataclass
class Knobs:
    """How the user's own component behaves on the next calls: sleeps ``delay`` seconds, raises if ``fail``."""

    delay: float = 0.0
    fail: bool = False

    def error(self, question: str) -> ValueError:
        return ValueError(f"user component failed on {question!r}")


def event_paths(runs: dict[Any, tuple[str, Any]], order: list[Any]) -> list[Event]:
    """Each run (``run id -> (label, parent id)``; ``order``: the runs) as its path from the root, sorted
    (concurrent siblings may start in either order)."""
    def path(run_id: Any) -> Event:
        out: list[str] = []
        while run_id in runs:
            label, run_id = runs[run_id]
            out.append(label)
        return tuple(reversed(out))

    return sorted(path(r) for r in order)


def ayo_loop_tasks() -> list[asyncio.Task]:
    """Unfinished tasks on Ayo's background loop (the one both adapters' sync calls run on)."""
    from ayo_core.runtime import bridge

    async def tasks() -> list[asyncio.Task]:
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]

    return asyncio.run_coroutine_threadsafe(tasks(), bridge.loop()).result(5)


def serve_on_loopback(fake: FakeOpenAIServer) -> LoopbackServer:
    """``fake`` behind a real socket on 127.0.0.1 (for a client Ayo must recognize: no custom transport)."""
    class Handler(JSONHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["content-length"]))
            answer = fake.handle(httpx.Request("POST", f"http://loopback{self.path}", content=body))
            self.reply(answer.status_code, answer.content, kind=answer.headers["content-type"])

    return LoopbackServer(Handler)
