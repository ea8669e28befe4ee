"""When an optimized *function* runs the user's own code: so Ayo's overhead can leave it out.

A doc-QA function (``optimize(fn)``) is the user's code with Ayo's hooks inside it: the user
splits documents, opens a Chroma collection, builds an index (a hook defers its vectors), asks
a query engine (a hook runs Ayo's graph) and deletes the collection. A chat engine's turn reads
and writes the user's memory object around Ayo's graph, as stock's does. Stock runs all of that
code too, so the time it takes is not Ayo's overhead; only the hooks' time outside the graph is.

The optimized function runs the user's function inside :func:`running_caller_code` (a benchmark
runs a whole call in it: ``ayo compare``); every way into Ayo (``optimize()``, the hops to Ayo's
loop, a pipeline's run, the doc-QA hooks) runs inside :func:`running_ayo_code`, which pauses
the caller's clock. The caller's intervals go
to the enclosing :func:`ayo_core.trace.collect_traces` block (``sink.caller_code``); outside any
block nothing is recorded and both context managers cost a context-variable read.

Clock: ``time.monotonic()``, the one Ayo's traces use (``loop.time()``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ayo_core.trace import current_sink

Interval = tuple[float, float]


class CallerClock:
    """One call's clock of the user's code: runs except while a hook of Ayo's runs.

    Tasks the user's function starts share it (they copy the context), so hooks are counted,
    not nested: the clock stops at the first hook to start and restarts when the last one ends.
    """

    def __init__(self, sink: list[Interval]) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._hooks = 0
        self._since = time.monotonic()

    def hook_started(self) -> None:
        with self._lock:
            self._hooks += 1
            if self._hooks == 1:
                self._sink.append((self._since, time.monotonic()))

    def hook_ended(self) -> None:
        with self._lock:
            self._hooks -= 1
            if self._hooks == 0:
                self._since = time.monotonic()

    def stop(self) -> None:
        with self._lock:
            if self._hooks == 0:
                self._sink.append((self._since, time.monotonic()))
            self._hooks = -1  # a hook still running in a task the function left behind records nothing more


_CLOCK: ContextVar[CallerClock | None] = ContextVar("ayo_caller_clock", default=None)


@contextmanager
def running_caller_code() -> Iterator[None]:
    """The block runs the user's function: its time outside Ayo's hooks is recorded as the caller's."""
    sink = current_sink()
    if sink is None or _CLOCK.get() is not None:  # an optimized function inside a timed call: one clock
        yield
        return
    clock = CallerClock(sink.caller_code)
    token = _CLOCK.set(clock)
    try:
        yield
    finally:
        _CLOCK.reset(token)
        clock.stop()


@contextmanager
def running_ayo_code() -> Iterator[None]:
    """The block is one of Ayo's hooks inside the user's function: the caller's clock stops."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    clock.hook_started()
    token = _CLOCK.set(None)  # a hook inside a hook (a barrier inside a query) is the same hook
    try:
        yield
    finally:
        _CLOCK.reset(token)
        clock.hook_ended()
