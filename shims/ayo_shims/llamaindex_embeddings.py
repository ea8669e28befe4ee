"""The LlamaIndex OpenAI-compatible embedding internals ``ayo_llamaindex`` touches.

``OpenAIEmbedding`` (and ``OpenAILikeEmbedding``, which only changes its constructor) keeps the
model names it sends per kind (``mode`` x ``model``, or ``model_name``) and any user-given httpx
clients in private attributes; Ayo's remote embedding engine sends the same model names, and an
object given its own client (a transport Ayo would bypass) runs as stock. Imported by
:mod:`ayo_shims.llamaindex`, so these are declared with that adapter's touchpoints and verified
once ``llama_index.embeddings.openai`` is imported.
"""

from __future__ import annotations

from typing import Any

from ayo_shims.llamaindex_versions import mirrored
from ayo_shims.touchpoints import declare, has_private_attr

OPENAI_EMBED = "llama-index-embeddings-openai"
OPENAI_EMBED_CHECKED = "0.6.x (checked 0.6.0)"
_OPENAI_EMBED = "llama_index.embeddings.openai"

declare(f"{_OPENAI_EMBED}.OpenAIEmbedding._query_engine/_text_engine/_http_client/_async_http_client",
        framework=OPENAI_EMBED, checked=OPENAI_EMBED_CHECKED,
        why="the remote embedding engine sends the model names the object sends per kind (query/text); an "
            "object given its own httpx client runs as stock",
        check=has_private_attr(_OPENAI_EMBED, "OpenAIEmbedding", "_query_engine", "_text_engine", "_http_client",
                               "_async_http_client"))


def openai_embedding_models(embed_model: Any) -> tuple[str, str]:
    """(query model, text model): the ``model`` each kind's request carries."""
    return str(embed_model._query_engine), str(embed_model._text_engine)


def openai_embedding_http_clients(embed_model: Any) -> tuple[Any, Any]:
    """The user's own (sync, async) httpx clients, or None each."""
    return getattr(embed_model, "_http_client", None), getattr(embed_model, "_async_http_client", None)


OPENAI_EMBEDDING_MIRRORED = mirrored(_OPENAI_EMBED, "OpenAIEmbedding", (
    "_get_query_embedding", "_aget_query_embedding", "_get_text_embedding", "_aget_text_embedding",
    "_get_text_embeddings", "_aget_text_embeddings", "_get_client", "_get_aclient", "_get_credential_kwargs",
    "get_query_embedding", "aget_query_embedding", "get_text_embedding_batch", "aget_text_embedding_batch",
    "get_agg_embedding_from_queries"), framework=OPENAI_EMBED, checked=OPENAI_EMBED_CHECKED,
    why="the remote embedding engine sends the requests the object's own methods send (newlines replaced, "
        "its model names and additional_kwargs, embed_batch_size texts at most per request)")
