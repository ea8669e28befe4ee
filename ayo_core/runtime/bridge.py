"""The sync/async bridge: one background event loop per process, shared by every adapter.

Why one long-lived loop rather than ``asyncio.run`` per call: the runtime's schedulers and
the engines' HTTP clients keep per-loop state worth reusing, and concurrent sync calls from
several threads (LlamaIndex ``query``, LangChain ``invoke``/``batch``/``stream``) must meet
in one runtime so the engine schedulers batch and prioritize them together. Async methods
do not come here unless an adapter sends them (LangChain's run on the caller's loop, as
stock does; LlamaIndex's ``aquery`` awaits the bridge loop with :func:`arun`).

The loop's default executor (``asyncio.to_thread``, sync user objects) is made by the
factory an adapter installs with :func:`use_executor` (``ayo_shims`` has a daemon pool
that keeps serving user threads after the main thread ends); the core cannot import it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ayo_core.caller_code import running_ayo_code
from ayo_core.runtime import caller_thread, chunks
from ayo_core.runtime.errors import NodeFailed

log = logging.getLogger(__name__)
T = TypeVar("T")
# Worker threads of the loop's executor: as many as a stock sync batch would use (one per
# input up to max_concurrency), not asyncio's cores + 4.
WORKERS = 64
THREAD_NAME = "ayo-loop"
ExecutorFactory = Callable[[int, str], ThreadPoolExecutor]
_END = object()
# How often the background loop drops the per-loop state of event loops that closed (below): the
# engines' HTTP pools close idle connections on the same period (``http_client.KEEPALIVE_S``).
SWEEP_S = 4.0
_per_loop_maps: list[weakref.ref[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]]] = []
_maps_lock = threading.Lock()


def forget_closed_loops(by_loop: MutableMapping[asyncio.AbstractEventLoop, Any]) -> None:
    """Drop the entries of closed event loops from a per-loop mapping.

    A weak key alone never frees them: the value (a client's open connections, a scheduler's
    futures) refers to its loop, so each ``asyncio.run`` a caller finished kept its loop, its
    client and that client's sockets (CLOSE-WAIT, one more set per closed loop: seen in the soak).
    Dropped, the cycle is garbage, and the collector closes the sockets.
    """
    for loop in [loop for loop in list(by_loop.keys()) if loop.is_closed()]:
        by_loop.pop(loop, None)


def for_this_loop(per_loop: MutableMapping, make: Callable[[], T], stale: Callable[[T], bool] = lambda _: False) -> T:
    """The running loop's entry of a per-loop map (:func:`per_loop_map`), made by ``make()`` when it has
    none or its entry is ``stale`` (a closed client); closed loops' entries are dropped on the way."""
    loop = asyncio.get_running_loop()
    value = per_loop.get(loop)
    if value is None or stale(value):
        forget_closed_loops(per_loop)
        value = make()
        per_loop[loop] = value
    return value


def per_loop_map() -> weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]:
    """A mapping from event loop to per-loop state whose closed loops' entries go within ``SWEEP_S``.

    Forgetting them when the next loop arrives (``forget_closed_loops`` where an entry is made) is
    not enough on its own: the last caller loops to close kept their HTTP connections (CLOSE-WAIT
    once the server timed them out) until some new loop used Ayo again, which a process that has
    finished its work never does. Ayo's own loop, which always runs, sweeps them.
    """
    by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
    with _maps_lock:
        _per_loop_maps[:] = [ref for ref in _per_loop_maps if ref() is not None]
        _per_loop_maps.append(weakref.ref(by_loop))
    return by_loop


def _sweep_closed_loops(loop: asyncio.AbstractEventLoop) -> None:
    with _maps_lock:
        maps = [by_loop for ref in _per_loop_maps if (by_loop := ref()) is not None]
    for by_loop in maps:
        try:
            forget_closed_loops(by_loop)
        except RuntimeError:  # another thread added its loop meanwhile: the next sweep gets it
            continue
    loop.call_later(SWEEP_S, _sweep_closed_loops, loop)


