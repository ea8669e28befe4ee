"""Stream chunks as frameworks hand them to callers: added up into one value, or drained from a queue.

A framework's streamed value is its chunks added up (``a + b``: LangChain's message chunks merge
content and metadata; strings concatenate). And a query whose graph puts chunks on a queue for the
caller (the model node of ``astream``) is read with :func:`drain_while_running`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any


def add_chunks(chunks: Iterable[Any]) -> Any:
    """The chunks added up in order (None when there are none)."""
    total: Any = None
    for chunk in chunks:
        total = chunk if total is None else total + chunk
    return total


async def aadd_chunks(chunks: AsyncIterable[Any], each: Callable[[Any], Any] | None = None) -> Any:
    """:func:`add_chunks` of an async stream; ``each(chunk)`` sees every chunk as it comes."""
    total: Any = None
    async for chunk in chunks:
        if each is not None:
            each(chunk)
        total = chunk if total is None else total + chunk
    return total


def merge_chunk(total: Any, chunk: Any) -> Any:
    """``total + chunk`` for a stream's running value (``chunk`` when it is the first or the two do
    not add: the value is then the latest chunk, as LangChain's stream aggregation keeps it)."""
    if total is None:
        return chunk
    try:
        return total + chunk
    except TypeError:
        return chunk


async def drain_while_running(start: Callable[[], Awaitable[Any]], queue: asyncio.Queue) -> AsyncIterator[Any]:
    """The items the work ``start()`` puts on ``queue`` while it runs, then the work's error, if any.

    The work starts when the first item is asked for; a consumer that stops early (or is
    cancelled) cancels it.
    """
    end = object()
    task = asyncio.ensure_future(start())
    task.add_done_callback(lambda _t: queue.put_nowait(end))
    try:
        while (item := await queue.get()) is not end:
            yield item
        await task  # raises the work's error, if any
    finally:
        if not task.done():
            task.cancel()
