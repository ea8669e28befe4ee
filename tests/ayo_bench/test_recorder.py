"""The recording pass-through: forwards unchanged, times each request, counts tokens, passes hang-ups on.

The upstream here is a loopback stub (no vLLM server is needed to test a proxy's plumbing).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from ayo_bench.recorder import LLMRequestRecorder, StreamTokenCounter
from tests.stub_http import JSONHandler, LoopbackServer, sse

WORDS = ["one", " two", " three", " four"]


class Upstream(LoopbackServer):
    """Chat completions (JSON or a slow stream) and a GET; remembers what it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.stream_closed = threading.Event()
        server = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self.reply(200, json.dumps({"version": "stub", "path": self.path}).encode())

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.json_body()
                server.bodies.append(body)
                server.headers.append(dict(self.headers))
                if not body.get("stream"):
                    self.reply(200, json.dumps({"choices": [{"message": {"content": "".join(WORDS)}}],
                                                "usage": {"prompt_tokens": 7, "completion_tokens": 4,
                                                          "prompt_tokens_details": {"cached_tokens": 2}}}).encode())
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                try:
                    for i in range(body.get("max_tokens", 4)):
                        event = {"choices": [{"index": 0, "delta": {"content": WORDS[i % 4]}}]}
                        self.wfile.write(sse([event])[: -len(b"data: [DONE]\n\n")])
                        self.wfile.flush()
                        time.sleep(0.02)
                    self.wfile.write(b"data: [DONE]\n\n")
                except OSError:  # the proxy hung up: what vLLM sees as an aborted request
                    server.stream_closed.set()
                self.close_connection = True

        super().__init__(Handler)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


def test_forwards_unchanged_and_records_times_and_tokens(upstream: Upstream) -> None:
    with LLMRequestRecorder(upstream.url) as rec, httpx.Client(timeout=10) as client:
        t0 = time.monotonic()
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        answer = client.post(f"{rec.base_url}/chat/completions?x=1", json=body, headers={"X-Probe": "yes"})
        assert answer.json()["choices"][0]["message"]["content"] == "one two three four"
        with client.stream("POST", f"{rec.base_url}/chat/completions", json={**body, "stream": True}) as s:
            streamed = "".join(s.iter_text())
        assert streamed.count("data:") == 5 and streamed.endswith("data: [DONE]\n\n")
        assert client.get(f"{rec.base_url}/models").json()["path"] == "/v1/models"
        t1 = time.monotonic()
    assert upstream.bodies[0] == body and upstream.headers[0]["X-Probe"] == "yes"
    model_rows = rec.between(t0, t1)
    assert [r["stream"] for r in model_rows] == [False, True]
    plain, stream = model_rows
    assert (plain["prompt_tokens"], plain["completion_tokens"], plain["cached_tokens"]) == (7, 4, 2)
    assert stream["completion_tokens"] == 4 and stream["tokens_from"] == "stream chunks"
    assert stream["end"] - stream["start"] >= 0.06 and not stream["aborted"]  # 4 chunks 20 ms apart
    assert len(rec.between(t0, t1, model_only=False)) == 3
    assert rec.between(t1 + 1, t1 + 2) == []


def test_a_client_hanging_up_aborts_the_upstream_request(upstream: Upstream) -> None:
    with LLMRequestRecorder(upstream.url) as rec, httpx.Client(timeout=10) as client:
        body = {"model": "m", "messages": [], "max_tokens": 500, "stream": True}
        with client.stream("POST", f"{rec.base_url}/chat/completions", json=body) as s:
            for i, _ in enumerate(s.iter_raw()):
                if i >= 2:
                    break
        assert upstream.stream_closed.wait(5), "the upstream stream went on after the client left"
        time.sleep(0.2)
        (row,) = rec.between(0, time.monotonic())
    assert row["aborted"] and 2 <= row["completion_tokens"] < 500


def test_stream_counter_handles_split_events_and_reported_usage() -> None:
    counter = StreamTokenCounter()
    data = sse([{"choices": [{"text": "a"}]}, {"choices": [{"text": ""}]}, {"choices": [{"text": "b"}]},
                {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}])
    for i in range(0, len(data), 7):  # events cut anywhere
        counter.feed(data[i:i + 7])
    assert counter.text_chunks == 2
    assert counter.usage() == {"prompt_tokens": 3, "completion_tokens": 2, "cached_tokens": None,
                               "tokens_from": "usage"}


def test_an_unreachable_upstream_is_an_error_answer_not_a_hang() -> None:
    with LLMRequestRecorder("http://127.0.0.1:9/v1") as rec, httpx.Client(timeout=10) as client:
        assert client.get(f"{rec.base_url}/models").status_code >= 500
        (row,) = rec.between(0, time.monotonic(), model_only=False)
    assert row["aborted"]
