"""A virtual clock for the asyncio loop: sleeps finish at once, in timestamp order.

With it, fake engines' latency models play out deterministically and fast:
``loop.time()`` (which traces and ``asyncio.timeout`` use) advances exactly by
the modelled delays. Real waits still work: with no timer pending the loop
blocks on its selector as usual (threads, sockets). While a timer is pending,
work in a thread is not waited for, so run sync node fns inline
(``Runtime(inline_sync=True)``) under a virtual clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualClock:
    """Patch the running loop's ``time()`` and selector while inside ``with VirtualClock():``."""

    def __init__(self, start: float = 0.0):
        self.now = start
        self._loop: asyncio.AbstractEventLoop | None = None

    def time(self) -> float:
        return self.now

    def __enter__(self) -> VirtualClock:
        loop = asyncio.get_running_loop()
        selector = loop._selector  # type: ignore[attr-defined]  # asyncio's own event loops have one
        real_select = selector.select

        def select(timeout: float | None = None) -> Any:
            if timeout is None:
                return real_select(None)  # nothing scheduled: wait for real I/O (threads)
            if timeout > 0:
                self.now += timeout
            return real_select(0)

        self._loop, self._selector = loop, selector
        loop.time = self.time  # type: ignore[method-assign]
        selector.select = select
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._loop is not None
        del self._loop.time
        del self._selector.select
        self._loop = None


def run_virtual(main: Callable[[], Awaitable[T]], start: float = 0.0) -> T:
    """``asyncio.run(main())`` under a :class:`VirtualClock`."""

    async def wrapper() -> T:
        with VirtualClock(start):
            return await main()

    return asyncio.run(wrapper())
