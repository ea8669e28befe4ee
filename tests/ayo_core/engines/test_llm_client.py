"""LLMEngine against the real vLLM server (marked llm) and against fake servers that fail."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid

import pytest

from ayo_core.engines.llm_client import STOPPED, LLMEngine, LLMEngineError, LLMRequestError, StopStream
from tests.stub_http import JSONHandler, LoopbackServer, sse

QUESTION = [{"role": "user", "content": "Name three colors."}]


@pytest.fixture
def llm(llm_url):
    return LLMEngine(llm_url)


@pytest.mark.llm
async def test_greedy_chat_is_deterministic(llm):
    first = await llm.chat(QUESTION, max_tokens=16)
    second = await llm.chat(QUESTION, max_tokens=16)
    assert first.text and first.text == second.text
    assert first.completion_tokens == second.completion_tokens > 0
    assert first.prompt_tokens > 0 and first.finish_reason in ("stop", "length")


@pytest.mark.llm
async def test_streamed_deltas_concatenate_to_the_plain_text(llm):
    plain = await llm.chat(QUESTION, max_tokens=16)
    deltas = [d async for d in llm.stream_chat(QUESTION, max_tokens=16)]
    assert len(deltas) > 1 and "".join(deltas) == plain.text

    seen: list[str] = []
    streamed = await llm.chat(QUESTION, max_tokens=16, stream_cb=seen.append)
    assert "".join(seen) == streamed.text == plain.text
    assert streamed.completion_tokens == plain.completion_tokens and streamed.finish_reason == plain.finish_reason

    prompt = "The three primary colors are"
    plain_c = await llm.complete(prompt, max_tokens=12)
    assert "".join([d async for d in llm.stream_complete(prompt, max_tokens=12)]) == plain_c.text

    async def async_cb(delta: str) -> None:
        seen.append(delta)

    seen.clear()
    assert (await llm.complete(prompt, max_tokens=12, stream_cb=async_cb)).text == "".join(seen) == plain_c.text


@pytest.mark.llm
async def test_stop_stream_returns_the_prefix_and_frees_the_server(llm):
    prompt = "Count from one to twenty in words, separated by commas:"
    full = await llm.complete(prompt, max_tokens=48)
    seen: list[str] = []

    def stop_after_three(delta: str) -> None:
        seen.append(delta)
        if len(seen) == 3:
            raise StopStream

    t0 = time.perf_counter()
    cut = await llm.complete(prompt, max_tokens=48, stream_cb=stop_after_three)
    assert cut.finish_reason == STOPPED and cut.text == "".join(seen) and len(seen) == 3
    assert full.text.startswith(cut.text) and len(cut.text) < len(full.text)
    assert time.perf_counter() - t0 < 30
    # the aborted request left the server healthy: the same request answers as before
    assert (await llm.complete(prompt, max_tokens=48)).text == full.text


@pytest.mark.llm
async def test_token_id_prompt_matches_the_chat_request(llm):
    ids = await llm.tokenize(messages=QUESTION)
    assert all(isinstance(i, int) for i in ids)
    assert (await llm.complete(ids, max_tokens=16)).text == (await llm.chat(QUESTION, max_tokens=16)).text
    assert await llm.detokenize(await llm.tokenize(prompt="hello world")) == "hello world"


@pytest.mark.llm
async def test_prefix_prefill_makes_the_full_request_hit_the_cache(llm):
    # A unique opening so no earlier request shares even the first 32-token block.
    nonce = uuid.uuid4().hex
    messages = [{"role": "system", "content": f"Session {nonce}. " + "You answer briefly and precisely. " * 12},
                {"role": "user", "content": "What is the boiling point of water at sea level?"}]
    ids = await llm.tokenize(messages=messages)
    prefix = ids[: (len(ids) // 32) * 32]
    assert len(prefix) >= 64
    warm = await llm.prefill(prefix)
    assert warm.completion_tokens == 1 and warm.cached_tokens == 0
    full = await llm.chat(messages, max_tokens=8)
    assert full.cached_tokens > 0
    assert full.cached_tokens >= len(prefix) - 32  # whole blocks of the prefix are reused


@pytest.mark.llm
async def test_priority_and_extra_params_pass_through(llm):
    high = await llm.chat(QUESTION, max_tokens=8, priority=-5)
    assert high.text == (await llm.chat(QUESTION, max_tokens=8)).text
    a = await llm.complete("Once upon a time", max_tokens=8, temperature=1.0, seed=7, top_p=0.9)
    b = await llm.complete("Once upon a time", max_tokens=8, temperature=1.0, seed=7, top_p=0.9)
    assert a.text == b.text
    stopped = await llm.complete("1, 2, 3, 4, 5,", max_tokens=20, stop=[","])
    assert "," not in stopped.text
    lp = await llm.complete("Hello", max_tokens=2, logprobs=1)
    assert lp.raw is not None and lp.raw["choices"][0]["logprobs"]["tokens"]


@pytest.mark.llm
async def test_bad_request_is_a_clear_error_naming_the_engine(llm):
    with pytest.raises(LLMRequestError, match="HTTP 400") as info:
        await llm.complete("x", max_tokens=10**6)
    assert llm.base_url in str(info.value) and info.value.status_code == 400
    with pytest.raises(ValueError, match="exactly one"):
        await llm.prefill()


@pytest.mark.llm
def test_engine_works_across_event_loops(llm):
    async def once() -> str:
        return (await llm.complete("The sky is", max_tokens=4)).text

    assert asyncio.run(once()) == asyncio.run(once())


# -- failing servers (no vLLM needed) ---------------------------------------------------------------


class _FakeServer:
    """Loopback TCP server; ``mode`` says how it misbehaves."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self.mode == "close":  # the process died after accepting
                conn.close()
            elif self.mode == "midstream":  # dies after the first streamed token
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                event = b'data: {"choices":[{"index":0,"text":"Hel","finish_reason":null}]}\n\n'
                conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
                time.sleep(0.2)
                conn.close()
            # mode "hang": never answers
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            c.close()


