"""Remote embedding engine: an OpenAI-compatible ``/v1/embeddings`` server (TEI, vLLM, Infinity) over HTTP.

The interface is :class:`~ayo_core.engines.embedding.EmbeddingEngine`'s (``aembed(texts, kind=...)``,
``embed``, ``statistics``, ``close``), so templates and the engine scheduler use it unchanged: the
scheduler merges concurrent queries' ``aembed`` calls into one, and this engine sends the merged
texts in requests of at most ``max_batch`` texts (the user's class's own limit: LlamaIndex
``embed_batch_size``, LangChain ``chunk_size``), concurrently. Fewer, fuller requests than stock,
which sends one request per query and one per ``embed_batch_size`` flush, one after the other.

Each text goes out exactly as the user's class sends it through the openai SDK, so the server
computes the very same vector: the same ``model`` (per kind: LlamaIndex's query and text engines
may differ), the same text (``replace_newlines`` as LlamaIndex's ``OpenAIEmbedding`` does), the
same ``dimensions``/``user``, and ``encoding_format`` as the SDK sets it: ``"base64"`` unless the
user asked for ``"float"``, decoded as the SDK decodes it (little-endian float32, then Python
floats). A server whose vector for a text depends on which other texts share its batch (padding
changes kernel summation order, ~1e-7) differs from itself between any two stock runs too.

Errors: a refused request (HTTP 4xx) or a server that stays unreachable or failing after
``max_retries`` retries (the SDK's retry rule: 408/409/429/5xx and transport errors, with backoff)
raises :class:`RemoteEmbeddingError` naming the server URL, the model and the server's message.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
import numpy as np

from ayo_core.engines.embedding import EmbeddingStats, Kind
from ayo_core.engines.http_client import AsyncHTTPClient
from ayo_core.engines.llm_client import retry_delay
from ayo_core.runtime.bridge import for_this_loop, per_loop_map

log = logging.getLogger(__name__)

# The request fields besides input/model a user may set that Ayo sends as they are (anything else:
# the user's object runs as stock). encoding_format only as "float": the SDK hands an explicit
# "base64" back undecoded, a value no vector search takes.
SENT_PARAMS = frozenset({"dimensions", "user", "encoding_format"})
OPENAI_MAX_INPUTS = 2048  # the most inputs one OpenAI embeddings request may carry
Pairs = Mapping[str, Any] | Iterable[tuple[str, Any]]  # a dict, or its items (hashable: they key engines)


class RemoteEmbeddingError(RuntimeError):
    """The embedding server refused a request, failed, or could not be reached."""

    def __init__(self, message: str, base_url: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.base_url, self.status_code = base_url, status_code


def decode_vector(value: Any) -> list[float]:
    """A response item's ``embedding`` as the openai SDK hands it to the user: a base64 string is
    little-endian float32 (``np.frombuffer(...).tolist()``), a list stays as the JSON gave it."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="float32").tolist()  # type: ignore[no-any-return]
    return list(value)


def _server_message(body: str) -> str:
    try:
        detail: Any = json.loads(body)
    except ValueError:
        return body[:500]
    if isinstance(detail, dict):
        detail = detail.get("error", detail)
        if isinstance(detail, dict):
            detail = detail.get("message", detail)
    return str(detail)[:500]


