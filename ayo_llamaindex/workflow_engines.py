"""Query engines a workflow step calls, lowered.

A step of an optimized workflow that awaits ``query_engine.aquery(q)`` (the way LlamaIndex's
workflow examples retrieve and answer inside steps) gets Ayo's lowered graph of that engine: its
query embedding, retrieval, reranking and synthesis go through the shared engine schedulers on the
workflow's own loop, so the sub-queries of concurrent step invocations batch with each other and
with the steps' direct model calls. The response and the query's events are those of
``optimize(query_engine).aquery(q)`` (identical to stock's; see
:class:`~ayo_llamaindex.sub_question.ToolQueryEngine`).

Left to stock: a sync ``query()`` in an async step (it blocks the loop in stock too), an engine
Ayo does not lower (the capture found nothing to lower: it would run whole anyway), one already
optimized by the user, and any call outside a step Ayo scheduled.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any

from ayo_llamaindex.sub_question import ToolQueryEngine, tool_engine

log = logging.getLogger(__name__)

# engines a workflow's steps may build per call (``index.as_query_engine()`` inside the step): the
# lowered stand-ins of the most recent ones are kept, not every engine a long-lived workflow met
_KEPT_ENGINES = 32


class StepQueryEngines:
    """One optimized workflow's lowered stand-ins for the query engines its steps call."""

    def __init__(self, policy: str) -> None:
        self._policy = policy
        self._by_engine: OrderedDict[int, tuple[Any, ToolQueryEngine | None]] = OrderedDict()
        self.served: dict[str, int] = {}  # step -> queries Ayo's graph answered
        self.not_lowered: dict[str, str] = {}  # engine type -> why its queries run as stock

    def lowered(self, engine: Any) -> ToolQueryEngine | None:
        """The lowered stand-in of ``engine`` (None: its queries run as stock)."""
        from ayo_llamaindex.query_engine import OptimizedQueryEngine

        if isinstance(engine, OptimizedQueryEngine):
            return None  # already the user's optimized engine: its own aquery runs it
        hit = self._by_engine.get(id(engine))
        if hit is not None and hit[0] is engine:
            self._by_engine.move_to_end(id(engine))
            return hit[1]
        tool = self._capture(engine)
        self._by_engine[id(engine)] = (engine, tool)
        while len(self._by_engine) > _KEPT_ENGINES:
            self._by_engine.popitem(last=False)
        return tool

    def _capture(self, engine: Any) -> ToolQueryEngine | None:
        name = type(engine).__name__
        try:
            tool = tool_engine(engine, self._policy)
        except Exception as exc:  # noqa: BLE001 - an engine Ayo cannot capture runs as the user's object
            log.info("%s called in a workflow step runs as stock: capture failed (%s)", name, exc)
            self.not_lowered[name] = f"capture failed: {exc}"
            return None
        if tool.not_lowered_reason is not None:
            self.not_lowered[name] = tool.not_lowered_reason
            return None
        return tool

    def answer(self, step: str, tool: ToolQueryEngine, query: Any) -> Awaitable[Any]:
        self.served[step] = self.served.get(step, 0) + 1
        return tool.aquery_in_graph(query)

    def explain_lines(self) -> list[str]:
        """The query engines met in steps whose calls ran as stock, and why."""
        return [f"  {name} called in a step ran as stock: {why}" for name, why in sorted(self.not_lowered.items())]
