"""How Ayo embeds for a user's LlamaIndex embedding model.

``HuggingFaceEmbedding`` -> Ayo's ``EmbeddingEngine`` on the same model folder with the
same options (normalize, query/text instructions, max_length, device). Requests share
forward passes with whatever else is embedding, so a vector can differ from stock's
in float rounding (~1e-7, from batch shape and thread count): retrieval only changes
on an exact near-tie. Any other embedding class is called as the user's object
(opaque), in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import mean_agg

from ayo_llamaindex._util import overridden

EmbedSend = Callable[..., Awaitable[list[list[float]]]]  # (texts, kind=..., batch_size=...) -> vectors

_MIRRORED = ("_embed", "_embed_with_retry", "_get_query_embedding", "_aget_query_embedding",
             "_get_text_embedding", "_get_text_embeddings", "_aget_text_embedding", "_aget_text_embeddings",
             "get_query_embedding", "get_text_embedding_batch", "get_agg_embedding_from_queries")


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
        st = self.model._model
        prompts = getattr(st, "prompts", {}) or {}
        return {
            "model_path": str(Path(self.model.model_name).resolve()),
            "normalize": bool(self.model.normalize),
            "max_length": int(st.max_seq_length),
            "query_prompt": prompts.get("query") or "",
            "text_prompt": prompts.get("text") or "",
            "device": str(getattr(self.model, "_device", "cpu") or "cpu"),
        }

    @property
    def batch_size(self) -> int:
        return int(self.model.embed_batch_size)

    async def agg_query_embedding(self, send: EmbedSend | None, queries: list[str]) -> list[float]:
        """``embed_model.get_agg_embedding_from_queries(queries)``."""
        if not self.recognized or send is None:
            return await asyncio.to_thread(self.model.get_agg_embedding_from_queries, queries)
        # stock embeds each query alone (one encode call per query): keep that shape
        vectors = await send(list(queries), kind="query")
        return mean_agg(vectors)

    async def text_embeddings(self, send: EmbedSend | None, texts: list[str]) -> list[list[float]]:
        """``embed_model.get_text_embedding_batch(texts)``."""
        if not texts:
            return []
        if not self.recognized or send is None:
            return await asyncio.to_thread(self.model.get_text_embedding_batch, texts)
        return await send(list(texts), kind="text")


def recognize_embedding(model: Any) -> tuple[bool, str]:
    """Whether Ayo's embedding engine reproduces this model; if not, why."""
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError:
        return False, "llama-index-embeddings-huggingface is not installed"
    if not isinstance(model, HuggingFaceEmbedding):
        return False, f"{type(model).__name__} is not an embedding class Ayo knows"
    over = overridden(model, HuggingFaceEmbedding, _MIRRORED)
    if over:
        return False, f"{type(model).__name__} overrides {', '.join(over)}"
    if getattr(model, "_parallel_process", False):
        return False, "parallel_process=True"
    if getattr(model, "embeddings_cache", None) is not None:
        return False, "an embeddings_cache is set"
    if getattr(model, "rate_limiter", None) is not None:
        return False, "a rate_limiter is set"
    folder = Path(str(model.model_name))
    if not (folder / "modules.json").exists() and not (folder / "config.json").exists():
        return False, f"model_name {model.model_name!r} is not a local model folder"
    return True, ""
