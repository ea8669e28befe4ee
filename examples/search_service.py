"""A web-search stand-in: a real HTTP JSON API on loopback over SQLite FTS5 (BM25).

The search_augmented and agent examples call it the way an app calls a public search
API: ``GET /search?q=...&k=...`` returns ``{"query", "k", "latency_s", "results":
[{"id", "title", "text", "score"}]}`` (BM25 over the stdlib-docstring corpus,
best first; ``score`` is SQLite's bm25, lower is better). ``GET /health`` answers
``{"ok": true, "documents": N, "latency_s": L}``. ``GET /requests?since=T0&until=T1`` lists the
searches served in that window (``time.monotonic()`` seconds), for a benchmark's lower bound.

Latency is a *declared* parameter, never hidden: each response is held until
``latency_s`` has passed since the request arrived. The default,
:data:`DEFAULT_LATENCY_S` = 0.3 s, is what public web-search APIs typically take per
call (a few hundred milliseconds); override it with ``latency_s=`` or the
``AYO_SEARCH_LATENCY_S`` environment variable. Requests are served concurrently
(one thread each), like a real service.

Use it as a context manager, in a thread (default) or a subprocess::

    with SearchService(latency_s=0.3) as svc:
        httpx.get(f"{svc.url}/search", params={"q": "json dumps", "k": 3}).json()

or from a shell: ``python -m ayo_examples.search_service --port 8765``.

It stands for a remote service, so it imports no framework (LlamaIndex, LangChain) and
no adapter: the apps reach it over HTTP only.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit
from urllib.request import urlopen

from .corpus import corpus_dir, load_corpus

log = logging.getLogger(__name__)

DEFAULT_LATENCY_S = 0.3
MAX_K = 50
LOG_KEEP = 10_000  # searches kept for GET /requests
# The installed name, not ``__name__``: a subprocess must import this module the same way
# from any working directory (``examples.search_service`` resolves only inside a checkout).
_SERVICE_MODULE = "ayo_examples.search_service"
_TITLE_WEIGHT = 4.0  # a hit in the title ("json.dumps") says more than one in the body


def declared_latency(latency_s: float | None = None) -> float:
    """The latency to use: explicit value, else ``$AYO_SEARCH_LATENCY_S``, else the default."""
    if latency_s is None:
        latency_s = float(os.environ.get("AYO_SEARCH_LATENCY_S", DEFAULT_LATENCY_S))
    if latency_s < 0:
        raise ValueError(f"search latency must be >= 0 seconds, got {latency_s}")
    return latency_s


def fts_query(text: str) -> str:
    """Turn free text into a safe FTS5 MATCH expression (any word may match).

    Quoting every word keeps user punctuation and words like NOT/OR/NEAR from being
    read as FTS5 syntax.
    """
    words = dict.fromkeys(re.findall(r"\w+", text.lower()))  # de-duplicated, first-seen order
    return " OR ".join(f'"{w}"' for w in words)


class SearchIndex:
    """A BM25 index of documents ``{id, title, text}`` in an SQLite FTS5 table."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._connect() as db:
            self.documents = db.execute("SELECT count(*) FROM docs").fetchone()[0]

    @classmethod
    def build(cls, docs: list[dict[str, str]], path: Path) -> SearchIndex:
        """Build (or reuse, when the same documents were indexed before) the index file."""
        digest = hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()
        stamp = path.with_suffix(".sha256")
        if not (path.exists() and stamp.exists() and stamp.read_text() == digest):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.unlink(missing_ok=True)
            with sqlite3.connect(tmp) as db:
                db.execute("CREATE VIRTUAL TABLE docs USING fts5(doc_id UNINDEXED, title, text)")
                db.executemany(
                    "INSERT INTO docs(doc_id, title, text) VALUES (?, ?, ?)",
                    [(d["id"], d["title"], d["text"]) for d in docs],
                )
            os.replace(tmp, path)
            stamp.write_text(digest)
        return cls(path)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)

    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The ``k`` best documents for ``query`` by BM25 (best first)."""
        match = fts_query(query)
        if not match or k <= 0:
            return []
        with self._connect() as db:
            rows = db.execute(
                "SELECT doc_id, title, text, bm25(docs, 0.0, ?, 1.0) AS score FROM docs "
                "WHERE docs MATCH ? ORDER BY score, doc_id LIMIT ?",
                (_TITLE_WEIGHT, match, min(k, MAX_K)),
            ).fetchall()
        return [{"id": r[0], "title": r[1], "text": r[2], "score": round(r[3], 6)} for r in rows]


def default_index() -> SearchIndex:
    """The index over the prepared corpus, in ``$AYO_HOME/corpus/search.sqlite``."""
    return SearchIndex.build(load_corpus(), corpus_dir() / "search.sqlite")


class RequestLog:
    """The last searches served, as ``{"start", "end", "latency_s"}`` on ``time.monotonic()`` (one clock
    for every process of this machine): what a benchmark's lower bound reads (``GET /requests``)."""

    def __init__(self, keep: int = LOG_KEEP) -> None:
        self._done: collections.deque[dict[str, float]] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()

    def add(self, start: float, end: float, latency_s: float) -> None:
        with self._lock:
            self._done.append({"start": start, "end": end, "latency_s": latency_s})

    def between(self, lo: float, hi: float) -> list[dict[str, float]]:
        with self._lock:
            return [r for r in self._done if lo <= r["start"] and r["end"] <= hi]


