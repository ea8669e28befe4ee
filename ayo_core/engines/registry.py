"""Process-wide shared engines, so adapters and the stock baseline run on the very same ones.

Engines are keyed by what identifies them (server URL and model; model folder and
encode settings; store path or URL). ``reset_engines()`` closes and forgets them
(tests, or a benchmark that wants a cold start).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ayo_core.engines.llm_client import DEFAULT_MODEL, LLMEngine

_lock = threading.Lock()
_llm: dict[tuple[str, str], LLMEngine] = {}
_embed: dict[tuple[Any, ...], Any] = {}
_vector: dict[tuple[str, str], Any] = {}


def get_llm_engine(base_url: str | None = None, model: str = DEFAULT_MODEL, **kwargs: Any) -> LLMEngine:
    """The shared ``LLMEngine`` for ``base_url`` (default ``$AYO_LLM_URL``) and ``model``.
    ``kwargs`` (timeouts) only apply when the engine is first created."""
    url = base_url or os.environ.get("AYO_LLM_URL")
    if not url:
        raise ValueError("get_llm_engine needs base_url= or AYO_LLM_URL: start a server with "
                         "`ayo serve` or `with ayo_core.serve_llm() as base_url:`")
    key = (url.rstrip("/"), model)
    with _lock:
        if key not in _llm:
            _llm[key] = LLMEngine(url, model=model, **kwargs)
        return _llm[key]


def get_embedding_engine(model_path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Any:
    """The shared ``EmbeddingEngine`` for ``model_path`` (default: all-MiniLM-L6-v2) and settings ``kwargs``.
    Different settings (normalize, prompts, max_length, ...) get different engines."""
    from ayo_core.engines.embedding import EmbeddingEngine, default_embedding_model_path

    path = Path(model_path if model_path is not None else default_embedding_model_path()).expanduser().resolve()
    key = (str(path), tuple(sorted(kwargs.items())))
    with _lock:
        if key not in _embed:
            _embed[key] = EmbeddingEngine(path, **kwargs)
        return _embed[key]


def get_vector_store(path: str | os.PathLike[str] | None = None, url: str | None = None) -> Any:
    """The shared ``VectorStoreEngine`` for a Chroma folder (default ``$AYO_HOME/chroma``) or server URL."""
    from ayo_core.engines.vectorstore import VectorStoreEngine, default_store_path

    if url is not None:
        key = ("url", url.rstrip("/"))
    else:
        key = ("path", str(Path(path or default_store_path()).expanduser().resolve()))
    with _lock:
        if key not in _vector:
            _vector[key] = VectorStoreEngine(url=url) if url is not None else VectorStoreEngine(path=key[1])
        return _vector[key]


def reset_engines() -> None:
    """Close and forget every shared engine (LLM engines hold no process: they are just dropped)."""
    with _lock:
        embeds, vectors = list(_embed.values()), list(_vector.values())
        _llm.clear()
        _embed.clear()
        _vector.clear()
    for engine in embeds + vectors:
        engine.close()