@pytest.fixture
def fake_server(request):
    server = _FakeServer(request.param)
    yield server
    server.close()


@pytest.mark.parametrize("fake_server", ["close"], indirect=True)
async def test_server_that_dies_fails_every_pending_call_naming_the_engine(fake_server):
    engine = LLMEngine(fake_server.url, timeout=20)
    calls = [engine.complete("hi", max_tokens=4), engine.chat(QUESTION, max_tokens=4),
             engine.complete("hi", max_tokens=4, stream_cb=print), engine.tokenize(prompt="hi")]
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=30)
    for res in results:
        assert isinstance(res, LLMEngineError), res
        assert fake_server.url in str(res) and res.base_url == fake_server.url.rstrip("/")


@pytest.mark.parametrize("fake_server", ["midstream"], indirect=True)
async def test_stream_cut_mid_answer_is_an_error_not_a_partial_answer(fake_server):
    engine = LLMEngine(fake_server.url, timeout=20)
    seen: list[str] = []
    with pytest.raises(LLMEngineError, match=fake_server.url):
        await asyncio.wait_for(engine.complete("hi", max_tokens=4, stream_cb=seen.append), timeout=30)
    assert seen == ["Hel"]
    with pytest.raises(LLMEngineError):
        await asyncio.wait_for(_drain(engine.stream_complete("hi")), timeout=30)


async def _drain(stream) -> None:
    async for _ in stream:
        pass


@pytest.mark.parametrize("fake_server", ["hang"], indirect=True)
async def test_server_that_hangs_times_out_naming_the_engine(fake_server):
    engine = LLMEngine(fake_server.url, timeout=1.0)
    with pytest.raises(LLMEngineError, match="timed out") as info:
        await asyncio.wait_for(engine.chat(QUESTION, max_tokens=4), timeout=30)
    assert fake_server.url in str(info.value)


async def test_nothing_listening_is_an_engine_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    engine = LLMEngine(f"http://127.0.0.1:{port}/v1", connect_timeout=2)
    with pytest.raises(LLMEngineError, match=f"127.0.0.1:{port}"):
        await engine.complete("hi", max_tokens=1)
    assert await engine.health() is False


# -- scripted OpenAI-style servers: no priority scheduling, transient failures -----------------


