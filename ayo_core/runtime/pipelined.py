"""Decode pipelining inside one node: start the work for each part of a streamed text once it is final.

A graph node's streamed output reaches per-part consumers through :class:`~ayo_core.runtime.streams.PartChannel`;
inside a single node (a framework object Ayo mirrors whole, e.g. a query-expanding retriever nested in
another) the same overlap needs only tasks: :class:`PipelinedParts` starts them as parts finish, then
reconciles them with the final parse (a part that changed is started again, extra ones are cancelled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class PipelinedParts:
    """``start(part) -> tasks`` for every part ``finished(text_so_far)`` reports, as soon as it does."""

    def __init__(self, finished: Callable[[str], list[Any]], start: Callable[[Any], list[asyncio.Task]]) -> None:
        self.finished, self.start = finished, start
        self.started: list[Any] = []
        self.tasks: list[list[asyncio.Task]] = []  # per started part

    def on_text(self, text_so_far: str) -> None:
        """The streamed text grew: start the parts that became final."""
        for part in self.finished(text_so_far)[len(self.started):]:
            self.started.append(part)
            self.tasks.append(self.start(part))

    def reconcile(self, final: list[Any]) -> list[list[asyncio.Task]]:
        """Tasks for exactly the ``final`` parts; restart any that diverged, cancel the extra ones."""
        out = []
        for k, part in enumerate(final):
            if k < len(self.started) and self.started[k] == part:
                out.append(self.tasks[k])
            else:
                log.debug("streamed part %d diverged from the final parse; starting it again", k)
                out.append(self.start(part))
        for tasks in self.tasks[len(final):]:
            for t in tasks:
                t.cancel()
        return out
