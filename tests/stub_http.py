"""Plumbing shared by the tests' loopback OpenAI-style stub servers (a test double for a server
kind not available here: one that fails on purpose, or answers instantly and deterministically).

A test defines ``do_POST`` on a :class:`JSONHandler` subclass and serves it with
:class:`LoopbackServer` (``from tests.stub_http import ...``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """Keep-alive (clients pool connections, as with vLLM), quiet, with body and reply helpers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def json_body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers["content-length"])))

    def reply(self, status: int, payload: bytes, headers: dict[str, str] | None = None,
              kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


def sse(events: list[dict[str, Any]]) -> bytes:
    """Server-sent events as an OpenAI-style stream, ``[DONE]`` last."""
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


class LoopbackServer:
    """``handler`` served on 127.0.0.1 in a daemon thread; ``url`` ends in ``/v1``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda *args: None  # a client that gave up (cancelled call): not an error
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