def _make_handler(index: SearchIndex, latency_s: float, served: RequestLog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            arrived = time.monotonic()
            url = urlsplit(self.path)
            params = parse_qs(url.query)
            if url.path == "/health":
                self._reply(200, {"ok": True, "documents": index.documents, "latency_s": latency_s}, arrived)
            elif url.path == "/search":
                self._search(params, arrived)
                served.add(arrived, time.monotonic(), latency_s)
            elif url.path == "/requests":
                window = [float(params.get(k, [d])[0]) for k, d in (("since", "0"), ("until", "inf"))]
                self._reply(200, {"requests": served.between(*window)}, arrived, hold=False)
            else:
                self._reply(404, {"error": f"no route {url.path}: use /search?q=...&k=... or /health"}, arrived)

        def _search(self, params: dict[str, list[str]], arrived: float) -> None:
            query = params.get("q", [""])[0]
            try:
                k = int(params.get("k", ["5"])[0])
            except ValueError:
                self._reply(400, {"error": "k must be an integer"}, arrived)
                return
            if not query.strip():
                self._reply(400, {"error": "missing query: pass q=..."}, arrived)
                return
            results = index.search(query, k)
            self._reply(200, {"query": query, "k": k, "latency_s": latency_s, "results": results}, arrived)

        def _reply(self, status: int, body: dict[str, Any], arrived: float, hold: bool = True) -> None:
            data = json.dumps(body).encode()
            if hold:  # the declared latency covers the whole request, as a remote API's would
                time.sleep(max(0.0, latency_s - (time.monotonic() - arrived)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("search service: " + format, *args)

    return Handler


class SearchService:
    """Start the search API on loopback for the length of a ``with`` block.

    ``mode="thread"`` serves from a thread of this process; ``mode="process"`` runs
    ``python -m ayo_examples.search_service`` as a subprocess (a separate service, as in
    production). ``url`` is ``http://127.0.0.1:PORT``.
    """

    def __init__(self, latency_s: float | None = None, host: str = "127.0.0.1", port: int = 0,
                 mode: str = "thread") -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"SearchService mode {mode!r} is unknown: use 'thread' or 'process'")
        self.latency_s = declared_latency(latency_s)
        self.host, self.port, self.mode = host, port, mode
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        if self.mode == "process":
            self._start_process()
        else:
            self._server = serve(self.host, self.port, self.latency_s)
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, name="ayo-search", daemon=True)
            self._thread.start()
        log.info("search service at %s (declared latency %.3f s)", self.url, self.latency_s)
        return self

    def _start_process(self) -> None:
        cmd = [sys.executable, "-m", _SERVICE_MODULE, "--host", self.host,
               "--port", str(self.port), "--latency", str(self.latency_s)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # "READY http://host:port"
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"search service subprocess failed to start (said {line!r}); run {' '.join(cmd)}")
        self.port = int(line.rsplit(":", 1)[1])

    def requests_between(self, lo: float, hi: float) -> list[dict[str, float]]:
        """The searches served from ``lo`` to ``hi`` (``time.monotonic()``), as :class:`RequestLog` keeps them."""
        with urlopen(f"{self.url}/requests?since={lo!r}&until={hi!r}", timeout=10) as resp:
            return list(json.load(resp)["requests"])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(host: str = "127.0.0.1", port: int = 0, latency_s: float | None = None,
          index: SearchIndex | None = None) -> ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server; call ``serve_forever()`` on it."""
    server = ThreadingHTTPServer((host, port), _make_handler(index or default_index(), declared_latency(latency_s),
                                                             RequestLog()))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    """Run the service in the foreground; prints ``READY http://host:port`` once listening."""
    parser = argparse.ArgumentParser(description="Ayo's loopback search API (SQLite FTS5, BM25).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=None,
                        help=f"seconds each request takes (default {DEFAULT_LATENCY_S}, or $AYO_SEARCH_LATENCY_S)")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.latency)
    host, port = server.server_address[:2]
    sys.stdout.write(f"READY http://{host}:{port}\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
