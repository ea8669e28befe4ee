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
    """An async stream's chunks added up as LangChain's next step gathers them (:func:`merge_chunk`: a
    cumulative parser's partial values do not add, the latest stands); ``each(chunk)`` sees every chunk
    as it comes."""
    total: Any = None
    async for chunk in chunks:
        if each is not None:
            each(chunk)
        total = merge_chunk(total, chunk)
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


class PacedQueue(asyncio.Queue):
    """A queue whose consumer paces its producer, as a chain of generators is paced by its caller.

    :meth:`paced` pulls the next item from a source only once the consumer waits on an empty queue
    (:meth:`get`), so whatever the source does while producing an item (a model's stream callbacks,
    its ``on_chat_model_stream`` event) happens after the consumer has handled the item before, as
    in a framework's pull-based stream. A source that is a network stream loses nothing: its
    client buffers while it waits.
    """

    def __init__(self) -> None:
        super().__init__()
        self.demand = asyncio.Event()

    async def get(self) -> Any:
        if self.empty():
            self.demand.set()
        return await super().get()

    def paced(self, source: AsyncIterable[Any]) -> AsyncIterator[Any]:
        return paced(source, self.demand)


async def paced(source: AsyncIterable[Any], demand: asyncio.Event) -> AsyncIterator[Any]:
    """``source``'s items, each pulled only once ``demand`` is set (and cleared again): its consumer paces it."""
    it = aiter(source)
    while True:
        await demand.wait()
        demand.clear()
        try:
            item = await anext(it)
        except StopAsyncIteration:
            return
        yield item


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
