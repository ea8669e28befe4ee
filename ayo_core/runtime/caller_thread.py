"""A sync call's observer calls run on the caller's own thread, where stock makes them.

Stock LangChain's sync ``invoke``/``stream`` runs every step, and every sync callback handler, in the
caller's thread, and a handler may depend on that: thread-locals, or a UI framework's per-script
context (Streamlit's handlers write nothing from another thread). Ayo runs the call on its background
loop (:mod:`ayo_core.runtime.bridge`). While the caller's thread waits there, it serves a
:class:`CallerThread`: an *observer call* (an adapter registers with :func:`route` what that is, e.g.
LangChain's async manager handing a sync handler's event to the loop's executor) runs on it instead
of in a pool thread, in the order the call makes them (one at a time, as in stock). Everything else
(the user's sync objects, the stream's steps, and the events their own sync managers report there)
still runs in the pool: the caller's thread only runs what it is handed while it waits.
"""

from __future__ import annotations

import concurrent.futures
import functools
import queue
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")
JOB = object()  # the marker of a job in the caller's queue (its other items are the call's own)
_ROUTED: list[Callable[[Callable[..., Any]], bool]] = []
CALLER: ContextVar[CallerThread | None] = ContextVar("ayo_caller_thread", default=None)


def route(is_observer_call: Callable[[Callable[..., Any]], bool]) -> None:
    """Run the executor calls for which ``is_observer_call(fn)`` holds on the waiting caller's thread."""
    if is_observer_call not in _ROUTED:
        _ROUTED.append(is_observer_call)


class CallerThread:
    """The thread of one sync call, waiting on ``inbox``: it runs the jobs put there until the call ends."""

    def __init__(self, inbox: queue.Queue | queue.SimpleQueue) -> None:
        self.inbox = inbox
        self._open = True
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> concurrent.futures.Future[T] | None:
        """``fn(*args, **kwargs)`` run by the caller's thread; None once it no longer serves (run it elsewhere)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if not self._open:
                return None
            self.inbox.put((JOB, (future, functools.partial(fn, *args, **kwargs))))
        return future

    def close(self) -> None:
        """The caller stops waiting: later jobs run where they were made; the ones already here run now."""
        with self._lock:
            self._open = False
        left: list[Any] = []
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if item[0] is JOB:
                run_job(item[1])
            else:
                left.append(item)
        for item in left:  # the call's own items (a stream's end) stay for the caller
            self.inbox.put(item)


def run_job(job: tuple[concurrent.futures.Future, Callable[[], Any]]) -> None:
    future, fn = job
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the job
        future.set_exception(exc)


def serving(get: Callable[[], Any]) -> Iterator[Any]:
    """The items ``get()`` returns, running the jobs among them on this thread."""
    while True:
        item = get()
        if isinstance(item, tuple) and item and item[0] is JOB:
            run_job(item[1])
            continue
        yield item


def routing_submit(submit: Callable[..., concurrent.futures.Future]) -> Callable[..., concurrent.futures.Future]:
    """An executor's ``submit`` that hands an observer call made inside a served call to its caller's thread."""
    def routed(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        caller = CALLER.get()
        if caller is not None and any(is_observer(fn) for is_observer in _ROUTED):
            future = caller.submit(fn, *args, **kwargs)
            if future is not None:
                return future
        return submit(fn, *args, **kwargs)

    return routed
