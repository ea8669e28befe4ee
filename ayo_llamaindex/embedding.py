"""How Ayo embeds for a user's LlamaIndex embedding model.

``HuggingFaceEmbedding`` -> Ayo's ``EmbeddingEngine`` on the same model folder with the
same options (normalize, query/text instructions, max_length, device), in stock's batch
shape (``embed_batch_size`` texts per encode, each query alone). Such a request is never
merged with another query's (the engine's ``ALONE_WHEN``) and is encoded with stock's
thread count (``ayo_core.engines.embedding``), so its vectors are stock's bit for bit: a
``keep_retrieval_score`` postprocessor writes the score into the prompt, where a last-bit
difference changed an answer under concurrent ``aquery`` before.

``OpenAIEmbedding`` / ``OpenAILikeEmbedding`` (a server such as TEI, vLLM or Infinity at
``api_base``) -> Ayo's ``RemoteEmbeddingEngine`` on that server, sending what the object sends
per text (its query/text model names, newlines replaced, its ``additional_kwargs``, the SDK's
``encoding_format``), at most ``embed_batch_size`` texts a request; the engine scheduler merges
concurrent queries' texts into shared requests. The server computes the vectors, so they are
stock's. Any other embedding class (or one with options Ayo does not reproduce) is called as the
user's object (opaque), in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import mean_agg

from ayo_core.engines.remote_embedding import OPENAI_MAX_INPUTS, SENT_PARAMS
from ayo_core.introspect import overrides_reason
from ayo_core.runtime.caller import in_async_call
from ayo_llamaindex import events, spans
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_embeddings as openai_shim

EmbedSend = Callable[..., Awaitable[list[list[float]]]]  # (texts, kind=..., batch_size=...) -> vectors

_MIRRORED = shim.EMBEDDING_MIRRORED

# query vectors a node computed ahead of the retrieval that needs them (HyDE: the original query's,
# while the hypothetical document decodes), by (id(model), text); set around that retrieval's engine
_PREFETCHED: contextvars.ContextVar[dict[tuple[int, str], list[float]] | None] = contextvars.ContextVar(
    "ayo_llamaindex_prefetched_query_vectors", default=None)


@contextlib.contextmanager
def prefetched(model: Any, vectors: dict[str, list[float]]) -> Iterator[None]:
    """While inside, ``agg_query_embedding`` of ``model`` takes these texts' vectors instead of encoding
    them again (still emitting the stock embedding events for each)."""
    if model is None or not vectors:
        yield
        return
    token = _PREFETCHED.set({**(_PREFETCHED.get() or {}), **{(id(model), t): v for t, v in vectors.items()}})
    try:
        yield
    finally:
        _PREFETCHED.reset(token)


@dataclass
class EmbedBinding:
    """A user embedding model and how Ayo calls it (engine, or opaque call)."""

    model: Any
    recognized: bool = field(init=False)
    reason: str = field(init=False)
    remote: bool = field(init=False)  # served by a RemoteEmbeddingEngine (else an in-process EmbeddingEngine)

    def __post_init__(self) -> None:
        self.recognized, self.reason = recognize_embedding(self.model)
        self.remote = self.recognized and _openai_class() is not None and isinstance(self.model, _openai_class())

    @property
    def label(self) -> str:
        base = f"{type(self.model).__name__}({getattr(self.model, 'model_name', '?')})"
        return f"{base} on the remote embedding engine at {self.model.api_base}" if self.remote else base

    def engine_options(self) -> dict[str, Any]:
        """Keyword arguments of the engine (``EmbeddingEngine``, or ``get_remote_embedding_engine`` when
        ``remote``) that reproduce the stock model's vectors; values are hashable (they key the engine)."""
        if self.remote:
            return remote_engine_options(self.model)
        st = shim.sentence_transformer(self.model)
        prompts = getattr(st, "prompts", {}) or {}
        return {
            "model_path": str(Path(self.model.model_name).resolve()),
            "normalize": bool(self.model.normalize),
            "max_length": int(st.max_seq_length),
            "query_prompt": prompts.get("query") or "",
            "text_prompt": prompts.get("text") or "",
            "device": str(shim.embedding_device(self.model) or "cpu"),
        }

    @property
    def batch_size(self) -> int:
        return int(self.model.embed_batch_size)

    async def agg_query_embedding(self, send: EmbedSend | None, queries: list[str]) -> list[float]:
        """``embed_model.get_agg_embedding_from_queries(queries)``."""
        if not self.recognized or send is None:
            return await asyncio.to_thread(self.model.get_agg_embedding_from_queries, queries)
        # stock embeds each query alone (one encode call per query): keep that shape
        # stock embeds each query alone; one alone-encoded text gives stock's exact vector
        ready = _PREFETCHED.get() or {}
        vectors = await asyncio.gather(*(self._embed(send, [q], "query", ready.get((id(self.model), q)))
                                         for q in queries))
        return mean_agg([v[0] for v in vectors])

    async def raw_query_embeddings(self, send: EmbedSend, queries: list[str]) -> dict[str, list[float]]:
        """Each query's vector, encoded alone as stock encodes it, with no events (the retrieval that
        takes them emits those: see :func:`prefetched`)."""
        unique = list(dict.fromkeys(queries))
        vectors = await asyncio.gather(*(send([q], kind="query", batch_size=self.batch_size) for q in unique))
        return {q: v[0] for q, v in zip(unique, vectors, strict=True)}

    async def text_embeddings(self, send: EmbedSend | None, texts: list[str],
                              show_progress: bool = False) -> list[list[float]]:
        """``embed_model.get_text_embedding_batch(texts, show_progress=...)``: its span(s) and events."""
        if not self.recognized or send is None:
            return await asyncio.to_thread(self.model.get_text_embedding_batch, texts, show_progress=show_progress)
        name = "get_text_embedding_batch"
        with spans.opened(self.model, [name] * spans.levels(self.model, name), texts,
                          show_progress=show_progress) as box:
            # stock's flushes of embed_batch_size texts, each encoded in stock's shape
            n = self.batch_size
            parts = await asyncio.gather(*(self._embed(send, texts[i: i + n], "text")
                                           for i in range(0, len(texts), n)))
            return box.set([v for part in parts for v in part])

    async def _embed(self, send: EmbedSend, texts: list[str], kind: str,
                     ready: list[float] | None = None) -> list[list[float]]:
        """One stock encode call, with the stock embedding events (token counting reads them); ``ready``:
        the one text's vector, already computed."""
        if ready is not None:
            async def take() -> list[list[float]]:
                return [ready]
            compute = take
        else:
            def compute() -> Any:
                return send(texts, kind=kind, batch_size=self.batch_size)
        if kind != "query":
            return await events.embedding(self.model, texts, compute)
        # get_query_embedding's spans: its events in the outer one, the encoding in the inner ones
        outer, *inner = shim.query_embedding_span_names(self.model, in_async_call())

        async def encode() -> list[list[float]]:
            with spans.opened(self.model, inner, texts[0]) as box:
                vectors = await compute()
                box.set(vectors[0])
            return vectors

        with spans.opened(self.model, [outer], texts[0]) as box:
            vectors = await events.embedding(self.model, texts, encode)
            box.set(vectors[0])
        return vectors


