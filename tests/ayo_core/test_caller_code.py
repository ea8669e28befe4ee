"""``ayo_core.caller_code``: the user's code inside an optimized function, Ayo's hooks left out."""

from __future__ import annotations

import asyncio
import time

import pytest

from ayo_core.caller_code import running_ayo_code, running_caller_code
from ayo_core.trace import collect_traces


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(hi - lo for lo, hi in intervals)


def test_nothing_is_recorded_outside_a_collect_traces_block() -> None:
    with running_caller_code(), running_ayo_code():
        pass  # no sink: both are a context-variable read


def test_the_callers_time_leaves_out_the_hooks() -> None:
    with collect_traces() as sink:
        with running_caller_code():
            time.sleep(0.03)                      # the user's code
            with running_ayo_code():
                time.sleep(0.05)                  # a hook
                with running_ayo_code():          # a hook inside it is the same hook
                    time.sleep(0.01)
            time.sleep(0.02)                      # the user's code again
    assert len(sink.caller_code) == 2
    (a0, a1), (b0, b1) = sink.caller_code
    assert a1 - a0 == pytest.approx(0.03, abs=0.02) and b1 - b0 == pytest.approx(0.02, abs=0.02)
    assert b0 - a1 >= 0.06                        # the hooks' 60 ms are not the caller's


def test_a_hook_outside_an_optimized_function_records_nothing() -> None:
    with collect_traces() as sink, running_ayo_code():
        time.sleep(0.01)
    assert sink.caller_code == []


def test_concurrent_hooks_in_the_callers_tasks_stop_the_clock_once() -> None:
    async def hook(seconds: float) -> None:
        with running_ayo_code():
            await asyncio.sleep(seconds)

    async def user_function() -> None:
        await asyncio.gather(hook(0.05), hook(0.08))  # two queries at once: the clock stops for their union

    with collect_traces() as sink:
        with running_caller_code():
            asyncio.run(user_function())
    assert _length(sink.caller_code) < 0.04       # the gather's 80 ms are the hooks'


def test_a_hook_the_function_left_running_records_nothing_after_it_returned() -> None:
    async def hook() -> None:
        with running_ayo_code():
            await asyncio.sleep(0.01)

    async def main() -> None:
        with running_caller_code():
            task = asyncio.create_task(hook())   # the task copies the context, clock included
        n = len(sink.caller_code)
        await task                               # starts and ends after the function returned
        assert len(sink.caller_code) == n == 1

    with collect_traces() as sink:
        asyncio.run(main())
