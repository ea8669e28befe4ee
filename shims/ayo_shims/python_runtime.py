"""Python-runtime internals Ayo relies on (CPython's ``concurrent.futures.thread``), declared once.

The one user today is :class:`DaemonThreadPool`, the default executor of Ayo's background
event loop (``ayo_core.runtime.bridge``): the adapters hand :func:`daemon_pool` to the core
bridge (``bridge.use_executor(python_runtime.daemon_pool)``), since ``ayo_core`` never
imports ``ayo_shims``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ayo_shims.touchpoints import all_of, declare, has_params, importable

T = TypeVar("T")

# The executor state a ThreadPoolExecutor subclass reads and writes (set in __init__, so only an
# instance can show them).
_POOL_STATE = ("_shutdown_lock", "_shutdown", "_work_queue", "_idle_semaphore", "_threads", "_max_workers",
               "_thread_name_prefix", "_initializer", "_initargs")


def _pool_has_state() -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        missing = [a for a in _POOL_STATE if not hasattr(pool, a)]
        if missing:
            raise AttributeError(f"ThreadPoolExecutor instances have no {', '.join(missing)}")
    finally:
        pool.shutdown(wait=False)


WORKER_LOOP = declare(
    "concurrent.futures.thread._worker", framework="python", checked="3.11",
    why="DaemonThreadPool starts its daemon threads on the pool's own worker loop",
    check=has_params("concurrent.futures.thread", "_worker",
                     ("executor_reference", "work_queue", "initializer", "initargs"), exact=True))
WORK_ITEM = declare(
    "concurrent.futures.thread._WorkItem", framework="python", checked="3.11",
    why="DaemonThreadPool queues work exactly as ThreadPoolExecutor.submit does",
    check=all_of(importable("concurrent.futures.thread", "_WorkItem"),
                 has_params("concurrent.futures.thread", "_WorkItem", ("future", "fn", "args", "kwargs"),
                            exact=True)))
POOL_STATE = declare(
    "concurrent.futures.ThreadPoolExecutor private state", framework="python", checked="3.11",
    why="DaemonThreadPool overrides submit/_adjust_thread_count on the executor's own fields",
    check=_pool_has_state)


class DaemonThreadPool(ThreadPoolExecutor):
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
        from concurrent.futures.thread import _worker

        if self._idle_semaphore.acquire(timeout=0):
            return
        if len(self._threads) < self._max_workers:
            t = threading.Thread(name=f"{self._thread_name_prefix}_{len(self._threads)}", target=_worker,
                                 args=(weakref.ref(self), self._work_queue, self._initializer, self._initargs),
                                 daemon=True)
            t.start()
            self._threads.add(t)


def daemon_pool(max_workers: int, thread_name_prefix: str) -> ThreadPoolExecutor:
    """A :class:`DaemonThreadPool`, once this Python's internals are checked (``ShimError`` naming
    the touchpoint when they changed)."""
    for touchpoint in (WORKER_LOOP, WORK_ITEM, POOL_STATE):
        touchpoint.verify()
    return DaemonThreadPool(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
