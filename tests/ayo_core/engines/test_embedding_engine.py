"""EmbeddingEngine on the real all-MiniLM-L6-v2 (offline, from its wheel)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from ayo_core.engines.embedding import EmbeddingEngine, EmbeddingEngineError, EmbeddingQueueFull


@pytest.fixture(scope="module")
def engine():
    eng = EmbeddingEngine(max_batch=32)
    yield eng
    eng.close()


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_dimension_and_unit_norm(engine):
    (vec,) = engine.embed(["A dog runs in the park."])
    assert len(vec) == 384 == engine.dimension
    assert abs(np.linalg.norm(vec) - 1.0) < 1e-5


def test_paraphrase_is_closer_than_unrelated(engine):
    a, para, other = engine.embed(["How do I reset my password?", "What are the steps to change my password?",
                                   "The stock market fell sharply on Tuesday."])
    assert _cos(a, para) > _cos(a, other) + 0.2


def test_empty_list_gives_empty_result(engine):
    assert engine.embed([]) == []
    assert asyncio.run(engine.aembed([])) == []
    assert engine.submit_nowait([]).result() == []


def test_single_str_is_rejected_with_a_hint(engine):
    with pytest.raises(TypeError, match="list"):
        engine.embed("not a list")  # type: ignore[arg-type]


def test_concurrent_async_callers_share_batches(engine):
    before = engine.statistics()

    async def many() -> list[list[list[float]]]:
        return await asyncio.gather(*[engine.aembed([f"sentence number {i} about rivers"]) for i in range(48)])

    out = asyncio.run(many())
    after = engine.statistics()
    assert [len(o) for o in out] == [1] * 48
    batches = after.batches - before.batches
    assert batches < 48, "48 concurrent one-text requests should have been coalesced"
    assert after.max_batch_seen <= 32
    # Results go back to the right caller: same text alone gives (nearly) the same vector.
    alone = engine.embed(["sentence number 7 about rivers"])[0]
    assert np.allclose(out[7][0], alone, atol=1e-5)


def test_concurrent_threads_and_large_requests(engine):
    texts = [f"document {i}: " + "words " * (i % 13) for i in range(100)]
    expected = engine.embed(texts)
    results: dict[int, list[list[float]]] = {}

    def call(i: int) -> None:
        results[i] = engine.embed(texts[i * 25:(i + 1) * 25])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [v for i in range(4) for v in results[i]]
    assert np.allclose(got, expected, atol=1e-5)


def test_matches_llamaindex_huggingface_embedding(engine):
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    stock = HuggingFaceEmbedding(model_name=str(engine.model_path))
    texts = ["The cat sat on the mat.\nIt purred.", "Paris is the capital of France.", "short", "word " * 300]
    # Same batch shape as the stock call (it encodes up to embed_batch_size=10 texts per pass).
    assert engine.embed(texts, batch_size=stock.embed_batch_size) == stock.get_text_embedding_batch(texts)
    assert np.allclose(engine.embed(texts), stock.get_text_embedding_batch(texts), atol=1e-6)
    q = "What is the capital of France?"
    assert np.allclose(engine.embed([q], kind="query")[0], stock.get_query_embedding(q), atol=1e-6)


def test_an_exact_shape_request_is_bit_identical_to_stock_in_the_callers_thread(engine):
    """Pinned to one thread (merged batches), these questions' vectors differ from stock's (two threads,
    the caller's) in their last bits; an exact-shape request runs with stock's thread count."""
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    stock = HuggingFaceEmbedding(model_name=str(engine.model_path))
    questions = ["How do I turn Python objects into JSON?", "How can a list stay sorted?",
                 "Which module implements a priority queue?", "How do I read a spreadsheet file?"]
    for q in questions:
        assert engine.embed([q], kind="query", batch_size=stock.embed_batch_size)[0] == stock.get_query_embedding(q)


def test_matches_langchain_huggingface_embeddings(engine):
    from langchain_huggingface import HuggingFaceEmbeddings

    stock = HuggingFaceEmbeddings(model_name=str(engine.model_path))
    lc_like = EmbeddingEngine(engine.model_path, normalize=False, replace_newlines=True)
    try:
        texts = ["line one\nline two", "Paris is the capital of France."]
        assert lc_like.embed(texts, batch_size=32) == stock.embed_documents(texts)
        assert np.allclose(lc_like.embed(["q?"], kind="query")[0], stock.embed_query("q?"), atol=1e-6)
    finally:
        lc_like.close()


def test_worker_thread_count_does_not_leak_into_the_process():
    import torch

    before = torch.get_num_threads()
    eng = EmbeddingEngine(torch_threads=1)
    try:
        eng.embed(["warm up the worker"])
        assert torch.get_num_threads() == before
    finally:
        eng.close()


def test_missing_model_folder_fails_callers_with_the_fix(tmp_path):
    eng = EmbeddingEngine(tmp_path / "nope")
    with pytest.raises(EmbeddingEngineError, match="ayo models prepare"):
        eng.embed(["x"], timeout=60)
    with pytest.raises(EmbeddingEngineError):
        eng.embed(["again"], timeout=60)
    eng.close()


def test_full_queue_raises_on_submit_nowait(tmp_path):
    eng = EmbeddingEngine(queue_size=1)
    eng._thread = threading.Thread()  # pretend started, so nothing drains the queue
    eng.submit_nowait(["one"])
    with pytest.raises(EmbeddingQueueFull, match="queue is full"):
        eng.submit_nowait(["two"])


def test_cancelled_callers_do_not_break_the_worker(engine):
    async def run() -> list[list[float]]:
        tasks = [asyncio.ensure_future(engine.aembed([f"cancel me {i}"] * 8)) for i in range(10)]
        await asyncio.sleep(0)
        for t in tasks[::2]:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return await engine.aembed(["still works"])

    assert len(asyncio.run(run())[0]) == 384
