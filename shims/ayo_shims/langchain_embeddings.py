"""The langchain-openai ``OpenAIEmbeddings`` internal ``ayo_langchain`` touches.

Ayo's remote embedding engine sends what ``OpenAIEmbeddings.embed_documents`` sends with
``check_embedding_ctx_length=False``: ``input=texts[i:i + chunk_size]`` plus the object's
``_invocation_params`` (``model``, ``model_kwargs``, ``dimensions``), read here rather than
re-typed so a release that changes them changes Ayo's requests too. Imported by
:mod:`ayo_shims.langchain`, so it is verified with that adapter's touchpoints.
"""

from __future__ import annotations

from typing import Any

from ayo_shims.touchpoints import all_of, declare, has_attr

LANGCHAIN_OPENAI = "langchain-openai"
CHECKED = "1.x (checked 1.8.1)"
_EMB = "langchain_openai.embeddings.base"

EMBEDDINGS_INVOCATION_PARAMS = declare(
    f"{_EMB}.OpenAIEmbeddings._invocation_params", framework=LANGCHAIN_OPENAI, checked=CHECKED,
    why="the remote embedding engine sends the request fields embed_documents sends (model, model_kwargs, "
        "dimensions), chunk_size texts at most per request",
    check=all_of(has_attr(_EMB, "OpenAIEmbeddings", "_invocation_params", "embed_documents", "aembed_documents",
                          "embed_query", "aembed_query")))


def embeddings_invocation_params(embeddings: Any) -> dict[str, Any]:
    """The fields besides ``input`` an ``OpenAIEmbeddings`` request carries."""
    return dict(embeddings._invocation_params)
