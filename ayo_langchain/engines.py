"""Process-wide engines for optimized chains, shared by every ``optimize()`` call.

One ``LLMEngine`` per (server, model) and one ``EmbeddingEngine`` per model folder:
chains optimized separately still meet on the same engines (and the embedding model
is loaded once). The embedding engine is set up the way ``HuggingFaceEmbeddings``
encodes: newlines replaced by spaces; normalization is passed per request from the
user's ``encode_kwargs``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_lock = threading.Lock()
_llm: dict[tuple[str, str], Any] = {}
_embed: dict[str, Any] = {}


def normalize_url(url: str | None) -> str | None:
    return url.rstrip("/") if url else None


def llm_engine(base_url: str, model: str) -> Any:
    """The shared ``LLMEngine`` for ``model`` at ``base_url``."""
    from ayo_core.engines.llm_client import LLMEngine

    key = (normalize_url(base_url) or "", model)
    with _lock:
        if key not in _llm:
            _llm[key] = LLMEngine(key[0], model=model)
        return _llm[key]


def embedding_engine(model_path: str | Path) -> Any:
    """The shared ``EmbeddingEngine`` on the model folder ``model_path``."""
    from ayo_core.engines.embedding import EmbeddingEngine

    key = str(Path(model_path).resolve())
    with _lock:
        if key not in _embed:
            _embed[key] = EmbeddingEngine(key, replace_newlines=True, normalize=False, torch_threads=1)
        return _embed[key]


def model_endpoint(model: Any) -> tuple[str, str] | None:
    """(base_url, model name) of a ChatOpenAI / OpenAI, or None if it has no explicit server."""
    base = normalize_url(getattr(model, "openai_api_base", None))
    name = getattr(model, "model_name", None)
    if not base or not name:
        return None
    return base, name


def embedding_folder(emb: Any) -> str | None:
    """The local model folder of a ``HuggingFaceEmbeddings``, or None (a hub name Ayo cannot load offline)."""
    path = Path(emb.model_name)
    if path.is_dir() and ((path / "modules.json").exists() or (path / "config.json").exists()):
        return str(path.resolve())
    return None


async def prefix_cache_info(llm: Any) -> dict[str, Any] | None:
    """vLLM's prefix-cache settings of ``llm``'s server (see :mod:`ayo_core.engines.capabilities`)."""
    from ayo_core.engines.capabilities import prefix_cache_info as core_info

    return await core_info(getattr(llm, "root_url", None) or getattr(getattr(llm, "engine", None), "root_url", None))
