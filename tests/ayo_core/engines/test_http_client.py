"""The engines' HTTP client (httpx's API over aiohttp) against a raw loopback HTTP server."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from ayo_core.engines.http_client import AsyncHTTPClient
from ayo_core.engines.llm_client import LLMEngine

LONG = "x" * 300_000  # longer than aiohttp's readline limit


class Server:
    """Loopback server: ``/echo`` returns the request, ``/sse`` streams events in odd chunks,
    ``/slow`` never answers, ``/abort-watch`` streams until the client goes away."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.client_ports: list[int] = []
        self.client_left = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def do_GET(self) -> None:  # noqa: N802
                self._reply(200, b'{"ok": true}')

            def do_POST(self) -> None:  # noqa: N802
                raw = self._body()
                outer.seen.append({"path": self.path, "headers": dict(self.headers), "raw": raw})
                outer.client_ports.append(self.client_address[1])
                if self.path == "/echo":
                    self._reply(200, raw)
                elif self.path == "/status":
                    self._reply(503, b'{"error": {"message": "busy"}}', {"retry-after": "1"})
                elif self.path == "/slow":
                    outer.client_left.wait(5)
                elif self.path == "/sse":
                    events = [{"n": 1, "t": "h\u00e9llo"}, {"n": 2, "t": LONG}]
                    wire = "".join(f"data: {json.dumps(e, ensure_ascii=False)}\r\n\r\n" for e in events)
                    wire += "data: [DONE]\n\n"
                    data = wire.encode()
                    self._start(200, len(data))
                    for i in range(0, len(data), 7777):  # chunk borders inside lines and inside 'é'
                        self.wfile.write(data[i:i + 7777])
                        self.wfile.flush()
                elif self.path == "/v1/chat/completions":  # vLLM's shape: chunked SSE ending in [DONE]
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    events = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("Hi", " there")]
                    for line in [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]:
                        data = line.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        threading.Event().wait(0.01)  # the body's end arrives after [DONE], as from uvicorn
                    self.wfile.write(b"0\r\n\r\n")
                elif self.path == "/abort-watch":
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    try:
                        for i in range(500):
                            line = f"data: {i}\n\n".encode()
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                            self.wfile.flush()
                            threading.Event().wait(0.01)
                    except OSError:
                        outer.client_left.set()

            def _start(self, status: int, length: int, extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(length))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()

            def _reply(self, status: int, data: bytes, extra: dict[str, str] | None = None) -> None:
                self._start(status, len(data), extra)
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.client_left.set()
        self.httpd.shutdown()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def client(**kw: Any) -> AsyncHTTPClient:
    return AsyncHTTPClient(timeout=kw.get("timeout", 5.0), connect_timeout=2.0, max_connections=8)


async def test_post_sends_httpx_encoded_json_and_headers(server):
    c = client()
    c.headers["Authorization"] = "Bearer k"
    body = {"prompt": "caf\u00e9", "n": [1, 2]}
    resp = await c.post(server.url + "/echo", json=body)
    assert resp.status_code == 200 and resp.json() == body
    # byte for byte what httpx's json= sends
    assert server.seen[0]["raw"] == httpx.Request("POST", "http://x", json=body).content
    assert server.seen[0]["headers"]["Authorization"] == "Bearer k"
    assert server.seen[0]["headers"]["Content-Type"] == "application/json"
    await c.aclose()
    assert c.is_closed


async def test_error_status_keeps_body_and_headers(server):
    c = client()
    resp = await c.post(server.url + "/status", json={})
    assert resp.status_code == 503 and "busy" in resp.text and resp.headers.get("Retry-After") == "1"
    await c.aclose()


async def test_stream_lines_across_chunk_borders_and_long_lines(server):
    c = client()
    async with c.stream("POST", server.url + "/sse", json={}) as resp:
        assert resp.status_code == 200
        lines = [line async for line in resp.aiter_lines()]
    payloads = [json.loads(line[5:]) for line in lines if line.startswith("data:") and "[DONE]" not in line]
    assert payloads == [{"n": 1, "t": "h\u00e9llo"}, {"n": 2, "t": LONG}]
    assert lines[-2:] == ["data: [DONE]", ""]
    await c.aclose()


async def test_leaving_a_stream_early_drops_the_connection(server):
    c = client()
    async with c.stream("POST", server.url + "/abort-watch", json={}) as resp:
        async for line in resp.aiter_lines():
            if line == "data: 3":
                break
    assert await asyncio.to_thread(server.client_left.wait, 5), "the server never saw the client leave"
    await c.aclose()


async def test_failures_are_httpx_errors():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = client()
    with pytest.raises(httpx.ConnectError):
        await c.post(f"http://127.0.0.1:{port}/x", json={})
    await c.aclose()


async def test_read_timeout_is_httpx_read_timeout(server):
    c = client(timeout=0.3)
    with pytest.raises(httpx.ReadTimeout):
        await c.post(server.url + "/slow", json={})
    await c.aclose()


def test_a_finished_loops_client_goes_quietly(server, caplog):
    """A caller's asyncio.run ends with the engine's client for that loop open: collecting it
    must not report "Unclosed client session/connector" through the dead loop."""
    engine = LLMEngine(server.url + "/v1")

    async def once() -> None:
        resp = await engine._client().get(server.url + "/health")
        assert resp.status_code == 200

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        for _ in range(3):
            asyncio.run(once())
        asyncio.run(once())  # the next call forgets the closed loops' clients
        gc.collect()
    assert len(engine._clients) <= 1
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()], caplog.text


async def test_a_finished_stream_leaves_its_connection_for_the_next_request(server):
    """Reading a stream to [DONE] must not drop the connection: the server would see the client
    hang up (a proxy in between logs an aborted request) and every request would reconnect."""
    engine = LLMEngine(server.url + "/v1")
    texts = []
    for _ in range(3):
        result = await engine.chat([{"role": "user", "content": "hi"}], stream_cb=lambda _d: None)
        texts.append(result.text)
    assert texts == ["Hi there"] * 3
    assert len(set(server.client_ports)) == 1, server.client_ports
    await engine.aclose()


def _open_sockets_to(port: int) -> int:
    import os

    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    peer = f"{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[2].endswith(":" + peer) and fields[9] in inodes:
                count += 1
    return count


def test_the_last_finished_loops_connections_are_released(server):
    """No later call forgets the last caller loops to finish (a process done with its work makes
    none): Ayo's own loop sweeps closed loops' clients, so their sockets close without one."""
    from ayo_core.runtime import bridge

    bridge.loop()  # the sweeper runs there
    engine = LLMEngine(server.url + "/v1")
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])

    async def concurrent_calls() -> None:
        await asyncio.gather(*(engine._client().get(server.url + "/health") for _ in range(3)))

    for _ in range(2):
        asyncio.run(concurrent_calls())
    gc.collect()
    assert _open_sockets_to(port) >= 1  # pooled by the finished loops' clients until swept
    deadline = bridge.SWEEP_S * 2 + 2
    waited = 0.0
    while (len(engine._clients) or _open_sockets_to(port)) and waited < deadline:
        time.sleep(0.2)
        waited += 0.2
        gc.collect()
    assert len(engine._clients) == 0
    assert _open_sockets_to(port) == 0
