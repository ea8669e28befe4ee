"""One background event loop for every optimized runnable in the process.

Why: engines hold per-loop state (HTTP connection pools, the runtime's schedulers)
and the runtime's batching only works when all queries of a batch meet on one loop.
Sync ``invoke``/``batch``/``stream`` submit to this loop and wait; ``ainvoke`` & co.
await it from the caller's loop (which may be the same loop, e.g. inside a node).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The background loop (started on first use, a daemon thread)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            new = asyncio.new_event_loop()
            new.set_exception_handler(_quiet_failed_parts)
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            threading.Thread(target=run, name="ayo-langchain-loop", daemon=True).start()
            ready.wait()
            _loop = new
        return _loop


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


async def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` running on the background loop (directly when already on it)."""
    if _on_loop():
        return await coro
    fut = asyncio.run_coroutine_threadsafe(coro, loop())
    try:
        return await asyncio.wrap_future(fut)
    except asyncio.CancelledError:
        fut.cancel()
        raise


_END = object()


async def aiter_on_loop(agen: AsyncIterator[T]) -> AsyncIterator[T]:
    """Iterate an async generator that runs on the background loop, from the caller's loop."""
    if _on_loop():
        async for item in agen:
            yield item
        return
    bg = loop()
    caller = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in agen:
                caller.call_soon_threadsafe(queue.put_nowait, (item, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            caller.call_soon_threadsafe(queue.put_nowait, (_END, exc))
            return
        caller.call_soon_threadsafe(queue.put_nowait, (_END, None))

    fut = asyncio.run_coroutine_threadsafe(pump(), bg)
    try:
        while True:
            item, exc = await queue.get()
            if item is _END:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        if not fut.done():
            fut.cancel()


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
        while True:
            item, exc = q.get()
            if item is _END:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        if not fut.done():
            fut.cancel()