class _StubServer(LoopbackServer):
    """Loopback OpenAI-style server; records every body it gets.

    ``priority_message``: reject any request carrying ``priority`` with HTTP 400 and this
    message, as vLLM before 0.8 did without ``--scheduling-policy priority``.
    ``fail_first``: answer the first requests with these statuses (``retry-after-ms: 10``).
    """

    def __init__(self, priority_message: str | None = None, fail_first: tuple[int, ...] = ()) -> None:
        self.bodies: list[dict] = []
        failures = list(fail_first)
        bodies = self.bodies

        class Handler(JSONHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.json_body()
                bodies.append(body)
                if priority_message is not None and "priority" in body:
                    self.reply(400, json.dumps({"error": {"message": priority_message, "code": 400}}).encode())
                elif failures:
                    self.reply(failures.pop(0), b'{"error": {"message": "try again"}}', {"retry-after-ms": "10"})
                elif body.get("stream"):
                    self.reply(200, sse([{"choices": [{"index": 0, "text": t, "finish_reason": None}]}
                                         for t in ("He", "llo")]), kind="text/event-stream")
                else:
                    self.reply(200, json.dumps({"choices": [{"index": 0, "text": "Hello", "finish_reason": "stop"}]})
                               .encode())

        super().__init__(Handler)


@pytest.fixture
def stub(request):
    server = _StubServer(**request.param)
    yield server
    server.close()


NO_PRIORITY = {"priority_message": "Got priority -5 but Priority scheduling is not enabled."}


@pytest.mark.parametrize("stub", [NO_PRIORITY], indirect=True)
async def test_a_server_that_rejects_priorities_gets_none_and_still_answers(stub, caplog):
    engine = LLMEngine(stub.url, timeout=20)
    assert (await engine.complete("hi", max_tokens=4, priority=-5)).text == "Hello"
    assert engine.accepts_priority is False
    assert "scheduling-policy priority" in caplog.text
    streamed: list[str] = []
    result = await engine.complete("hi", max_tokens=4, priority=-7, stream_cb=streamed.append)
    assert result.text == "Hello" and streamed == ["He", "llo"]
    assert [d async for d in engine.stream_complete("hi", priority=3)] == ["He", "llo"]
    # one rejected request, then every request goes without a priority
    assert [("priority" in b) for b in stub.bodies] == [True, False, False, False]


@pytest.mark.parametrize("stub", [{"priority_message": "max_tokens must be at least 1"}], indirect=True)
async def test_a_bad_request_not_about_priority_is_still_an_error(stub):
    engine = LLMEngine(stub.url, timeout=20)
    with pytest.raises(LLMRequestError, match="max_tokens must be at least 1"):
        await engine.complete("hi", max_tokens=4, priority=-5)
    assert engine.accepts_priority is True and len(stub.bodies) == 1  # no retry


@pytest.mark.parametrize("stub", [{"fail_first": (503, 429)}], indirect=True)
@pytest.mark.parametrize("how", ["plain", "stream_cb", "stream_chat"])
async def test_transient_failures_are_retried_up_to_max_retries(stub, how):
    engine = LLMEngine(stub.url, timeout=20)
    if how == "plain":
        assert (await engine.complete("hi", max_tokens=4, max_retries=2)).text == "Hello"
    elif how == "stream_cb":
        seen: list[str] = []
        assert (await engine.complete("hi", stream_cb=seen.append, max_retries=2)).text == "Hello"
        assert seen == ["He", "llo"]
    else:
        assert [d async for d in engine.stream_complete("hi", max_retries=2)] == ["He", "llo"]
    assert len(stub.bodies) == 3 and "max_retries" not in stub.bodies[-1]


@pytest.mark.parametrize("stub", [{"fail_first": (503, 503)}], indirect=True)
async def test_retries_stop_at_max_retries_with_the_last_error(stub):
    engine = LLMEngine(stub.url, timeout=20)
    with pytest.raises(LLMRequestError, match="HTTP 503") as info:
        await engine.chat(QUESTION, max_tokens=4, max_retries=1)
    assert info.value.status_code == 503 and len(stub.bodies) == 2


@pytest.mark.parametrize("stub", [{"fail_first": (404,)}], indirect=True)
async def test_a_client_error_is_not_retried(stub):
    engine = LLMEngine(stub.url, timeout=20)
    with pytest.raises(LLMRequestError, match="HTTP 404"):
        await engine.complete("hi", max_tokens=4, max_retries=3)
    assert len(stub.bodies) == 1


@pytest.mark.parametrize("stub", [{"fail_first": (503,)}], indirect=True)
async def test_without_max_retries_nothing_is_retried(stub):
    engine = LLMEngine(stub.url, timeout=20)
    with pytest.raises(LLMRequestError, match="HTTP 503"):
        await engine.complete("hi", max_tokens=4)
    assert len(stub.bodies) == 1


def test_retry_delay_follows_the_server_then_the_sdk_backoff():
    import httpx

    from ayo_core.engines.llm_client import MAX_RETRY_DELAY, retry_delay

    assert retry_delay(0, httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry_delay(3, httpx.Headers({"retry-after": "2"})) == 2.0
    assert 0.375 <= retry_delay(0, httpx.Headers({"retry-after": "3600"})) <= 0.5  # insane: backoff
    assert 0.75 <= retry_delay(1) <= 1.0
    assert retry_delay(10) <= MAX_RETRY_DELAY
