"""CombiningBatcher: a lone caller goes straight through; callers arriving during a pass share the next one;
each gets its own slice, or its own error."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ayo_core.engines.batcher import CombiningBatcher


class Model:
    """A blocking model call: doubles each item; ``hold`` keeps the first pass running until released."""

    def __init__(self) -> None:
        self.passes: list[list[int]] = []
        self.hold = threading.Event()
        self.hold.set()

    def __call__(self, items: list[int]) -> list[int]:
        self.passes.append(list(items))
        if len(self.passes) == 1:
            assert self.hold.wait(10)
        if any(i < 0 for i in items):
            raise ValueError(f"negative item in {items}")
        return [2 * i for i in items]


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_lone_caller_runs_at_once() -> None:
    batcher, model = CombiningBatcher("t"), Model()
    assert list(batcher.submit([1, 2, 3], model)) == [2, 4, 6]
    assert model.passes == [[1, 2, 3]]
    stats = batcher.statistics()
    assert (stats.requests, stats.passes, stats.items, stats.waiting) == (1, 1, 3, 0)


def held_first_pass(pool: ThreadPoolExecutor, batcher: CombiningBatcher, model: Model) -> Any:
    """A first caller's pass of ``[1]``, started and held in the model (``model.hold`` releases it)."""
    model.hold.clear()
    first = pool.submit(batcher.submit, [1], model)
    wait_until(lambda: len(model.passes) == 1)
    return first


def test_callers_arriving_during_a_pass_share_the_next() -> None:
    batcher, model = CombiningBatcher("t"), Model()
    with ThreadPoolExecutor(4) as pool:
        first = held_first_pass(pool, batcher, model)
        rest = [pool.submit(batcher.submit, [10 * k, 10 * k + 1], model) for k in (1, 2, 3)]
        wait_until(lambda: batcher.statistics().waiting == 3)
        model.hold.set()
        assert list(first.result()) == [2]
        assert [list(f.result()) for f in rest] == [[20, 22], [40, 42], [60, 62]]
    assert len(model.passes) == 2 and sorted(model.passes[1]) == [10, 11, 20, 21, 30, 31]


def test_a_failed_merged_pass_gives_each_caller_its_own_outcome() -> None:
    batcher, model = CombiningBatcher("t"), Model()
    with ThreadPoolExecutor(3) as pool:
        first = held_first_pass(pool, batcher, model)
        good, bad = pool.submit(batcher.submit, [5], model), pool.submit(batcher.submit, [-1], model)
        wait_until(lambda: batcher.statistics().waiting == 2)
        model.hold.set()
        assert list(first.result()) == [2] and list(good.result()) == [10]
        with pytest.raises(ValueError, match=r"negative item in \[-1\]"):
            bad.result()


def test_a_lone_callers_error_is_raised_as_is() -> None:
    batcher = CombiningBatcher("t")
    with pytest.raises(ValueError, match="negative"):
        batcher.submit([-3], Model())


def test_max_items_caps_a_merged_pass() -> None:
    batcher, model = CombiningBatcher("t", max_items=2), Model()
    model.hold.clear()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(batcher.submit, [1], model)
        wait_until(lambda: len(model.passes) == 1)
        rest = [pool.submit(batcher.submit, [k], model) for k in (2, 3, 4)]
        wait_until(lambda: batcher.statistics().waiting == 3)
        model.hold.set()
        assert [list(f.result()) for f in [first, *rest]] == [[2], [4], [6], [8]]
    assert [len(p) for p in model.passes] == [1, 2, 1]
