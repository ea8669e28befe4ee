"""LangChain's side of the engine registry: what server and model folder a user's object points at.

The engines themselves come from the core registry (:mod:`ayo_core.engines.registry`): one
``LLMEngine`` per server, model and key, one ``EmbeddingEngine`` per model folder and
settings, shared with the LlamaIndex adapter and with chains optimized separately. The
embedding engine is set up the way ``HuggingFaceEmbeddings`` encodes: newlines replaced by
spaces; normalization is passed per request from the user's ``encode_kwargs``. An
``OpenAIEmbeddings`` (``check_embedding_ctx_length=False``, at an OpenAI-compatible server) gets
the shared ``RemoteEmbeddingEngine`` for its server and request fields, sending at most
``chunk_size`` texts a request, each as ``embed_documents`` sends it (no newline replacement).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ayo_core.engines.registry import get_embedding_engine, get_llm_engine
from ayo_core.engines.remote_embedding import get_remote_embedding_engine
from ayo_core.models import local_model_folder
from ayo_shims import langchain_embeddings as emb_shim

log = logging.getLogger(__name__)


def normalize_url(url: str | None) -> str | None:
    return url.rstrip("/") if url else None


def llm_engine(base_url: str, model: str, api_key: str | None = None) -> Any:
    """The shared ``LLMEngine`` for ``model`` at ``base_url`` (sending ``api_key`` when it is a real one)."""
    return get_llm_engine(normalize_url(base_url), model=model, api_key=api_key)


def model_api_key(model: Any) -> str | None:
    """The key a ChatOpenAI / OpenAI sends (None when it has none)."""
    key = getattr(model, "openai_api_key", None)
    return key.get_secret_value() if hasattr(key, "get_secret_value") else key


def embedding_engine(model_path: str | Path) -> Any:
    """The shared ``EmbeddingEngine`` on the model folder ``model_path``, encoding as ``HuggingFaceEmbeddings``."""
    return get_embedding_engine(model_path, replace_newlines=True, normalize=False, torch_threads=1)


def model_endpoint(model: Any) -> tuple[str, str] | None:
    """(base_url, model name) of a ChatOpenAI / OpenAI, or None if it has no explicit server."""
    base = normalize_url(getattr(model, "openai_api_base", None))
    name = getattr(model, "model_name", None)
    if not base or not name:
        return None
    return base, name


def embedding_folder(emb: Any) -> str | None:
    """The local model folder of a ``HuggingFaceEmbeddings``, or None (a hub name Ayo cannot load offline)."""
    return local_model_folder(emb.model_name)


def is_remote_embeddings(emb: Any) -> bool:
    """Whether ``emb`` is an ``OpenAIEmbeddings`` (served by a remote embedding engine)."""
    from langchain_openai import OpenAIEmbeddings

    return type(emb) is OpenAIEmbeddings


def remote_embedding_options(emb: Any) -> dict[str, Any]:
    """``get_remote_embedding_engine`` arguments for an ``OpenAIEmbeddings``: what its client sends."""
    params = emb_shim.embeddings_invocation_params(emb)
    key = emb.openai_api_key
    return {
        "base_url": str(emb.openai_api_base), "model": str(params.pop("model")),
        "api_key": key.get_secret_value() if hasattr(key, "get_secret_value") else key,
        "max_batch": int(emb.chunk_size), "params": tuple(sorted(params.items())),
        "headers": tuple(sorted((emb.default_headers or {}).items())),
        "timeout": float(emb.request_timeout) if isinstance(emb.request_timeout, (int, float)) else 600.0,
        "max_retries": int(emb.max_retries),
    }


def embedding_identity(emb: Any) -> Any:
    """What tells two embedding objects apart for Ayo's engines: the model folder of a
    ``HuggingFaceEmbeddings``, the server and request settings of an ``OpenAIEmbeddings``."""
    if is_remote_embeddings(emb):
        return ("remote", *sorted(remote_embedding_options(emb).items()))
    return embedding_folder(emb)


def embedding_engine_for(emb: Any) -> Any:
    """The shared engine that embeds for ``emb`` (a supported ``HuggingFaceEmbeddings`` / ``OpenAIEmbeddings``)."""
    if is_remote_embeddings(emb):
        return get_remote_embedding_engine(**remote_embedding_options(emb))
    return embedding_engine(embedding_folder(emb))
