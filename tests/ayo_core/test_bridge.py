"""The sync/async bridge: one background loop, sync and foreign-loop callers, streams, error filters."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from ayo_core.runtime import NodeFailed, bridge


async def _value(x: Any) -> Any:
    await asyncio.sleep(0)
    return x


def test_one_loop_thread_serves_every_sync_caller() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def where() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    threads = [threading.Thread(target=lambda: loops.append(bridge.run_sync(where()))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(loops) == 4 and all(lp is bridge.loop() for lp in loops)
    assert bridge.run_sync(_value(3)) == 3


def test_sync_call_on_the_loop_thread_names_the_fix() -> None:
    async def reenter() -> str:
        assert bridge.on_loop_thread()
        with pytest.raises(RuntimeError, match="ainvoke") as err:
            bridge.run_sync(_value(1), "invoke()")
        return str(err.value)

    message = bridge.run_sync(reenter())
    assert "invoke() was called on Ayo's own event loop thread" in message and "stock object" in message
    assert not bridge.on_loop_thread()


def test_errors_come_back_to_the_sync_caller() -> None:
    async def boom() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        bridge.run_sync(boom())


def test_arun_awaits_from_another_loop_and_cancellation_propagates() -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def caller() -> None:
        assert await bridge.arun(_value("x")) == "x"
        task = asyncio.ensure_future(bridge.arun(work()))
        assert await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(caller())
    assert cancelled.wait(5)


def test_iter_sync_yields_then_reraises_and_stops_early() -> None:
    async def items(fail: bool) -> Any:
        for i in range(3):
            yield i
        if fail:
            raise ValueError("bad part")

    assert list(bridge.iter_sync(items(False))) == [0, 1, 2]
    seen = []
    with pytest.raises(ValueError, match="bad part"):
        for x in bridge.iter_sync(items(True)):
            seen.append(x)
    assert seen == [0, 1, 2]

    closed = threading.Event()

    async def endless() -> Any:
        try:
            i = 0
            while True:
                yield i
                i += 1
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    it = bridge.iter_sync(endless())
    assert next(it) == 0
    it.close()  # the consumer stops: the producer on the loop is cancelled
    assert closed.wait(5)


def test_in_thread_runs_the_sync_pipeline_in_a_worker() -> None:
    workers: list[str] = []

    async def source() -> Any:
        for i in range(3):
            yield i

    def pipeline(items: Any) -> Any:
        for x in items:
            workers.append(threading.current_thread().name)
            yield x * 10

    async def collect() -> list[int]:
        return [x async for x in bridge.in_thread(source(), pipeline)]

    assert bridge.run_sync(collect()) == [0, 10, 20]
    assert workers and all(name != bridge.THREAD_NAME for name in workers)


def test_in_thread_pipeline_paces_its_source() -> None:
    """The source makes its next item only once the worker's steps ask for it, as stock's chain of
    generators: a model's token callback for item 2 comes after the step handled item 1 (CI caught a
    LangChain parser's start reported after the model's second token: the source ran one ahead)."""
    log: list[str] = []

    async def source() -> Any:
        for i in range(3):
            log.append(f"made {i}")
            yield i
            await asyncio.sleep(0.01)  # time to run ahead, had nothing paced it

    def pipeline(items: Any) -> Any:
        for x in items:
            time.sleep(0.03)
            log.append(f"handled {x}")
            yield x

    async def collect() -> list[int]:
        return [x async for x in bridge.in_thread(source(), pipeline)]

    assert bridge.run_sync(collect()) == [0, 1, 2]
    assert log == ["made 0", "handled 0", "made 1", "handled 1", "made 2", "handled 2"]


REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST_ID", default="unset")


def test_in_thread_runs_the_pipeline_in_the_callers_context() -> None:
    """A sync stream's steps after the model see the caller's context variables, as in stock (which runs
    them in the caller's thread): the caller's context reaches the loop with the call, then the worker."""
    seen: list[str] = []

    async def source() -> Any:
        yield 1

    def pipeline(items: Any) -> Any:
        for x in items:
            seen.append(REQUEST_ID.get())
            yield x

    async def collect() -> list[int]:
        return [x async for x in bridge.in_thread(source(), pipeline)]

    token = REQUEST_ID.set("req-42")
    try:
        assert list(bridge.iter_sync(collect_stream(collect))) == [[1]]
    finally:
        REQUEST_ID.reset(token)
    assert seen == ["req-42"]


async def collect_stream(make: Any) -> Any:
    yield await make()


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.seen.append(context)


class _Task:
    def __init__(self, qualname: str) -> None:
        self.qualname = qualname

    def get_coro(self) -> Any:
        return SimpleNamespace(__qualname__=self.qualname)


def test_exception_handler_drops_foreign_closes_and_unretrieved_node_failures() -> None:
    loop = _Recorder()
    foreign_close = {"message": "Task exception was never retrieved", "future": _Task("AsyncClient.aclose"),
                     "exception": RuntimeError("Event loop is closed")}
    failed_part = {"message": "Task exception was never retrieved",
                   "exception": NodeFailed("q", "n", "m", "decode", ValueError("x"))}
    real = {"message": "Task exception was never retrieved", "future": _Task("work"),
            "exception": RuntimeError("Event loop is closed")}
    for context in (foreign_close, failed_part, real):
        bridge._exception_handler(loop, context)  # type: ignore[arg-type]
    assert loop.seen == [real]


def test_use_executor_applies_to_the_running_loop() -> None:
    made: list[int] = []

    def factory(workers: int, prefix: str) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        made.append(workers)
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{prefix}-test")

    bridge.loop()
    previous = bridge.BRIDGE._executor_factory
    try:
        bridge.use_executor(factory)
        name = bridge.run_sync(asyncio.to_thread(lambda: threading.current_thread().name))
        assert made == [bridge.WORKERS] and name.startswith(f"{bridge.THREAD_NAME}-test")
    finally:
        bridge.use_executor(previous)


def test_off_loop_gives_sync_helpers_an_idle_loop_and_the_callers_context() -> None:
    """A sync helper that runs coroutines itself (LlamaIndex's ``asyncio_run``) finds a loop that is
    set and not running, so it reuses it instead of starting a thread per call; context vars go along."""
    import contextvars

    from ayo_core.runtime import bridge

    var: contextvars.ContextVar[str] = contextvars.ContextVar("off_loop_probe", default="unset")

    async def answer() -> int:
        return 42

    def helper() -> tuple[bool, str, int]:
        loop = asyncio.get_event_loop()  # what LlamaIndex's asyncio_run asks first
        running = loop.is_running()
        return running, var.get(), loop.run_until_complete(answer())

    async def call() -> list[tuple[bool, str, int]]:
        var.set("caller's")
        return [await bridge.off_loop(helper) for _ in range(6)]

    results = bridge.run_sync(call())
    assert results == [(False, "caller's", 42)] * 6
