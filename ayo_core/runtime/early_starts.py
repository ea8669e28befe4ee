"""Work started before the step that needs it asks for it: an agent's tool calls started from the model's stream.

Both adapters watch a streaming model's tool calls (each with its own stream observer: LlamaIndex's
``AgentStream`` events, LangChain's token callbacks) and start a call's tool as soon as its arguments
are complete, while the rest of the message still decodes. The framework's tools step comes to that
call later and takes the started task instead of running the tool again. :class:`EarlyStarts` is the
one place such starts live:

- each start is an owned task (:func:`~ayo_core.runtime.owned.start_owned`): cancelled with the query
  that started it, listed in its trace;
- it is kept under a key the adapter chooses (a tool call's id, or the tool and its arguments) until
  taken; several starts under one key are taken oldest first;
- at most ``max_untaken`` wait at once: beyond that the oldest is forgotten (a start whose step never
  came, such as a model stream that failed after the call's arguments were complete, must not pile up
  on a long-lived object); its task still ends on its own, and its error is read so asyncio does not
  report it as never retrieved;
- every start is logged (``log``: what ``explain()`` and the benchmarks show).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Hashable
from typing import Any

from ayo_core.runtime.owned import start_owned

MAX_UNTAKEN = 1024  # starts waiting to be taken; older ones are forgotten (see the module doc)
LOG_SIZE = 256  # log entries kept


class EarlyStarts:
    """Started work by key, until the step that needs it takes it (see the module doc)."""

    def __init__(self, max_untaken: int = MAX_UNTAKEN) -> None:
        self.max_untaken = max_untaken
        self._waiting: dict[Hashable, deque[asyncio.Future]] = {}
        self.untaken = 0  # starts waiting under some key
        self.log: deque[dict[str, Any]] = deque(maxlen=LOG_SIZE)

    def start(self, key: Hashable, work: Awaitable[Any], name: str, **entry: Any) -> asyncio.Future:
        """Start ``work`` as an owned task called ``name``, kept under ``key``; ``entry`` goes into the log."""
        task = start_owned(work, name)
        task.add_done_callback(_read_error)
        self._waiting.setdefault(key, deque()).append(task)
        self.untaken += 1
        while self.untaken > self.max_untaken:
            self.take(next(iter(self._waiting)))
        self.log.append({"started": time.perf_counter(), **entry})
        return task

    def take(self, key: Hashable) -> asyncio.Future | None:
        """The oldest start under ``key`` not yet taken, or None (the step runs the work itself)."""
        waiting = self._waiting.get(key)
        if not waiting:
            return None
        task = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        self.untaken -= 1
        return task

    def __contains__(self, key: Hashable) -> bool:
        return key in self._waiting


def _read_error(task: asyncio.Future) -> None:
    # a start nobody takes (its step never came) would otherwise be reported as never retrieved
    if not task.cancelled():
        task.exception()
