"""Fixtures for the LangChain adapter tests (helpers and the fake OpenAI server: lc_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from lc_helpers import DOCS, FakeOpenAIServer


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """The fake server; Ayo's LLMEngine for FAKE_URL talks to it too."""
    from ayo_core.engines import llm_client

    server = FakeOpenAIServer()
    original = llm_client.LLMEngine._client

    def client(self: Any) -> httpx.AsyncClient:
        if not self.base_url.startswith("http://fake-openai.test"):
            return original(self)
        return httpx.AsyncClient(transport=server.transport())

    monkeypatch.setattr(llm_client.LLMEngine, "_client", client)
    yield server


@pytest.fixture(scope="session")
def embeddings() -> Any:
    from langchain_huggingface import HuggingFaceEmbeddings

    from ayo_core import models

    return HuggingFaceEmbeddings(model_name=str(models.embedding_model_path()))


@pytest.fixture
def vectorstore(tmp_path: Any, embeddings: Any) -> Any:
    """A tiny Chroma collection in ``tmp_path`` (PersistentClient), indexed with the stock embeddings."""
    import chromadb
    from langchain_chroma import Chroma

    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    vs = Chroma(collection_name="docs", embedding_function=embeddings, client=client)
    vs.add_texts([text for _, text in DOCS], metadatas=[{"source": src} for src, _ in DOCS],
                 ids=[src for src, _ in DOCS])
    return vs
