"""Process-wide shared engines, so adapters and the stock baseline run on the very same ones.

Engines are keyed by what identifies them (server URL, model and API key; model folder and
encode settings; store path or URL): every adapter of a process gets one ``LLMEngine`` per
server and model, whichever framework's objects point at it. ``reset_engines()`` closes
and forgets them (tests, or a benchmark that wants a cold start).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ayo_core.engines.llm_client import DEFAULT_MODEL, LLMEngine

_lock = threading.Lock()
_llm: dict[tuple[str, str, str], LLMEngine] = {}
_embed: dict[tuple[Any, ...], Any] = {}
_vector: dict[tuple[str, str], Any] = {}

# api_key values that mean "no key": clients (the openai SDK, LangChain, LlamaIndex) still send
# them, and a keyless server ignores them, so they share the keyless engine.
PLACEHOLDER_KEYS = frozenset({"", "none", "null", "fake", "unused", "empty", "dummy", "not-needed", "no-key", "x",
                              "-", "sk-no-key-required", "token-abc123"})


class KeyedLLMEngine(LLMEngine):
    """``LLMEngine`` that authenticates like the openai SDK (``Authorization: Bearer <key>``)."""

    def __init__(self, *args: Any, api_key: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._auth = {"Authorization": f"Bearer {api_key}"}

    def _client(self) -> Any:
        client = super()._client()  # one httpx client per event loop, created by the base class
        client.headers.update(self._auth)
        return client


def is_placeholder_key(api_key: str | None) -> bool:
    """Whether ``api_key`` means "no key" (None, empty, or a placeholder such as ``"none"``/``"EMPTY"``)."""
    return api_key is None or api_key.strip().lower() in PLACEHOLDER_KEYS


def get_llm_engine(base_url: str | None = None, model: str = DEFAULT_MODEL, api_key: str | None = None,
                   **kwargs: Any) -> LLMEngine:
    """The shared ``LLMEngine`` for ``base_url`` (default ``$AYO_LLM_URL``) and ``model``; with a real
    ``api_key`` (not a placeholder), one that sends it. ``kwargs`` (timeouts) only apply when the
    engine is first created. With a cluster configured (``ayo_core.configure(cluster=...)``), the
    cluster's engine for ``model``: its replicas replace the one server."""
    from ayo_core.cluster import cluster_address, cluster_llm_engine

    if cluster_address():
        return cluster_llm_engine(model)  # type: ignore[no-any-return]
    url = base_url or os.environ.get("AYO_LLM_URL")
    if not url:
        raise ValueError("get_llm_engine needs base_url= or AYO_LLM_URL: start a server with "
                         "`ayo serve` or `with ayo_core.serve_llm() as base_url:`")
    key = "" if is_placeholder_key(api_key) else str(api_key)
    ident = (url.rstrip("/"), model, key)
    with _lock:
        if ident not in _llm:
            _llm[ident] = (KeyedLLMEngine(url, model=model, api_key=key, **kwargs) if key
                           else LLMEngine(url, model=model, **kwargs))
        return _llm[ident]


def get_embedding_engine(model_path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Any:
    """The shared ``EmbeddingEngine`` for ``model_path`` (default: all-MiniLM-L6-v2) and settings ``kwargs``.
    Different settings (normalize, prompts, max_length, ...) get different engines."""
    from ayo_core.engines.embedding import EmbeddingEngine, default_embedding_model_path

    path = Path(model_path if model_path is not None else default_embedding_model_path()).expanduser().resolve()
    from ayo_core.cluster import cluster_address, cluster_embedding_engine

    if cluster_address() and (remote := cluster_embedding_engine({"model_path": str(path), **kwargs})) is not None:
        return remote
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
