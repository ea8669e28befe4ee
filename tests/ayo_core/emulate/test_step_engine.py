"""The emulator's timing model (virtual clock): what each step costs, the KV bound, priority, prefix hits."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.emulate.step_engine import StepEngine, StepModel
from ayo_core.runtime.clock import run_virtual

ROUND = StepModel(fixed=0.0, step_base=1.0, per_sequence=0.5, per_context_token=0.01, per_prefill_token=0.1,
                  prefill_chunk=100, kv_tokens=1000, max_seqs=8)


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_a_lone_request_takes_its_zero_load_service_time():
    async def main():
        engine, loop = StepEngine(ROUND), asyncio.get_running_loop()
        done = await engine.generate(ids(20), n_out=5, max_tokens=5)
        return loop.time(), done

    took, done = run_virtual(main)
    assert done.emitted == 5 and done.finish == "length"
    assert took == pytest.approx(ROUND.alone_s(20, 0, 5))
    # prefill step (1 + 20 x 0.1), then four decode steps reading 21..24 tokens of context
    assert took == pytest.approx(3.0 + sum(1.0 + 0.01 * c for c in (21, 22, 23, 24)))


def test_a_step_costs_more_with_batch_and_context():
    assert ROUND.step(4, 0, 0) == pytest.approx(1.0 + 3 * 0.5)
    assert ROUND.step(1, 100, 0) == pytest.approx(1.0 + 1.0)
    gpu = StepModel(step_base=0.010, per_sequence=0.0, per_context_token=0.0, per_prefill_token=0.0,
                    token_roofline_s=0.0001)
    assert gpu.step(8, 0, 0) == pytest.approx(0.010)  # weight-bound: a bigger batch is free
    assert gpu.step(0, 0, 1000) == pytest.approx(0.1)  # compute-bound prefill


def test_prefix_hits_cut_prefill_and_are_whole_blocks():
    async def main():
        engine = StepEngine(ROUND, block=16)
        first = await engine.generate(ids(40), 1, 1)
        again = await engine.generate(ids(40), 1, 1)
        other = await engine.generate(ids(40, start=500), 1, 1)
        engine.reset_prefix_cache()
        reset = await engine.generate(ids(40), 1, 1)
        return first.cached, again.cached, other.cached, reset.cached

    assert run_virtual(main) == (0, 32, 0, 0)


def test_priority_orders_only_the_waiting_queue():
    tight = StepModel(fixed=0.0, step_base=1.0, per_sequence=0.0, per_context_token=0.0, per_prefill_token=0.0,
                      kv_tokens=50, max_seqs=8)

    async def main():
        engine, order = StepEngine(tight), []

        async def one(name: str, priority: int, delay: float):
            await asyncio.sleep(delay)
            await engine.generate(ids(20, start=100 * len(name)), 10, 10, priority)
            order.append(name)

        # "running" holds the KV; "late-urgent" arrives after "early-lax" but both wait for room
        await asyncio.gather(one("running", 5, 0.0), one("early-lax", 5, 0.1), one("late-urgent-", 0, 0.2))
        return order

    assert run_virtual(main) == ["running", "late-urgent-", "early-lax"]


def test_the_kv_bound_queues_requests():
    tight = StepModel(fixed=0.0, step_base=1.0, per_sequence=0.0, per_context_token=0.0, per_prefill_token=0.0,
                      kv_tokens=50, max_seqs=8)

    async def main(n: int):
        engine, loop = StepEngine(tight), asyncio.get_running_loop()
        await asyncio.gather(*(engine.generate(ids(20, start=100 * k), 10, 10) for k in range(n)))
        return loop.time(), engine.max_waiting

    one, _ = run_virtual(lambda: main(1))
    two, waited = run_virtual(lambda: main(2))
    assert two == pytest.approx(2 * one) and waited >= 1  # 30 + 30 tokens do not fit 50 at once: serial


def test_a_cancelled_request_frees_its_sequence():
    async def main():
        engine = StepEngine(ROUND)
        task = asyncio.ensure_future(engine.generate(ids(10), 50, 50))
        await asyncio.sleep(5)
        task.cancel()
        await asyncio.sleep(5)
        return engine.active, engine._kv_used

    assert run_virtual(main) == (0, 0)


def test_real_time_pacing_follows_the_model():
    """On a real loop, steps are paced by deadlines: a 20-step answer takes about 20 steps' time."""
    model = StepModel(fixed=0.0, step_base=0.01, per_sequence=0.0, per_context_token=0.0, per_prefill_token=0.0)

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        await StepEngine(model).generate(ids(5), 20, 20)
        return loop.time() - start

    took = asyncio.run(main())
    assert took >= 0.2 * 0.95 and took < 0.2 + 1.0


def test_prefill_attention_pairs_count_the_cached_prefix() -> None:
    """A chunk after a cached prefix attends to it too: p * (c + p / 2) pairs, charged per_prefill_pair."""
    from ayo_core.emulate.step_engine import attention_pairs

    model = StepModel(fixed=0.0, step_base=0.0, per_prefill_token=0.0, per_prefill_pair=1e-6, prefill_chunk=512)
    assert attention_pairs(0, 100) == 5000 and attention_pairs(300, 100) == 35000
    fresh, cached = model.alone_s(1000, 0, 1), model.alone_s(1000, 512, 1)
    # chunks 512 + 488 fresh; 488 after a 512-token hit: the hit saves the first chunk's pairs only
    assert abs(fresh - 1e-6 * (attention_pairs(0, 512) + attention_pairs(512, 488))) < 1e-9
    assert abs(cached - 1e-6 * attention_pairs(512, 488)) < 1e-9
