"""A sync call's observer calls on the caller's thread (ayo_core.runtime.caller_thread, through the bridge)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ayo_core.runtime import bridge, caller_thread


class Observer:
    """An object whose bound methods the test registers as observer calls."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def seen(self) -> None:
        self.threads.append(threading.get_ident())


def _is_observer(fn: Any) -> bool:
    return isinstance(getattr(fn, "__self__", None), Observer)


caller_thread.route(_is_observer)


async def _calls(observer: Observer, plain: list[int]) -> str:
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, observer.seen)
    await loop.run_in_executor(None, lambda: plain.append(threading.get_ident()))
    await asyncio.gather(*(loop.run_in_executor(None, observer.seen) for _ in range(4)))  # concurrent nodes
    return "done"


def test_a_served_call_runs_observer_calls_on_the_callers_thread_only() -> None:
    observer, plain = Observer(), []
    assert bridge.run_sync(_calls(observer, plain), serve_caller=True) == "done"
    assert observer.threads == [threading.get_ident()] * 5
    assert plain and plain[0] != threading.get_ident()  # everything else stays in the pool


def test_an_unserved_call_runs_them_in_the_pool() -> None:
    observer, plain = Observer(), []
    assert bridge.run_sync(_calls(observer, plain)) == "done"
    assert observer.threads and threading.get_ident() not in observer.threads


def test_a_served_stream_runs_them_on_the_consumers_thread() -> None:
    observer = Observer()

    async def chunks() -> Any:
        for i in range(3):
            await asyncio.get_running_loop().run_in_executor(None, observer.seen)
            yield i

    assert list(bridge.iter_sync(chunks(), serve_caller=True)) == [0, 1, 2]
    assert observer.threads == [threading.get_ident()] * 3


def test_a_stream_left_early_runs_later_observer_calls_elsewhere() -> None:
    observer, later = Observer(), threading.Event()

    async def chunks() -> Any:
        yield 0
        try:
            await asyncio.sleep(30)
        finally:  # cancelled when the consumer leaves: once it has left, the pool runs the call
            await asyncio.sleep(0.2)
            await asyncio.get_running_loop().run_in_executor(None, observer.seen)
            later.set()

    stream = bridge.iter_sync(chunks(), serve_caller=True)
    assert next(stream) == 0
    stream.close()
    assert later.wait(10)  # it ran: nothing waits on a caller that left
    assert observer.threads and observer.threads[-1] != threading.get_ident()


def test_a_failing_observer_call_raises_where_it_was_awaited() -> None:
    class Failing(Observer):
        def seen(self) -> None:
            raise ValueError("handler failed")

    async def call() -> str:
        try:
            await asyncio.get_running_loop().run_in_executor(None, Failing().seen)
        except ValueError as exc:
            return str(exc)
        return "no error"

    assert bridge.run_sync(call(), serve_caller=True) == "handler failed"