def _retryable(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


class RemoteEmbeddingEngine:
    """``/embeddings`` of the OpenAI-compatible server at ``base_url`` (ends in ``/v1``), as one engine.

    ``model``: the model name sent for ``kind="text"``; ``query_model`` for ``kind="query"`` (default:
    ``model``). ``params``: extra request fields (``dimensions``, ``user``, ``encoding_format``).
    ``headers``: sent with every request (besides ``Authorization: Bearer <api_key>`` when a key is set).
    ``params`` and ``headers`` may be dicts or their items.
    """

    _ids = itertools.count()

    def __init__(self, base_url: str, model: str, *, query_model: str | None = None, api_key: str | None = None,
                 max_batch: int = OPENAI_MAX_INPUTS, params: Pairs | None = None,
                 replace_newlines: bool = False, headers: Pairs | None = None, timeout: float = 60.0,
                 connect_timeout: float = 10.0, max_retries: int = 2, max_connections: int = 64) -> None:
        if max_batch < 1:
            raise ValueError(f"RemoteEmbeddingEngine max_batch must be >= 1, got {max_batch}")
        params, headers = dict(params or {}), dict(headers or {})
        unknown = set(params) - SENT_PARAMS
        if unknown:
            raise ValueError(f"RemoteEmbeddingEngine params {sorted(unknown)} are not request fields Ayo sends; "
                             f"use only {sorted(SENT_PARAMS)}")
        self.base_url = base_url.rstrip("/")
        self.models: dict[str, str] = {"text": model, "query": query_model or model}
        self.max_batch, self.replace_newlines, self.max_retries = max_batch, replace_newlines, max_retries
        self.params = params
        self.headers = {**headers, **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self.timeout, self.connect_timeout, self.max_connections = timeout, connect_timeout, max_connections
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncHTTPClient] = per_loop_map()
        self._stats = EmbeddingStats(0, 0, 0, 0, 0, 0.0)
        self._stats_lock = threading.Lock()
        self.name = f"remote-embedding-{next(self._ids)}"

    def __repr__(self) -> str:
        return f"RemoteEmbeddingEngine({self.base_url!r}, model={self.models['text']!r}, max_batch={self.max_batch})"

    @property
    def url(self) -> str:
        return self.base_url + "/embeddings"

    # -- lifecycle --------------------------------------------------------------------------------

    def _client(self) -> AsyncHTTPClient:
        def make() -> AsyncHTTPClient:
            client = AsyncHTTPClient(self.timeout, self.connect_timeout, self.max_connections)
            client.headers.update(self.headers)
            return client

        return for_this_loop(self._clients, make, lambda c: c.is_closed)

    def start(self, wait: bool = False) -> None:
        """Nothing to start (connections open on first use): here for ``EmbeddingEngine``'s interface."""

    def close(self, timeout: float | None = None) -> None:
        """Forget the HTTP clients (each closes with its event loop)."""
        self._clients.clear()

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def statistics(self) -> EmbeddingStats:
        """Counters: ``batches`` is the number of HTTP requests sent, ``requests`` the ``aembed`` calls."""
        with self._stats_lock:
            s = self._stats
            return EmbeddingStats(0, s.requests, s.texts, s.batches, s.max_batch_seen, s.busy_seconds)

    # -- embedding --------------------------------------------------------------------------------

    async def aembed(self, texts: list[str], kind: Kind = "text", normalize: bool | None = None,
                     batch_size: int | None = None) -> list[list[float]]:
        """Vectors for ``texts``, sent in requests of at most ``min(max_batch, batch_size)`` texts.

        ``normalize`` must be None: the server decides, as it does for stock."""
        if isinstance(texts, str):
            raise TypeError("RemoteEmbeddingEngine expects a list of texts, got one str: wrap it in a list")
        if kind not in self.models:
            raise ValueError(f"RemoteEmbeddingEngine kind must be 'text' or 'query', got {kind!r}")
        if normalize is not None:
            raise ValueError(f"{self!r}: normalize= cannot be applied to a server's vectors; pass None")
        if not texts:
            return []
        with self._stats_lock:
            self._stats.requests += 1
        items = [t.replace("\n", " ") for t in texts] if self.replace_newlines else list(texts)
        size = min(self.max_batch, batch_size or self.max_batch)
        parts = await asyncio.gather(*(self._request(self.models[kind], items[i:i + size])
                                       for i in range(0, len(items), size)))
        return [v for part in parts for v in part]

    def embed(self, texts: list[str], kind: Kind = "text", normalize: bool | None = None,
              batch_size: int | None = None, timeout: float | None = None) -> list[list[float]]:
        """Blocking ``aembed`` (not from a running event loop's thread)."""
        return asyncio.run(asyncio.wait_for(self.aembed(texts, kind, normalize, batch_size), timeout))

    def body(self, model: str, texts: list[str]) -> dict[str, Any]:
        """The JSON body the openai SDK sends for ``texts`` (``encoding_format`` as it defaults it)."""
        return {"input": texts, "model": model, **self.params,
                "encoding_format": self.params.get("encoding_format", "base64")}

    async def _request(self, model: str, texts: list[str]) -> list[list[float]]:
        t0 = time.perf_counter()
        data = await self._post(self.body(model, texts), len(texts))
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != len(texts):
            got = len(items) if isinstance(items, list) else "no"
            raise RemoteEmbeddingError(f"embedding server at {self.url} answered {got} vectors for {len(texts)} "
                                       f"texts (model {model!r}): not an OpenAI embeddings response", self.base_url)
        with self._stats_lock:
            s = self._stats
            s.batches += 1
            s.texts += len(texts)
            s.max_batch_seen = max(s.max_batch_seen, len(texts))
            s.busy_seconds += time.perf_counter() - t0
        return [decode_vector(item["embedding"]) for item in items]

    async def _post(self, body: dict[str, Any], n: int) -> Any:
        attempt = 0
        while True:
            answer, why, headers = await self._attempt(body, n, attempt)
            if why is None:
                return answer
            delay = retry_delay(attempt, headers)
            log.info("embedding server at %s: %s; retry %d in %.2f s", self.url, why, attempt + 1, delay)
            await asyncio.sleep(delay)
            attempt += 1

    async def _attempt(self, body: dict[str, Any], n: int, attempt: int) -> tuple[Any, str | None, Any]:
        """One try: ``(answer, None, None)``, or ``(None, why, headers)`` when it may be retried; raises
        when it may not."""
        last = attempt >= self.max_retries
        try:
            resp = await self._client().post(self.url, json=body)
        except httpx.HTTPError as exc:
            if last:
                raise RemoteEmbeddingError(
                    f"embedding server at {self.url} could not be reached for {n} texts (model {body['model']!r}): "
                    f"{type(exc).__name__}: {exc}. Is the server running at that URL?", self.base_url) from exc
            return None, type(exc).__name__, None
        if resp.status_code == 200:
            try:
                return resp.json(), None, None
            except ValueError as exc:
                raise RemoteEmbeddingError(f"embedding server at {self.url} sent a non-JSON answer: "
                                           f"{resp.text[:200]!r}", self.base_url, 200) from exc
        if not last and _retryable(resp.status_code):
            return None, f"HTTP {resp.status_code}", resp.headers
        raise RemoteEmbeddingError(
            f"embedding server at {self.url} rejected {n} texts for model {body['model']!r} "
            f"(HTTP {resp.status_code}): {_server_message(resp.text)}", self.base_url, resp.status_code)


# -- the process's shared remote engines -------------------------------------------------------

_lock = threading.Lock()
_engines: dict[tuple[Any, ...], RemoteEmbeddingEngine] = {}


def _frozen(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, Mapping) else value


def get_remote_embedding_engine(base_url: str, model: str, **settings: Any) -> RemoteEmbeddingEngine:
    """The shared engine for ``model`` at ``base_url`` with ``settings`` (``RemoteEmbeddingEngine``'s
    keyword arguments): every adapter's object with the same server and request settings shares it."""
    key = (base_url.rstrip("/"), model, tuple(sorted((k, _frozen(v)) for k, v in settings.items())))
    with _lock:
        if key not in _engines:
            _engines[key] = RemoteEmbeddingEngine(base_url, model, **settings)
        return _engines[key]


def reset_remote_embedding_engines() -> None:
    """Forget every shared remote engine (tests, cold starts)."""
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.close()
