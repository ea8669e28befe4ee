"""Fake engines and the virtual clock: deterministic results and latencies (tests and planning only)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ayo_core.runtime import fakes
from ayo_core.runtime.clock import VirtualClock, run_virtual
from ayo_core.runtime.fakes import FakeEmbedding, FakeLLM, FakeReranker, FakeVectorStore, LatencyModel, fake_engines


def test_fakes_say_they_are_for_tests_and_planning():
    for obj in (fakes, FakeLLM, FakeEmbedding, FakeVectorStore, FakeReranker, fake_engines):
        assert "tests and planning" in obj.__doc__ or "tests and for planning" in obj.__doc__


def test_latency_model():
    m = LatencyModel(fixed=1.0, per_item=0.5, batch_efficiency=0.5)
    assert m.items_cost(1) == 1.5 and m.items_cost(3) == pytest.approx(1.0 + 0.5 * 2.0)
    assert LatencyModel(per_item=1, batch_efficiency=1).items_cost(10) == 1
    assert LatencyModel(per_item=1).items_cost(10) == 10


def test_virtual_clock_runs_fast_and_deterministically():
    async def main():
        llm = FakeLLM(LatencyModel(fixed=1.0, per_token=1.0, per_prompt_token=0.0))
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        r = await llm.complete("hello there", max_tokens=5)
        return loop.time() - t0, r

    wall = time.perf_counter()
    elapsed, result = run_virtual(main)
    assert time.perf_counter() - wall < 2.0
    assert elapsed == pytest.approx(6.0)
    assert run_virtual(main)[1] == result and result.completion_tokens == 5


async def test_llm_prefix_cache_and_streaming(vclock):
    llm = FakeLLM(LatencyModel(per_prompt_token=0.01, per_token=0.001), block=4)
    prompt = " ".join(f"w{i}" for i in range(20))
    await llm.prefill(prompt=" ".join(prompt.split()[:9]))
    deltas = []
    r = await llm.complete(prompt, max_tokens=6, stream_cb=deltas.append)
    assert r.cached_tokens == 8  # two whole blocks of four tokens
    assert "".join(deltas) == r.text and len(deltas) == 6
    assert [d async for d in llm.stream_complete(prompt, max_tokens=6)] == deltas
    chat = await llm.chat([{"role": "user", "content": "hi"}], max_tokens=3)
    assert chat.completion_tokens == 3
    assert await llm.tokenize(prompt="a b c") == fakes.token_ids("a b c")


async def test_llm_stop_stream_ends_the_answer_early(vclock):
    from ayo_core.engines.llm_client import STOPPED, StopStream

    llm = FakeLLM(LatencyModel(per_token=0.01))
    full = await llm.complete("p", max_tokens=8)
    seen: list[str] = []

    def stop(delta: str) -> None:
        seen.append(delta)
        if len(seen) == 2:
            raise StopStream

    r = await llm.complete("p", max_tokens=8, stream_cb=stop)
    assert r.finish_reason == STOPPED and r.completion_tokens == 2 and r.text == "".join(seen)
    assert full.text.startswith(r.text)


async def test_llm_batches_concurrent_sequences(vclock):
    llm = FakeLLM(LatencyModel(per_token=0.01, batch_efficiency=1.0), max_concurrency=8)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.gather(*(llm.complete(f"p{i}", max_tokens=10) for i in range(8)))
    assert loop.time() - t0 == pytest.approx(0.1)  # perfect batching: eight at the price of one


async def test_embedding_and_vector_store(vclock):
    emb = FakeEmbedding()
    vs = FakeVectorStore()
    docs = ["the cache holds prefixes", "a queue of requests", "vectors and search"]
    vecs = await emb.aembed(docs)
    assert vecs == emb.embed(docs) and len(vecs[0]) == 64
    await vs.aadd("c", ["a", "b", "c"], vecs, docs)
    hits = await vs.aquery("c", await emb.aembed(["cache holds prefixes"]), k=2)
    assert hits[0][0]["id"] == "a" and len(hits[0]) == 2
    assert vs.query("missing", [vecs[0]], 3) == [[]]
    ranked = await FakeReranker().arerank("cache prefixes", docs)
    assert ranked[0].index == 0 and len(ranked) == 3


def test_virtual_clock_restores_the_loop():
    async def main():
        loop = asyncio.get_running_loop()
        with VirtualClock(100.0):
            assert loop.time() == 100.0
            await asyncio.sleep(5)
            assert loop.time() == 105.0
        assert "time" not in vars(loop)

    asyncio.run(main())


def test_unknown_fake_scale():
    with pytest.raises(ValueError, match="valid: 'unit', 'gpu'"):
        fake_engines("tpu")
