"""The serving-engine fake (cluster simulation only): steps, chunked prefill, KV bound, priority queue."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.engines.llm_client import STOPPED, StopStream
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.fake_serving import ServingFakeLLM, StepModel
from ayo_core.runtime.fakes import FakeLLM

# Round numbers, so expected times can be written down.
MODEL = StepModel(fixed=0.0, step_base=1.0, per_sequence=0.5, per_context_token=0.0, per_prefill_token=0.1,
                  prefill_chunk=100, kv_tokens=1000, max_seqs=8)


def prompt(n: int, word: str = "w") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def test_says_it_is_for_the_simulation():
    import ayo_core.runtime.fake_serving as mod

    assert "not a model" in mod.__doc__ and "cluster simulation" in mod.__doc__


def test_one_request_is_one_prefill_step_then_a_step_per_token():
    async def main():
        llm = ServingFakeLLM(MODEL)
        loop = asyncio.get_running_loop()
        r = await llm.complete(prompt(20), max_tokens=4)
        return loop.time(), r

    elapsed, r = run_virtual(main)
    # prefill step (1 + 20 x 0.1) samples the first token, then 3 decode steps of one sequence
    assert elapsed == pytest.approx(3.0 + 3 * 1.0)
    assert r.completion_tokens == 4 and r.finish_reason == "length"


def test_same_answers_as_the_plain_fake():
    async def main(llm):
        return [await llm.complete(prompt(n), max_tokens=6) for n in (3, 9)]

    plain = run_virtual(lambda: main(FakeLLM()))
    serving = run_virtual(lambda: main(ServingFakeLLM(MODEL)))
    assert [r.text for r in serving] == [r.text for r in plain]


def test_concurrent_sequences_share_steps():
    async def main(n):
        llm = ServingFakeLLM(MODEL)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(llm.complete(prompt(10, f"q{k}_"), max_tokens=10) for k in range(n)))
        return loop.time()

    one, four = run_virtual(lambda: main(1)), run_virtual(lambda: main(4))
    assert four < 3 * one  # continuous batching: four sequences in the same steps
    # one prefill step of 40 tokens, then 9 steps of four sequences (1 + 3 x 0.5)
    assert four == pytest.approx((1.0 + 4.0) + 9 * 2.5)


def test_prefill_is_chunked_across_steps():
    async def main():
        llm = ServingFakeLLM(MODEL)
        loop = asyncio.get_running_loop()
        await llm.complete(prompt(250), max_tokens=1)
        return loop.time(), llm.steps

    elapsed, steps = run_virtual(main)
    assert steps == 3  # 100 + 100 + 50 prompt tokens
    assert elapsed == pytest.approx(3 * 1.0 + 250 * 0.1)


def test_kv_bound_queues_requests_and_priority_orders_the_queue():
    """Each request reserves 600 of 1000 KV tokens: one runs at a time; the waiting one with the
    lower priority value goes first, as vLLM's priority scheduling does."""

    async def main():
        llm = ServingFakeLLM(MODEL)
        loop = asyncio.get_running_loop()
        done: dict[str, float] = {}

        async def call(name: str, priority: int, delay: float) -> None:
            await asyncio.sleep(delay)
            await llm.complete(prompt(100, name), max_tokens=500, priority=priority)
            done[name] = loop.time()

        await asyncio.gather(call("first", 5, 0.0), call("late_low", 9, 0.1), call("late_high", 1, 0.2))
        return done, llm.max_waiting

    done, waiting = run_virtual(main)
    assert done["first"] < done["late_high"] < done["late_low"]
    assert waiting >= 2


def test_prefix_cache_hits_make_prefill_cheaper():
    async def main():
        llm = ServingFakeLLM(MODEL)
        loop = asyncio.get_running_loop()
        first = await llm.complete(prompt(70), max_tokens=1)
        t = loop.time()
        second = await llm.complete(prompt(70), max_tokens=1)
        took = loop.time() - t
        whole = await llm.complete(prompt(64), max_tokens=1)  # a prompt of exactly four blocks
        return first, second, took, whole

    first, second, took, whole = run_virtual(main)
    assert first.cached_tokens == 0 and second.cached_tokens == 64  # whole blocks only
    assert took == pytest.approx(1.0 + 6 * 0.1)
    # vLLM recomputes the last prompt token for its logits: a full hit stops one block short
    assert whole.cached_tokens == 48


def test_prefix_cache_is_bounded_by_the_kv_cache():
    small = StepModel(fixed=0.0, step_base=1.0, per_prefill_token=0.1, prefill_chunk=1000, kv_tokens=128, max_seqs=8)

    async def main():
        llm = ServingFakeLLM(small)
        await llm.complete(prompt(64, "a"), max_tokens=1)
        await llm.complete(prompt(64, "b"), max_tokens=1)
        await llm.complete(prompt(64, "c"), max_tokens=1)  # evicts a's blocks (least recently used)
        return (await llm.complete(prompt(64, "a"), max_tokens=1)).cached_tokens

    assert run_virtual(main) == 0


def test_stream_yields_the_text_and_stop_stream_ends_early():
    async def main():
        llm = ServingFakeLLM(MODEL)
        parts = [p async for p in llm.stream_complete(prompt(5), max_tokens=6)]
        whole = await llm.complete(prompt(5), max_tokens=6)
        seen: list[str] = []

        def stop_after_two(token: str) -> None:
            seen.append(token)
            if len(seen) == 2:
                raise StopStream

        stopped = await llm.complete(prompt(5), max_tokens=6, stream_cb=stop_after_two)
        return parts, whole, stopped

    parts, whole, stopped = run_virtual(main)
    assert "".join(parts) == whole.text and len(parts) == 6
    assert stopped.finish_reason == STOPPED and stopped.completion_tokens == 2


def test_a_cancelled_request_frees_its_kv():
    async def main():
        llm = ServingFakeLLM(MODEL)
        loop = asyncio.get_running_loop()
        hog = asyncio.ensure_future(llm.complete(prompt(100, "hog"), max_tokens=800))
        await asyncio.sleep(5.0)
        waiter = asyncio.ensure_future(llm.complete(prompt(100, "next"), max_tokens=5))
        await asyncio.sleep(5.0)
        assert llm.waiting == 1  # no room while the hog runs
        hog.cancel()
        await waiter
        return loop.time(), llm.engine._kv_used

    elapsed, kv_used = run_virtual(main)
    assert elapsed < 30.0 and kv_used == 0


def test_a_prompt_larger_than_the_cache_is_refused_with_the_fix():
    async def main():
        await ServingFakeLLM(MODEL).complete(prompt(900), max_tokens=200)

    with pytest.raises(ValueError, match="does not fit this engine's KV cache.*lower max_tokens"):
        run_virtual(main)
