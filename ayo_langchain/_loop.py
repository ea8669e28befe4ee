"""One background event loop that runs the sync methods of every optimized runnable.

Why one long-lived loop rather than ``asyncio.run`` per call: the runtime's schedulers
and the engines' HTTP clients keep per-loop state worth reusing, and concurrent sync
calls from several threads should meet in one runtime so the engine schedulers batch
them. Async methods do not come here: they run on the caller's loop, as stock does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
WORKERS = 64
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The background loop (started on first use, a daemon thread)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            new = asyncio.new_event_loop()
            new.set_exception_handler(_quiet_failed_parts)
            # sync calls run the user's objects in worker threads: as many as a stock sync batch
            # would use (one per input up to max_concurrency), not asyncio's cores + 4
            new.set_default_executor(_workers())
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            threading.Thread(target=run, name="ayo-langchain-loop", daemon=True).start()
            ready.wait()
            _loop = new
        return _loop


# The CPython internals _DaemonPool reuses, as 3.11-3.13 define them; anything else gets the plain pool.
_WORKER_PARAMS = ("executor_reference", "work_queue", "initializer", "initargs")


def _workers() -> ThreadPoolExecutor:
    try:
        import inspect
        from concurrent.futures.thread import _worker, _WorkItem  # noqa: F401 - checked here, used below

        known = tuple(inspect.signature(_worker).parameters) == _WORKER_PARAMS
    except (ImportError, TypeError, ValueError):
        known = False
    if not known:  # another Python's internals: the plain pool (fails calls made during exit)
        return ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ayo-langchain")
    return _DaemonPool(max_workers=WORKERS, thread_name_prefix="ayo-langchain")


class _DaemonPool(ThreadPoolExecutor):
    """A thread pool that serves until the process ends, on daemon threads.

    Why: ``concurrent.futures`` shuts every ``ThreadPoolExecutor`` down when the main thread
    ends, *before* Python joins the non-daemon threads. A user thread still calling
    ``fast.invoke`` then failed with "cannot schedule new futures after interpreter shutdown",
    where the stock chain (running in the caller's thread) finishes. These workers are not in
    that registry; like the background loop's thread they are daemons, so they never delay exit.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        from concurrent.futures.thread import _WorkItem

        with self._shutdown_lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future[T] = Future()
            self._work_queue.put(_WorkItem(future, fn, args, kwargs))
            self._adjust_thread_count()
            return future

    def _adjust_thread_count(self) -> None:
        import weakref
        from concurrent.futures.thread import _worker

        if self._idle_semaphore.acquire(timeout=0):
            return
        if len(self._threads) < self._max_workers:
            t = threading.Thread(name=f"{self._thread_name_prefix}_{len(self._threads)}", target=_worker,
                                 args=(weakref.ref(self), self._work_queue, self._initializer, self._initargs),
                                 daemon=True)
            t.start()
            self._threads.add(t)


def _quiet_failed_parts(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A failed query's per-part tasks may be collected unretrieved: their error already failed
    the query (and reached the caller), so they are not reported again. Formatting their
    tracebacks from a garbage collection can also land inside ``ast.parse`` and trip CPython."""
    from ayo_core.runtime.errors import NodeFailed

    if isinstance(context.get("exception"), NodeFailed) and "never retrieved" in context.get("message", ""):
        return
    loop.default_exception_handler(context)


def _on_loop() -> bool:
    try:
        return asyncio.get_running_loop() is _loop
    except RuntimeError:
        return False


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the background loop and wait for it (from any thread but the loop's)."""
    if _on_loop():
        coro.close()
        raise RuntimeError("a sync method of an optimized runnable was called on Ayo's own event loop; "
                           "use the async method (ainvoke/abatch/astream) there")
    return asyncio.run_coroutine_threadsafe(coro, loop()).result()


_END = object()


def iter_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async generator running on the background loop, from sync code."""
    if _on_loop():
        raise RuntimeError("stream() was called on Ayo's own event loop; use astream()")
    import queue as _queue

    q: _queue.Queue = _queue.Queue()

    async def pump() -> None:
        try:
            async for item in agen:
                q.put((item, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            q.put((_END, exc))
            return
        q.put((_END, None))

    fut = asyncio.run_coroutine_threadsafe(pump(), loop())
    try:
        yield from _drain(q.get)
    finally:
        if not fut.done():
            fut.cancel()


def _drain(get: Callable[[], tuple[Any, BaseException | None]]) -> Iterator[Any]:
    """Items from ``get()`` until the ``(_END, exc)`` marker; re-raises ``exc`` when set."""
    while True:
        item, exc = get()
        if item is _END:
            if exc is not None:
                raise exc
            return
        yield item


async def in_thread(source: AsyncIterator[Any] | None,
                    pipeline: Callable[[Iterator[Any]], Iterator[Any]]) -> AsyncIterator[Any]:
    """Run the sync iterator ``pipeline(chunks of source)`` in a worker thread; yield its items here."""
    import queue as _queue

    loop_ = asyncio.get_running_loop()
    inbox: _queue.Queue = _queue.Queue()
    outbox: asyncio.Queue = asyncio.Queue()

    def chunks() -> Iterator[Any]:
        return _drain(inbox.get)

    def work() -> None:
        try:
            for item in pipeline(chunks()):
                loop_.call_soon_threadsafe(outbox.put_nowait, (item, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            loop_.call_soon_threadsafe(outbox.put_nowait, (_END, exc))
            return
        loop_.call_soon_threadsafe(outbox.put_nowait, (_END, None))

    async def pump() -> None:
        try:
            if source is not None:
                async for item in source:
                    inbox.put((item, None))
        except BaseException as exc:  # noqa: BLE001 - raised inside the pipeline's iterator
            inbox.put((_END, exc))
            return
        inbox.put((_END, None))

    feeder = asyncio.ensure_future(pump())
    loop_.run_in_executor(None, work)
    try:
        while True:
            item, exc = await outbox.get()
            if item is _END:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:  # a consumer that stops early: the worker's iterator ends at the next chunk
        if not feeder.done():
            feeder.cancel()
            inbox.put((_END, None))
