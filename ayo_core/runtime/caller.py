"""Calling a user's own (opaque) object the way the stock framework would at that point of a query.

An optimized query runs on Ayo's background loop (:mod:`ayo_core.runtime.bridge`) whether the
caller used the sync or the async API; stock takes the object's sync method in the first case
and awaits its async method on the caller's loop in the second. :data:`CALLER_LOOP` says which
(set inside the query's own task), :func:`call_stock` makes the matching call.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

# The caller's event loop while Ayo runs an ``aquery`` (None for a sync ``query``). Set inside
# the query's own task on Ayo's loop, so every node task of that query (a copy of its context)
# sees it and nothing leaks to other queries.
CALLER_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "ayo_caller_loop", default=None)


def in_async_call() -> bool:
    """Whether the running query came in through ``aquery`` (stock then takes the async paths)."""
    return CALLER_LOOP.get() is not None


async def call_stock(sync_fn: Callable[..., Any], async_fn: Callable[..., Awaitable[Any]], *args: Any,
                     **kwargs: Any) -> Any:
    """Call a user's (opaque) object the way the stock engine would at this point.

    Inside ``aquery`` stock awaits the object's async method on the caller's event loop; that
    is where it must run (a streaming synthesizer returns an ``AsyncStreamingResponse`` the
    caller iterates; async clients are bound to the loop they were made on), so it is sent
    there, the caller's loop being idle while it awaits us. Inside ``query`` stock calls the
    sync method: here in a worker thread, so other nodes keep running.
    """
    loop = CALLER_LOOP.get()
    if loop is None or loop.is_closed():
        return await asyncio.to_thread(sync_fn, *args, **kwargs)
    future = asyncio.run_coroutine_threadsafe(async_fn(*args, **kwargs), loop)
    return await asyncio.wrap_future(future)  # cancelling this cancels the task on the caller's loop
