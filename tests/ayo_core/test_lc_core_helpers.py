"""Core helpers moved out of ayo_langchain (issue 12): batches, chunks, warm-ups, graph building."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ayo_core.engines.prompt_warmer import PromptWarmer, early_late_split
from ayo_core.models import local_model_folder
from ayo_core.runtime import LoopRuntimes
from ayo_core.runtime.batching import gather_batch
from ayo_core.runtime.chunks import PacedQueue, aadd_chunks, add_chunks, drain_while_running, merge_chunk
from ayo_core.runtime.errors import Captured, capturing
from ayo_core.templates import Transform
from ayo_core.templates.builder import GraphBuilder


def failing_batch(delays: list[float]) -> Any:
    async def call(i: int) -> int:
        await asyncio.sleep(delays[i])
        if i > 0:
            raise ValueError(i)
        return i

    return call


async def test_gather_batch_raises_first_in_time_or_in_input_order() -> None:
    call = failing_batch([0.0, 0.05, 0.0])  # input 2 fails first in time, input 1 first in order
    with pytest.raises(ValueError, match="2"):
        await gather_batch(call, 3)
    with pytest.raises(ValueError, match="1"):
        await gather_batch(call, 3, first_in_order=True)
    results = await gather_batch(call, 3, return_exceptions=True, first_in_order=True)
    assert results[0] == 0 and [str(r) for r in results[1:]] == ["1", "2"]


async def test_gather_batch_respects_max_concurrency() -> None:
    running, peak = [0], [0]

    async def call(i: int) -> int:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1
        return i

    assert await gather_batch(call, 6, max_concurrency=2) == list(range(6))
    assert peak[0] == 2


async def test_chunk_sums_and_drain() -> None:
    assert add_chunks(["a", "b", "c"]) == "abc" and add_chunks([]) is None
    seen: list[str] = []

    async def stream() -> Any:
        for c in "xyz":
            yield c

    assert await aadd_chunks(stream(), seen.append) == "xyz" and seen == ["x", "y", "z"]
    assert merge_chunk(None, 1) == 1 and merge_chunk(1, 2) == 3 and merge_chunk({"a": 1}, "s") == "s"

    queue: asyncio.Queue = asyncio.Queue()

    async def work() -> None:
        for i in range(3):
            queue.put_nowait(i)
            await asyncio.sleep(0)
        raise KeyError("late")

    got = []
    with pytest.raises(KeyError):
        async for item in drain_while_running(work, queue):
            got.append(item)
    assert got == [0, 1, 2]


async def test_drain_stopping_early_cancels_the_work() -> None:
    queue: asyncio.Queue = asyncio.Queue()
    cancelled = asyncio.Event()

    async def work() -> None:
        queue.put_nowait("first")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    agen = drain_while_running(work, queue)
    assert await agen.__anext__() == "first"
    await agen.aclose()
    await asyncio.wait_for(cancelled.wait(), 1)


async def test_a_paced_queue_pulls_the_next_item_only_when_the_consumer_asks() -> None:
    queue, log = PacedQueue(), []

    async def source() -> Any:
        for i in range(3):
            log.append(f"made {i}")
            yield i

    async def work() -> None:
        async for item in queue.paced(source()):
            queue.put_nowait(item)

    async for item in drain_while_running(work, queue):
        log.append(f"used {item}")
        await asyncio.sleep(0.01)  # the consumer is slow: the producer waits for it
    assert log == ["made 0", "used 0", "made 1", "used 1", "made 2", "used 2"]


def test_early_late_split() -> None:
    sources = {"question": "input", "context": "ctx", "__base__": "base"}
    ready = {"input": 0.0, "ctx": 1.0, "base": 0.0}
    assert early_late_split(sources, ready, 0.3, skip=("__base__",)) == (["question", "__base__"], ["context"])
    assert early_late_split(sources, ready, 2.0, skip=("__base__",)) is None  # the late value comes too soon
    assert early_late_split({"q": "input"}, ready, 0.0) is None  # nothing late


async def test_prompt_warmer_prefills_the_common_prefix_of_two_renders() -> None:
    sent: list[list[int]] = []

    class Tokenizer:
        async def tokenize(self, prompt: str) -> list[int]:
            return [ord(c) for c in prompt]

        async def prefill(self, prompt: list[int], **request: Any) -> Any:
            sent.append(prompt)
            return SimpleNamespace(cached_tokens=0)

    warmer = PromptWarmer(lambda v: {"prompt": f"Q: {v['question']} C: {v['context']}"}, {"early_0": "question"},
                          ["context"], server=None, min_tokens=4, max_busy=4)
    ctx = SimpleNamespace(llm=Tokenizer())
    assert await warmer.static(ctx, early_0="why?") == len("Q: why? C: ") - 2  # minus the safety margin
    assert "".join(map(chr, sent[0])) == "Q: why? C"


async def test_capturing_returns_the_exception_as_a_value() -> None:
    async def boom(x: int) -> int:
        raise RuntimeError(x)

    async def fine(x: int) -> int:
        return x

    out = await capturing(boom)(3)
    assert isinstance(out, Captured) and str(out.exc) == "3"
    assert await capturing(fine)(4) == 4


def test_graph_builder_names_and_ready_times() -> None:
    b = GraphBuilder(prefix="7/")
    b.graph.input("input")
    first = b.build(Transform(lambda v: v, "t", cost=0.5), {"value": "input"}, "step")
    second = b.build(Transform(lambda v: v, "t", cost=0.25), {"value": first}, "step")
    assert (first, second) == ("7/1.step", "7/2.step")
    assert b.ready[second] == pytest.approx(0.75)


def test_loop_runtimes_one_per_loop() -> None:
    runtimes = LoopRuntimes("critical_path")

    async def two() -> tuple[Any, Any]:
        return runtimes.get({}), runtimes.get({})

    a, b = asyncio.run(two())
    c, _ = asyncio.run(two())
    assert a is b and a is not c and a.costs is runtimes.costs is c.costs


def test_local_model_folder(tmp_path: Path) -> None:
    assert local_model_folder(tmp_path) is None
    (tmp_path / "config.json").write_text("{}")
    assert local_model_folder(tmp_path) == str(tmp_path.resolve())
    assert local_model_folder("sentence-transformers/all-MiniLM-L6-v2") is None
