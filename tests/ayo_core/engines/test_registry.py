"""Shared engines: one per identity, reset closes them."""

from __future__ import annotations

import pytest

from ayo_core.engines import registry


@pytest.fixture(autouse=True)
def _clean():
    registry.reset_engines()
    yield
    registry.reset_engines()


def test_llm_engines_are_shared_per_url_and_model(monkeypatch):
    a = registry.get_llm_engine("http://127.0.0.1:9/v1")
    assert registry.get_llm_engine("http://127.0.0.1:9/v1/") is a
    assert registry.get_llm_engine("http://127.0.0.1:9/v1", model="other") is not a
    monkeypatch.setenv("AYO_LLM_URL", "http://127.0.0.1:9/v1")
    assert registry.get_llm_engine() is a
    monkeypatch.delenv("AYO_LLM_URL")
    with pytest.raises(ValueError, match="ayo serve"):
        registry.get_llm_engine()


def test_embedding_engines_are_shared_per_path_and_settings():
    a = registry.get_embedding_engine()
    assert registry.get_embedding_engine() is a
    assert registry.get_embedding_engine(a.model_path) is a
    assert registry.get_embedding_engine(normalize=False) is not a


def test_vector_stores_are_shared_per_path(tmp_path):
    a = registry.get_vector_store(tmp_path / "s")
    assert registry.get_vector_store(str(tmp_path / "s")) is a
    assert registry.get_vector_store(tmp_path / "t") is not a


def test_package_exports_load_lazily():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, ayo_core.engines as e; assert 'torch' not in sys.modules and 'chromadb' not in sys.modules;"
            "e.LLMEngine; e.VectorStoreEngine; e.get_embedding_engine; print(sorted(e.__all__) == e.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "True"
