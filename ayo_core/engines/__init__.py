"""Ayo's real engines: vLLM server + async client, sentence-transformers, Chroma, rerankers.

Names load lazily (``import ayo_core.engines`` does not import torch, httpx or chromadb).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ayo_core.engines.llm_server": ("serve_llm", "start_server", "main_serve", "LLMServer", "LLMServerError"),
    "ayo_core.engines.llm_client": ("LLMEngine", "LLMResult", "LLMEngineError", "LLMRequestError", "StopStream"),
    "ayo_core.engines.embedding": ("EmbeddingEngine", "EmbeddingEngineError", "EmbeddingQueueFull",
                                   "EmbeddingStats"),
    "ayo_core.engines.vectorstore": ("VectorStoreEngine", "VectorHit", "VectorStoreError"),
    "ayo_core.engines.reranker": ("LLMReranker", "CrossEncoderReranker", "RerankResult", "parse_score"),
    "ayo_core.engines.registry": ("get_llm_engine", "get_embedding_engine", "get_vector_store", "reset_engines",
                                  "KeyedLLMEngine", "PLACEHOLDER_KEYS", "is_placeholder_key"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [
    "CrossEncoderReranker",
    "EmbeddingEngine",
    "EmbeddingEngineError",
    "EmbeddingQueueFull",
    "EmbeddingStats",
    "KeyedLLMEngine",
    "LLMEngine",
    "LLMEngineError",
    "LLMRequestError",
    "LLMReranker",
    "LLMResult",
    "LLMServer",
    "LLMServerError",
    "PLACEHOLDER_KEYS",
    "RerankResult",
    "StopStream",
    "VectorHit",
    "VectorStoreEngine",
    "VectorStoreError",
    "get_embedding_engine",
    "get_llm_engine",
    "get_vector_store",
    "is_placeholder_key",
    "main_serve",
    "parse_score",
    "reset_engines",
    "serve_llm",
    "start_server",
]

if TYPE_CHECKING:
    from ayo_core.engines.embedding import EmbeddingEngine, EmbeddingEngineError, EmbeddingQueueFull, EmbeddingStats
    from ayo_core.engines.llm_client import LLMEngine, LLMEngineError, LLMRequestError, LLMResult, StopStream
    from ayo_core.engines.llm_server import LLMServer, LLMServerError, main_serve, serve_llm, start_server
    from ayo_core.engines.registry import (
        PLACEHOLDER_KEYS,
        KeyedLLMEngine,
        get_embedding_engine,
        get_llm_engine,
        get_vector_store,
        is_placeholder_key,
        reset_engines,
    )
    from ayo_core.engines.reranker import CrossEncoderReranker, LLMReranker, RerankResult, parse_score
    from ayo_core.engines.vectorstore import VectorHit, VectorStoreEngine, VectorStoreError


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ayo_core.engines' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
