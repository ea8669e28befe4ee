"""A recording pass-through in front of the LLM server: when each request ran, and how many tokens.

``ayo compare`` points both apps (stock and optimized) at this loopback proxy instead of
the server itself, so the model time of *both* is measured the same way, on the wire, with
no change to either app's code: the busiest-engine bound needs the LLM server's busy time
for the whole call (including requests a doc-QA function makes outside Ayo's graph), and
the stock-model bound needs stock's own model time.

Every request is forwarded unchanged (method, path, query, headers, body) and its answer
streamed back as it arrives; a client that hangs up mid-stream (Ayo's early stop) makes the
proxy close its upstream request too, so the server aborts it as it would without the proxy.
Per request it records ``path``, ``start``, ``end`` (``time.monotonic()``, the clock of
asyncio's loops and so of Ayo's traces), ``status``, ``stream``, ``aborted``, and token
counts: ``usage`` of a JSON answer; for a stream, the usage chunk if the client asked for
one, else one token per streamed chunk that carries text (vLLM sends one per step).

It runs on its own thread and event loop (aiohttp); it is a measuring instrument, not part
of Ayo, and adds one loopback hop to both sides alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from typing import Any

log = logging.getLogger("ayo.compare.recorder")
_HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
               "proxy-connection", "te", "trailer"}  # content-encoding passes: bodies are forwarded raw
_MODEL_PATHS = ("/completions", "/chat/completions")


class LLMRequestRecorder:
    """``with LLMRequestRecorder(upstream_base_url) as rec: ... rec.base_url ... rec.between(t0, t1)``."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        self.upstream_root = upstream.rstrip("/").removesuffix("/v1")
        self.host = host
        self.port = 0
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def between(self, start: float, end: float, model_only: bool = True) -> list[dict[str, Any]]:
        """Requests that started in ``[start, end]`` (model requests only unless asked)."""
        with self._lock:
            rows = [r for r in self.records if start <= r["start"] <= end]
        return [r for r in rows if r["path"].endswith(_MODEL_PATHS)] if model_only else rows

    # ---- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> LLMRequestRecorder:
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, args=(ready, failure), name="ayo-llm-recorder",
                                        daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure or not self.port:
            raise RuntimeError(f"the LLM request recorder in front of {self.upstream_root} did not start: "
                               f"{failure[0] if failure else 'timed out'}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            asyncio.run(self._main(ready))
        except BaseException as exc:  # reported to the starting thread, not lost in this one
            failure.append(exc)
            ready.set()

    async def _main(self, ready: threading.Event) -> None:
        import aiohttp
        from aiohttp import web

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # handler_cancellation: a client that hangs up cancels the handler, which closes upstream
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))  # our own socket: its port is ours to read
        await web.SockSite(runner, sock).start()
        self.port = sock.getsockname()[1]
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            self._session = session
            ready.set()
            await self._stop.wait()
        await runner.cleanup()

    # ---- forwarding ----------------------------------------------------------------------
    async def _forward(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.read()
        row: dict[str, Any] = {"path": request.path, "start": time.monotonic(), "stream": False, "aborted": True}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        url = f"{self.upstream_root}{request.path_qs}"
        counter = StreamTokenCounter()
        try:
            async with self._session.request(request.method, url, data=body, headers=headers) as upstream:
                row["status"] = upstream.status
                out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
                if upstream.content_type == "text/event-stream":
                    row["stream"] = True
                    response = web.StreamResponse(status=upstream.status, headers=out_headers)
                    await response.prepare(request)
                    try:
                        async for chunk in upstream.content.iter_any():
                            counter.feed(chunk)
                            await response.write(chunk)
                        await response.write_eof()
                    except ConnectionResetError:  # the client hung up (Ayo's early stop): recorded as aborted
                        return response
                else:
                    payload = await upstream.read()
                    row.update(usage_of(payload))
                    response = web.Response(status=upstream.status, body=payload, headers=out_headers)
                row["aborted"] = False
                return response
        finally:
            row["end"] = time.monotonic()
            if row["stream"]:  # an aborted stream too: the tokens it got before the client hung up
                row.update(counter.usage())
            with self._lock:
                self.records.append(row)


def usage_of(payload: bytes) -> dict[str, Any]:
    """Token counts of a JSON completion answer (empty when it has none)."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        usage = json.loads(payload).get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return {"prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
                "cached_tokens": details.get("cached_tokens")}
    return {}


class StreamTokenCounter:
    """Counts an OpenAI-style event stream's tokens as it passes (chunks may split events)."""

    def __init__(self) -> None:
        self._buffer = b""
        self.text_chunks = 0
        self.reported: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *events, self._buffer = self._buffer.split(b"\n\n")
        for event in events:
            for line in event.splitlines():
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    self._count(line[5:])

    def _count(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if event.get("usage"):
            self.reported = usage_of(json.dumps({"usage": event["usage"]}).encode())
        for choice in event.get("choices") or []:
            if choice.get("text") or (choice.get("delta") or {}).get("content"):
                self.text_chunks += 1

    def usage(self) -> dict[str, Any]:
        if self.reported and self.reported.get("completion_tokens") is not None:
            return {**self.reported, "tokens_from": "usage"}
        return {"completion_tokens": self.text_chunks, "tokens_from": "stream chunks"}
