"""Background tasks a node starts, owned by its query: cancelled with it, shown in its trace.

A lowering sometimes starts work that the node returning does not wait for at once: a fusion
retriever's searches started while its queries are still being decoded, an agent's tool call
started from the model's stream before the tools step asks for it. Started with
:func:`start_owned` inside a running node, such a task belongs to that node's query: the query's
release cancels it if it is still running (a failed or cancelled query leaves nothing behind), and
the query's trace lists it (:class:`~ayo_core.trace.TaskSpan`: which node started it, when it ran,
how it ended). Outside a running query (a stock code path, a test) it is a plain task of the
running loop, as ``asyncio.ensure_future`` makes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ayo_core.trace import TaskSpan, Trace

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class QueryTasks:
    """The owned tasks of one query (``trace``: where they are recorded)."""

    trace: Trace
    tasks: set[asyncio.Future] = field(default_factory=set)

    def adopt(self, task: asyncio.Future, name: str, node: str) -> None:
        loop = asyncio.get_running_loop()
        span = TaskSpan(self.trace.query_id, node, name, loop.time(), status="running")
        self.trace.tasks.append(span)
        self.tasks.add(task)

        def ended(done: asyncio.Future) -> None:
            self.tasks.discard(done)
            span.end = loop.time()
            span.status = "cancelled" if done.cancelled() else "failed" if done.exception() else "done"

        task.add_done_callback(ended)

    async def cancel_all(self) -> None:
        """Cancel the tasks still running and wait for them to unwind (their errors are the starter's to read)."""
        pending = [t for t in self.tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            log.debug("Ayo: query %s cancels %d owned task(s) still running", self.trace.query_id, len(pending))
            await asyncio.gather(*pending, return_exceptions=True)


# (the running node's query tasks, the node's name); set by the runtime around each node call
_OWNER: ContextVar[tuple[QueryTasks, str] | None] = ContextVar("ayo_owned_tasks", default=None)


def set_owner(tasks: QueryTasks, node: str) -> Any:
    """Make ``tasks`` own what the current context starts (the runtime calls it around a node); a reset token."""
    return _OWNER.set((tasks, node))


def reset_owner(token: Any) -> None:
    _OWNER.reset(token)


def start_owned(work: Awaitable[T], name: str) -> asyncio.Future[T]:
    """``asyncio.ensure_future(work)``, owned by the running node's query when there is one.

    ``name`` says what the task is in the trace ("search: <query>", "tool: search_docs").
    """
    task = asyncio.ensure_future(work)
    owner = _OWNER.get()
    if owner is not None:
        tasks, node = owner
        tasks.adopt(task, name, node)
    return task