def _plain_pool(max_workers: int, thread_name_prefix: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix)


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The default handler, except for two reports that are not failures of anything.

    - Other loops' HTTP clients finalized on ours: the openai SDK's async client closes itself
      from ``__del__`` with a task on *the running loop*; when the garbage collector collects a
      client of a caller's finished ``asyncio.run`` while this thread runs, that task lands here
      and fails with "Event loop is closed" (its sockets belong to the dead loop).
    - A failed query's per-part tasks collected unretrieved: their ``NodeFailed`` already failed
      the query and reached the caller. (Formatting their tracebacks from a garbage collection
      can also land inside ``ast.parse`` and trip CPython.)
    """
    exc, task = context.get("exception"), context.get("future")
    coro = getattr(task, "get_coro", lambda: None)()
    if (isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc)
            and getattr(coro, "__qualname__", "").endswith("aclose")):
        log.debug("ignored a foreign client's close on Ayo's loop: %s", context.get("message"))
        return
    if isinstance(exc, NodeFailed) and "never retrieved" in context.get("message", ""):
        return
    loop.default_exception_handler(context)


class Bridge:
    """One daemon thread running Ayo's event loop; sync and foreign-loop callers reach it here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._executor_factory: ExecutorFactory = _plain_pool

    def use_executor(self, factory: ExecutorFactory) -> None:
        """Make the loop's default executor with ``factory(max_workers, thread_name_prefix)``
        (now, if the loop already runs, and on every restart)."""
        with self._lock:
            if factory is self._executor_factory:
                return
            self._executor_factory = factory
            if self._loop is not None and not self._loop.is_closed():
                self._loop.set_default_executor(self._executor())

    def loop(self) -> asyncio.AbstractEventLoop:
        """The background loop (started on first use, and again if its thread died)."""
        with self._lock:
            if (self._loop is None or self._loop.is_closed() or self._thread is None
                    or not self._thread.is_alive()):
                self._loop, self._thread = self._start()
            return self._loop

    def _start(self) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_exception_handler)
        loop.set_default_executor(self._executor())
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.call_soon(_sweep_closed_loops, loop)
            loop.run_forever()

        thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
        thread.start()
        ready.wait()
        return loop, thread

    def _executor(self) -> ThreadPoolExecutor:
        pool = self._executor_factory(WORKERS, THREAD_NAME)
        pool.submit = caller_thread.routing_submit(pool.submit)  # type: ignore[method-assign]
        return pool

    def on_loop_thread(self) -> bool:
        """Whether the caller runs on the bridge loop's own thread (where a sync wait would deadlock)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _refuse_on_loop(self, what: str) -> None:
        if self.on_loop_thread():
            raise RuntimeError(
                f"{what} was called on Ayo's own event loop thread, where waiting for it would deadlock "
                "(a node or callback calling back into an optimized object); there, use the async method "
                "(aquery / ainvoke / abatch / astream) or call the stock object")

    def submit(self, coro: Coroutine[Any, Any, T], what: str = "a synchronous Ayo call") -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; a future for its result."""
        loop = self.loop()
        try:
            self._refuse_on_loop(what)
        except RuntimeError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run_sync(self, coro: Coroutine[Any, Any, T], what: str = "a synchronous Ayo call",
                 serve_caller: bool = False) -> T:
        """Run ``coro`` on the loop and block this thread until it finishes (an interrupt cancels it);
        ``serve_caller``: meanwhile this thread runs the call's observer calls (:mod:`caller_thread`)."""
        if not serve_caller:
            fut = self.submit(coro, what)
            try:
                with running_ayo_code():
                    return fut.result()
            except BaseException:
                fut.cancel()
                raise
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        caller = caller_thread.CallerThread(inbox)
        fut = self.submit(_served_by(caller, coro), what)
        fut.add_done_callback(lambda _: inbox.put(_END))
        try:
            with running_ayo_code():
                next(item for item in caller_thread.serving(inbox.get) if item is _END)
                return fut.result()
        except BaseException:
            fut.cancel()
            raise
        finally:
            caller.close()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on the bridge loop from any other event loop; cancelling the
        awaiting task cancels ``coro``."""
        fut = self.submit(coro, "an async Ayo call awaited")
        try:
            with running_ayo_code():
                return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def iter_sync(self, agen: AsyncIterator[T], what: str = "stream()", serve_caller: bool = False) -> Iterator[T]:
        """Iterate an async iterator running on the loop, from sync code (stopping early cancels it);
        ``serve_caller``: while it waits, this thread runs the stream's observer calls (:mod:`caller_thread`)."""
        self._refuse_on_loop(what)
        items: queue.Queue = queue.Queue()
        caller = caller_thread.CallerThread(items) if serve_caller else None
        served = caller_thread.serving(items.get)

        async def pump() -> None:
            if caller is not None:
                caller_thread.CALLER.set(caller)
            try:
                async for item in agen:
                    items.put((item, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                items.put((_END, exc))
                return
            items.put((_END, None))

        fut = asyncio.run_coroutine_threadsafe(pump(), self.loop())
        try:
            yield from _drain(lambda: _waiting_for_ayo(lambda: next(served)))
        finally:
            if not fut.done():
                fut.cancel()
            if caller is not None:
                caller.close()


async def _served_by(caller: caller_thread.CallerThread, coro: Coroutine[Any, Any, T]) -> T:
    caller_thread.CALLER.set(caller)  # this task's context, and the tasks it starts
    return await coro


def _waiting_for_ayo(get: Callable[[], T]) -> T:
    with running_ayo_code():  # the consumer waits for Ayo's stream: Ayo's time, not the caller's
        return get()


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
    """Run the sync iterator ``pipeline(items of source)`` in a worker thread of the running loop's
    executor; yield its items here (a LangChain sync stream's ``transform`` steps, as stock runs them)."""
    loop = asyncio.get_running_loop()
    inbox: queue.Queue = queue.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    asked = asyncio.Event()

    def ask() -> tuple[Any, BaseException | None]:
        # the worker's pipeline paces the source, as stock's chain of generators is paced by its steps:
        # the source makes its next item (and its model's callbacks) only after the steps handled the last
        loop.call_soon_threadsafe(asked.set)
        return inbox.get()

    def work() -> None:
        try:
            for item in pipeline(_drain(ask)):
                loop.call_soon_threadsafe(outbox.put_nowait, (item, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            loop.call_soon_threadsafe(outbox.put_nowait, (_END, exc))
            return
        loop.call_soon_threadsafe(outbox.put_nowait, (_END, None))

    async def pump() -> None:
        try:
            if source is not None:
                async for item in chunks.paced(source, asked):
                    inbox.put((item, None))
        except BaseException as exc:  # noqa: BLE001 - raised inside the pipeline's iterator
            inbox.put((_END, exc))
            return
        inbox.put((_END, None))

    feeder = asyncio.ensure_future(pump())
    # in this task's context (the caller's, carried by the bridge): stock runs these steps in the caller's
    # thread, where the caller's context variables are set; a bare executor call would run them without
    loop.run_in_executor(None, contextvars.copy_context().run, work)
    try:
        while True:
            item, exc = await outbox.get()
            if item is _END:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:  # a consumer that stops early: the worker's iterator ends at the next item
        if not feeder.done():
            feeder.cancel()
            inbox.put((_END, None))


BRIDGE = Bridge()


def loop() -> asyncio.AbstractEventLoop:
    """The process's background loop (see :class:`Bridge`)."""
    return BRIDGE.loop()


def use_executor(factory: ExecutorFactory) -> None:
    """Install the factory of the background loop's default executor (see :meth:`Bridge.use_executor`)."""
    BRIDGE.use_executor(factory)


def run_sync(coro: Coroutine[Any, Any, T], what: str = "a synchronous Ayo call", serve_caller: bool = False) -> T:
    """Run ``coro`` on the background loop and wait for it (from any thread but the loop's)."""
    return BRIDGE.run_sync(coro, what, serve_caller)


async def arun(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the background loop from another event loop (cancellation propagates)."""
    return await BRIDGE.arun(coro)


def iter_sync(agen: AsyncIterator[T], what: str = "stream()", serve_caller: bool = False) -> Iterator[T]:
    """Iterate an async iterator running on the background loop, from sync code."""
    return BRIDGE.iter_sync(agen, what, serve_caller)


def on_loop_thread() -> bool:
    """Whether the caller runs on the background loop's thread."""
    return BRIDGE.on_loop_thread()


_worker_state = threading.local()


def _with_idle_loop(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    # A worker thread keeps one event loop of its own, set and never running.
    if getattr(_worker_state, "loop", None) is None:
        _worker_state.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(_worker_state.loop)
    return fn(*args)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a framework's sync helper, in a worker thread of the running loop's executor.

    Why: sync framework code that runs coroutines itself (LlamaIndex's ``asyncio_run``, e.g. in
    token counting while a prompt is repacked) starts a new thread and a new event loop per call
    when it finds a *running* loop, as on Ayo's loop thread: ~1 ms of overhead per call that stock,
    which runs in a thread without a running loop, does not pay. The worker has an idle loop of its
    own, which such code reuses. The caller's context variables (instrumentation spans) go along.
    """
    ctx = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(None, ctx.run, _with_idle_loop, fn, args)
