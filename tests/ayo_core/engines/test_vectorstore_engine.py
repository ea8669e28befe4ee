"""VectorStoreEngine on a real embedded Chroma."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.engines.vectorstore import VectorHit, VectorStoreEngine, VectorStoreError


def _unit(i: int, dim: int = 8) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def test_add_close_reopen_query_finds_the_document(tmp_path):
    store = VectorStoreEngine(path=tmp_path / "chroma")
    store.add("docs", ids=["a", "b"], embeddings=[_unit(0), _unit(1)],
              documents=["alpha text", "beta text"], metadatas=[{"src": "a.txt"}, None])
    store.close()

    reopened = VectorStoreEngine(path=tmp_path / "chroma")
    (hits,) = reopened.query("docs", [_unit(1)], k=1)
    assert hits == [VectorHit(id="b", distance=0.0, document="beta text", metadata=None)]
    assert reopened.count("docs") == 2
    (hits,) = reopened.query("docs", [_unit(0)], k=2)
    assert [h.id for h in hits] == ["a", "b"] and hits[0].metadata == {"src": "a.txt"}
    reopened.close()


def test_batched_query_returns_one_list_per_query(tmp_path):
    store = VectorStoreEngine(path=tmp_path)
    store.add("c-1", ids=[str(i) for i in range(8)], embeddings=[_unit(i) for i in range(8)],
              documents=[f"doc {i}" for i in range(8)])
    results = store.query("c-1", [_unit(i) for i in (3, 5, 7)], k=2)
    assert [r[0].id for r in results] == ["3", "5", "7"]
    assert all(len(r) == 2 for r in results)
    assert store.query("c-1", [], k=2) == []


def test_async_forms(tmp_path):
    store = VectorStoreEngine(path=tmp_path)

    async def run() -> list[list[VectorHit]]:
        await store.aadd("async-c", ["x", "y"], [_unit(2), _unit(4)], ["xx", "yy"])
        return await store.aquery("async-c", [_unit(4)], k=1)

    assert asyncio.run(run())[0][0].id == "y"


def test_upsert_and_cosine_space(tmp_path):
    store = VectorStoreEngine(path=tmp_path)
    store.collection("cos", metadata={"hnsw:space": "cosine"})
    store.add("cos", ["a"], [[1.0, 0.0]], ["old"])
    store.add("cos", ["a"], [[2.0, 0.0]], ["new"], upsert=True)
    (hits,) = store.query("cos", [[3.0, 0.0]], k=1)
    assert hits[0].document == "new" and abs(hits[0].distance) < 1e-6  # cosine ignores length


@pytest.mark.parametrize("name", ["ab", "has space", "-starts-with-dash", "two..dots"])
def test_bad_collection_name_names_the_rule(tmp_path, name):
    store = VectorStoreEngine(path=tmp_path)
    with pytest.raises(VectorStoreError, match="Chroma rejects collection name") as info:
        store.add(name, ["a"], [[1.0]], ["x"])
    assert repr(name) in str(info.value) and "Fix" in str(info.value)


def test_length_mismatch_is_a_clear_error(tmp_path):
    store = VectorStoreEngine(path=tmp_path)
    with pytest.raises(ValueError, match="same length"):
        store.add("docs", ["a", "b"], [[1.0]], ["x", "y"])


def test_path_and_url_are_exclusive(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        VectorStoreEngine(path=tmp_path, url="http://localhost:8000")
