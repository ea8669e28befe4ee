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


def streamed_lines(text_so_far: str, *, lstrip: str | None = None, strip_lines: bool = False) -> tuple[list[str], str]:
    """A line-per-query decode split while it streams: its finished lines and the line still growing.

    A line is finished once a newline follows it; the last segment (possibly empty) is still being
    decoded. The two knobs are the frameworks' own parses, which differ and must each be kept:
    ``lstrip`` is what the whole text loses at its start first (``str.lstrip``'s argument: None for
    whitespace, as LangChain's ``LineListOutputParser`` after ``strip()``; ``"`"`` for the backticks
    LlamaIndex's ``QueryFusionRetriever`` strips), and ``strip_lines`` strips each finished line and
    drops the blank ones (LlamaIndex) instead of keeping lines as written and dropping only empty
    ones (LangChain). The growing line is returned as written either way.
    """
    segments = text_so_far.lstrip(lstrip).split("\n")
    if strip_lines:
        finished = [s.strip() for s in segments[:-1] if s.strip()]
    else:
        finished = [s for s in segments[:-1] if s]
    return finished, segments[-1]