def _openai_class() -> type | None:
    try:
        from llama_index.embeddings.openai import OpenAIEmbedding
    except ImportError:
        return None
    return OpenAIEmbedding  # type: ignore[no-any-return]


def remote_engine_options(model: Any) -> dict[str, Any]:
    """``get_remote_embedding_engine`` arguments for an ``OpenAIEmbedding``: what its SDK client sends."""
    query_model, text_model = openai_shim.openai_embedding_models(model)
    return {
        "base_url": str(model.api_base), "model": text_model, "query_model": query_model,
        "api_key": model.api_key or None, "max_batch": int(model.embed_batch_size),
        "params": tuple(sorted((model.additional_kwargs or {}).items())), "replace_newlines": True,
        "headers": tuple(sorted((model.default_headers or {}).items())),
        "timeout": float(model.timeout), "max_retries": int(model.max_retries),
    }


def _recognize_openai(model: Any, base: type) -> tuple[bool, str]:
    if over := overrides_reason(model, base, openai_shim.OPENAI_EMBEDDING_MIRRORED):
        return False, over
    if any(c is not None for c in openai_shim.openai_embedding_http_clients(model)):
        return False, "an http_client / async_http_client is set (a transport Ayo would bypass)"
    extra = dict(model.additional_kwargs or {})
    if unknown := sorted(set(extra) - SENT_PARAMS):
        return False, f"additional_kwargs {unknown} (only {sorted(SENT_PARAMS)} are reproduced)"
    if extra.get("encoding_format", "float") != "float":
        return False, f"encoding_format={extra['encoding_format']!r} (the SDK returns it undecoded)"
    if not 1 <= int(model.embed_batch_size) <= OPENAI_MAX_INPUTS:
        return False, f"embed_batch_size={model.embed_batch_size} (stock refuses more than {OPENAI_MAX_INPUTS})"
    return _recognize_common(model)


def _recognize_common(model: Any) -> tuple[bool, str]:
    if getattr(model, "embeddings_cache", None) is not None:
        return False, "an embeddings_cache is set"
    if getattr(model, "rate_limiter", None) is not None:
        return False, "a rate_limiter is set"
    return True, ""


def recognize_embedding(model: Any) -> tuple[bool, str]:
    """Whether Ayo's embedding engines reproduce this model; if not, why."""
    openai_cls = _openai_class()
    if openai_cls is not None and isinstance(model, openai_cls):
        return _recognize_openai(model, openai_cls)
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError:
        return False, "llama-index-embeddings-huggingface is not installed"
    if not isinstance(model, HuggingFaceEmbedding):
        return False, f"{type(model).__name__} is not an embedding class Ayo knows"
    if over := overrides_reason(model, HuggingFaceEmbedding, _MIRRORED):
        return False, over
    if shim.embedding_parallel_process(model):
        return False, "parallel_process=True"
    folder = Path(str(model.model_name))
    if not (folder / "modules.json").exists() and not (folder / "config.json").exists():
        return False, f"model_name {model.model_name!r} is not a local model folder"
    return _recognize_common(model)
