"""The OpenAI-compatible ``/v1/embeddings`` of the emulated deployment: request parsing, the answer's
shape, and the real model that computes vectors in record mode (sentence-transformers, in a thread)."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

from fastapi.responses import JSONResponse, Response

from ayo_core.emulate import shapes


class EmbeddingBackend:
    """The real embedding model (``SentenceTransformer(path)``), loaded on first use."""

    def __init__(self, model_path: str) -> None:
        self.model_path = model_path
        self._model: Any = None
        self._lock = asyncio.Lock()

    def _load(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.model_path, device="cpu")
        return self._model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        async with self._lock:  # one forward pass at a time, as one device runs them
            model = await asyncio.to_thread(self._load)
            vectors = await asyncio.to_thread(model.encode, texts, batch_size=32, convert_to_numpy=True)
        return [[float(x) for x in v] for v in vectors]


def parse_embedding_request(body: Any) -> tuple[str, list[str], str] | Response:
    """``(model, texts, encoding_format)``, or vLLM's error response for a bad body."""
    if not isinstance(body, dict) or "input" not in body:
        return JSONResponse(shapes.error(400, "1 validation error:\n  {'type': 'missing', 'loc': 'body.input', "
                                              "'msg': 'Field required'}", "Bad Request", "body.input"), 400)
    raw = body["input"]
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        msg = ("input must be a string or a non-empty list of strings (token-id inputs are not supported by this "
               "emulated server: send text, as the LlamaIndex and LangChain OpenAI embedding classes do with "
               "check_embedding_ctx_length=False)")
        return JSONResponse(shapes.error(400, msg, "Bad Request", "body.input"), 400)
    if body.get("dimensions") is not None:
        msg = "dimensions is not supported by this model (all-MiniLM-L6-v2 has 384); leave it unset"
        return JSONResponse(shapes.error(400, msg, "Bad Request", "body.dimensions"), 400)
    encoding = str(body.get("encoding_format") or "float")
    if encoding not in ("float", "base64"):
        return JSONResponse(shapes.error(400, f"encoding_format {encoding!r}: use float or base64", "Bad Request",
                                         "body.encoding_format"), 400)
    return str(body.get("model") or ""), texts, encoding


def embeddings_response(model: str, texts: list[str], vectors: list[Any], encoding: str) -> dict[str, Any]:
    data = []
    for i, vec in enumerate(vectors):
        value: Any = vec
        if encoding == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
        data.append({"object": "embedding", "embedding": value, "index": i})
    tokens = sum(len(t.split()) for t in texts)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
