"""How Ayo embeds for a user's LlamaIndex embedding model.

``HuggingFaceEmbedding`` -> Ayo's ``EmbeddingEngine`` on the same model folder with the
same options (normalize, query/text instructions, max_length, device), in stock's batch
shape (``embed_batch_size`` texts per encode, each query alone). The engine scheduler may
still merge concurrent same-shape requests, and with one worker thread (doc-QA with
query expansion) kernels sum in another order, so a vector can differ from stock's in
float rounding (~1e-7): retrieval only changes on an exact near-tie. Any other embedding
class is called as the user's object (opaque), in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import mean_agg

from ayo_core.introspect import overrides_reason
from ayo_llamaindex import events
from ayo_shims import llamaindex as shim

EmbedSend = Callable[..., Awaitable[list[list[float]]]]  # (texts, kind=..., batch_size=...) -> vectors

_MIRRORED = shim.EMBEDDING_MIRRORED


@dataclass
class EmbedBinding:
    """A user embedding model and how Ayo calls it (engine, or opaque call)."""

    model: Any
    recognized: bool = field(init=False)
    reason: str = field(init=False)

    def __post_init__(self) -> None:
        self.recognized, self.reason = recognize_embedding(self.model)

    @property
    def label(self) -> str:
        return f"{type(self.model).__name__}({getattr(self.model, 'model_name', '?')})"

    def engine_options(self) -> dict[str, Any]:
        """``EmbeddingEngine`` keyword arguments that reproduce the stock model's vectors."""
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
        vectors = await asyncio.gather(*(self._embed(send, [q], "query") for q in queries))
        return mean_agg([v[0] for v in vectors])

    async def text_embeddings(self, send: EmbedSend | None, texts: list[str]) -> list[list[float]]:
        """``embed_model.get_text_embedding_batch(texts)``."""
        if not texts:
            return []
        if not self.recognized or send is None:
            return await asyncio.to_thread(self.model.get_text_embedding_batch, texts)
        # stock's flushes of embed_batch_size texts, each encoded in stock's shape
        n = self.batch_size
        parts = await asyncio.gather(*(self._embed(send, texts[i: i + n], "text") for i in range(0, len(texts), n)))
        return [v for part in parts for v in part]

    async def _embed(self, send: EmbedSend, texts: list[str], kind: str) -> list[list[float]]:
        """One stock encode call, with the stock embedding events (token counting reads them)."""
        return await events.embedding(self.model, texts, lambda: send(texts, kind=kind, batch_size=self.batch_size))


def recognize_embedding(model: Any) -> tuple[bool, str]:
    """Whether Ayo's embedding engine reproduces this model; if not, why."""
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
    if getattr(model, "embeddings_cache", None) is not None:
        return False, "an embeddings_cache is set"
    if getattr(model, "rate_limiter", None) is not None:
        return False, "a rate_limiter is set"
    folder = Path(str(model.model_name))
    if not (folder / "modules.json").exists() and not (folder / "config.json").exists():
        return False, f"model_name {model.model_name!r} is not a local model folder"
    return True, ""
