"""A routing lambda (a ``RunnableLambda`` whose function returns a runnable) with stock's runs.

Stock's ``RunnableLambda`` invokes the runnable its function returns *inside its own run*: the
routed runnable's run is a child of the lambda's (``run_manager.get_child()``, no step tag), and
the lambda's run ends with the routed runnable's output, or with its error. Ayo lowers the routed
runnable into nodes of the running graph (its model calls batch and stream on Ayo's engines), so
the lambda's run must stay open while those nodes run: the lambda is called as stock calls it
(``_acall_with_config`` / ``_call_with_config`` open and end its run) in a task of its own, whose
function body, when the user's function returns a runnable, hands it over and waits for the
routed value. A node after the routed nodes hands that value back; a failure of the query hands
its error back (``ChainCall.open_runs``), so the run ends as stock's would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

Body = Callable[[Any, Any, RunnableConfig], Any]  # (value, run_manager, config), as _call_with_config calls it


@dataclass
class RoutedRun:
    """The lambda's open run while the runnable its function returned runs as graph nodes."""

    runnable: Any
    callbacks: Any  # the lambda run's child callback manager: the routed runnable's parent
    recursion_limit: int
    task: asyncio.Future  # the lambda's call: ends its run with the value handed back
    value: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)

    async def end(self, value: Any) -> Any:
        """The routed runnable's value: the lambda's run ends with it."""
        self.value.set_result(value)
        return await self.task

    async def fail(self, error: BaseException) -> None:
        """The query failed while the lambda's run was open: it ends with the error, as stock's."""
        if not self.value.done():
            self.value.set_exception(error)
        try:
            await self.task
        except BaseException:  # noqa: BLE001 - the error is the query's, raised by its caller
            pass


def routing_body(lam: Any, body: Body, handed: asyncio.Future, loop: asyncio.AbstractEventLoop, sync: bool) -> Body:
    """``body`` (the lambda's function call) that, when the function returns a runnable, hands
    ``(runnable, child callbacks, recursion limit, value future)`` to ``handed`` and returns the value
    set there: the run ``_call_with_config`` opened ends with the routed runnable's output."""

    def routed(value: Any, out: Any, run_manager: Any, config: RunnableConfig) -> concurrent.futures.Future | None:
        if not isinstance(out, Runnable):
            return None
        limit = config["recursion_limit"]
        if limit <= 0:  # RunnableLambda's own check, inside its run
            raise RecursionError(f"Recursion limit reached when invoking {lam} with input {value}.")
        box: concurrent.futures.Future = concurrent.futures.Future()
        loop.call_soon_threadsafe(_set, handed, (out, run_manager.get_child(), limit - 1, box))
        return box

    if sync:
        def sync_body(value: Any, run_manager: Any, config: RunnableConfig) -> Any:
            out = body(value, run_manager, config)
            box = routed(value, out, run_manager, config)
            return out if box is None else box.result()  # a worker thread waits for the routed value

        return sync_body

    async def async_body(value: Any, run_manager: Any, config: RunnableConfig) -> Any:
        out = await body(value, run_manager, config)
        box = routed(value, out, run_manager, config)
        return out if box is None else await asyncio.wrap_future(box)

    return async_body


def _set(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


async def call_lambda(lam: Any, start: Callable[[Body], Awaitable[Any]], body: Body, sync: bool) -> Any | RoutedRun:
    """Call the lambda (``start(body)`` runs ``_call_with_config`` around ``body``): its value, or a
    :class:`RoutedRun` when its function returned a runnable (its run still open)."""
    loop = asyncio.get_running_loop()
    handed: asyncio.Future = loop.create_future()
    task = asyncio.ensure_future(start(routing_body(lam, body, handed, loop, sync)))
    try:
        await asyncio.wait({task, handed}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if not handed.done():
        return task.result()  # a plain value, or the function's error (its run ended with it)
    runnable, callbacks, limit, box = handed.result()
    return RoutedRun(runnable, callbacks, limit, task, box)
