"""A real OpenAI-compatible embedding server on loopback, for the remote-embedding tests.

``POST /v1/embeddings`` with the OpenAI request and response shapes (``input``: a str, a list of
str, a token array or a list of token arrays; ``model``; ``encoding_format`` ``float`` | ``base64``;
``dimensions``, rejected unless it is the model's own; ``usage.prompt_tokens``), and ``GET /v1/models``.
It encodes with the real all-MiniLM-L6-v2 (sentence-transformers) on aiohttp, served from a
daemon thread. Not a test double: the frameworks' stock classes talk to it through the openai SDK.

Each input is encoded on its own (a batch of one), so a text's vector does not depend on which
other texts shared its request: padding a batch changes the kernels' summation order (~1e-7),
which would make stock differ from *itself* between runs that batch differently. With that, equal
vectors stock vs Ayo mean Ayo sent each text exactly as stock does. ``requests`` records every
request body (for counting requests and comparing what was sent); ``fail_with`` makes the next
requests fail with a given status.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from aiohttp import web

MODEL_NAME = "all-MiniLM-L6-v2"


def _error(status: int, message: str, code: str = "invalid_request") -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "code": code}},
                             status=status)


class EmbeddingServer:
    """The server; ``url`` ends in ``/v1``. Use :func:`serve_embeddings` to start and stop it."""

    def __init__(self, model_name: str = MODEL_NAME) -> None:
        from sentence_transformers import SentenceTransformer

        from ayo_core.models import embedding_model_path

        self.model_name = model_name
        self.model = SentenceTransformer(str(embedding_model_path()), device="cpu", local_files_only=True)
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(getter())
        self.requests: list[dict[str, Any]] = []
        self.fail_with: list[int] = []  # statuses the next requests fail with, one each
        self._encode_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- encoding (worker thread) ----------------------------------------------------------------

    def _encode_one(self, item: str | list[int]) -> tuple[np.ndarray, int]:
        import torch

        with self._encode_lock:
            if isinstance(item, str):
                tokens = len(self.model.tokenizer(item, truncation=True,
                                                  max_length=self.model.max_seq_length)["input_ids"])
                vec = self.model.encode([item], batch_size=1, convert_to_numpy=True, show_progress_bar=False)[0]
                return vec, tokens
            ids = torch.tensor([item[: self.model.max_seq_length]])
            with torch.no_grad():
                out = self.model({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
            return out["sentence_embedding"][0].numpy(), int(ids.shape[1])

    def _encode_all(self, items: list[str | list[int]]) -> tuple[list[np.ndarray], int]:
        pairs = [self._encode_one(item) for item in items]
        return [v for v, _ in pairs], sum(n for _, n in pairs)

    # -- HTTP --------------------------------------------------------------------------------------

    def _inputs(self, raw: Any) -> list[str | list[int]] | None:
        if isinstance(raw, str):
            return [raw]
        if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
            return [raw]
        if isinstance(raw, list) and raw and all(isinstance(t, str) or (isinstance(t, list) and t and all(
                isinstance(i, int) and 0 <= i < self.model.tokenizer.vocab_size for i in t)) for t in raw):
            return list(raw)
        return None

    async def embeddings(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        self.requests.append(body)
        if self.fail_with:
            return _error(self.fail_with.pop(0), "injected failure", code="server_error")
        if body.get("model") != self.model_name:
            return _error(404, f"The model `{body.get('model')}` does not exist.", code="model_not_found")
        items = self._inputs(body.get("input"))
        if items is None:
            return _error(400, "input must be a non-empty string, list of strings, or token arrays")
        dims = body.get("dimensions")
        if dims is not None and dims != self.dimension:
            return _error(400, f"Model {self.model_name} does not support matryoshka representation, "
                               f"changing output dimensions ({dims}) will lead to poor results.")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            return _error(400, f"encoding_format must be 'float' or 'base64', got {fmt!r}")
        vectors, tokens = await asyncio.to_thread(self._encode_all, items)
        data = [{"object": "embedding", "index": i,
                 "embedding": (base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() if fmt == "base64"
                               else np.asarray(v, dtype=np.float32).tolist())} for i, v in enumerate(vectors)]
        return web.json_response({"object": "list", "data": data, "model": self.model_name,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model_name, "object": "model"}]})

    # -- lifecycle ---------------------------------------------------------------------------------

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_get("/v1/models", self.models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

    def start(self) -> None:
        threading.Thread(target=self._loop.run_forever, daemon=True, name="embedding-server").start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def texts_sent(self) -> list[tuple[str, Any, Any, Any]]:
        """(model, input item, encoding_format, dimensions) of every input item sent so far."""
        out = []
        for body in self.requests:
            raw = body.get("input")
            for item in ([raw] if isinstance(raw, str) else raw or []):
                out.append((body.get("model"), item if isinstance(item, str) else tuple(item),
                            body.get("encoding_format"), body.get("dimensions")))
        return out

    def clear(self) -> None:
        self.requests.clear()


@contextmanager
def serve_embeddings(model_name: str = MODEL_NAME) -> Iterator[EmbeddingServer]:
    """An :class:`EmbeddingServer` running for the ``with`` block."""
    server = EmbeddingServer(model_name)
    server.start()
    try:
        yield server
    finally:
        server.stop()
