"""Deferred side effects of a speculative task: recorded while it runs, replayed if its result is used.

A speculative step (``ayo_core.templates.speculation``) may be thrown away; whatever it would
have told the outside world (a framework's callback events, token counts) must then never have
happened. Code that emits calls :func:`emit` with a thunk: outside :func:`recording` it runs
at once, inside it is kept (per task, through a context variable) for :func:`replay`.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Callable, Iterator
from typing import Any

Record = Callable[[], Any]  # a deferred emission (may return an awaitable)
_RECORDER: contextvars.ContextVar[list[Record] | None] = contextvars.ContextVar("ayo_recorder", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Record]]:
    """Record (not emit) this task's emissions; :func:`replay` them if its result is used."""
    records: list[Record] = []
    token = _RECORDER.set(records)
    try:
        yield records
    finally:
        _RECORDER.reset(token)


def current() -> list[Record] | None:
    """The running task's record list, or None when it is not recording."""
    return _RECORDER.get()


def emit(record: Record) -> Any:
    """``record()`` now, or kept for replay while this task records."""
    records = _RECORDER.get()
    if records is not None:
        records.append(record)
        return None
    return record()


async def replay(records: list[Record]) -> None:
    """Emit recorded emissions, in the order they happened."""
    for record in records:
        out = record()
        if inspect.isawaitable(out):
            await out
