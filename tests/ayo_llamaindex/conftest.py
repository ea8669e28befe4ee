"""Fixtures for the LlamaIndex adapter tests: the real embedding model, tiny corpora, the fake LLM
(helpers in li_helpers.py)."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex

from tests.ayo_llamaindex.li_helpers import QUESTIONS, TEXTS, FakeLLM, assert_same, compare, node_ids  # noqa: F401 - re-exported


@pytest.fixture(scope="session")
def embed_model() -> Any:
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from ayo_core.models import embedding_model_path

    return HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")


@pytest.fixture(scope="session")
def documents() -> list[Document]:
    return [Document(text=t, id_=f"doc{i}") for i, t in enumerate(TEXTS)]


@pytest.fixture(scope="session")
def index(embed_model: Any, documents: list[Document]) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(documents, embed_model=embed_model)


@pytest.fixture
def fake_llm() -> FakeLLM:
    return FakeLLM()
