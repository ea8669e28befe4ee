"""The third case: a MiniRAG pipeline (``tests/adapters/minirag``), the framework and adapter written for
the suite: the user's search over the same documents, MiniRAG's prompt, a chat model on the fake server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.adapters.common import DOCS, Event, Knobs, event_paths
from tests.adapters.minirag import ayo_minirag
from tests.adapters.minirag.framework import Events, Generate, Pipeline, Retrieve
from tests.ayo_langchain.lc_helpers import MODEL


class EventRecorder:
    """A MiniRAG handler: every run (name, parent), how it ended, and what it was given."""

    def __init__(self) -> None:
        self.runs: dict[str, tuple[str, str | None]] = {}
        self.order: list[str] = []
        self.outcome: dict[str, str] = {}
        self.payloads: list[tuple[str, str, str]] = []

    def on_start(self, run_id: str, parent_id: str | None, name: str, inputs: Any) -> None:
        self.runs[run_id] = (name, parent_id)
        self.order.append(run_id)
        self.payloads.append((name, "start", repr(inputs)))

    def on_end(self, run_id: str, name: str, output: Any) -> None:
        self.outcome[run_id] = "end"
        self.payloads.append((name, "end", repr(output)))

    def on_error(self, run_id: str, name: str, error: BaseException) -> None:
        self.outcome[run_id] = "error"
        self.payloads.append((name, "error", repr(error)))

    def paths(self) -> list[Event]:
        labelled = {i: (name if self.outcome.get(i) == "end" else f"{name} ({self.outcome.get(i, 'unfinished')})", p)
                    for i, (name, p) in self.runs.items()}
        return event_paths(labelled, self.order)


class UserSearch:
    """The user's search: the two documents sharing the most words with the question (slow or failing on ``knobs``)."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs

    def _rank(self, question: str) -> list[str]:
        words = set(question.lower().split())
        return [t for _, t in sorted(DOCS, key=lambda d: (-len(words & set(d[1].lower().split())), d[0]))[:2]]

    def search(self, question: str) -> list[str]:
        time.sleep(self.knobs.delay)
        if self.knobs.fail:
            raise self.knobs.error(question)
        return self._rank(question)

    async def asearch(self, question: str) -> list[str]:
        await asyncio.sleep(self.knobs.delay)
        if self.knobs.fail:
            raise self.knobs.error(question)
        return self._rank(question)


class MiniRAGCase:
    name = "minirag"
    recognized = ("retrieve", "prompt", "generate", "LLMCall")
    unreported_events: frozenset[str] = frozenset()
    known_differences: dict[str, str] = {}

    def __init__(self, url: str, knobs: Knobs) -> None:
        self.url, self.knobs = url, knobs
        self.recorder = EventRecorder()

    def build_stock(self, streaming: bool = False) -> Any:
        search = UserSearch(self.knobs)
        return Pipeline(Retrieve(search.search, search.asearch), Generate(MODEL, self.url),
                        events=Events([self.recorder]))

    def optimize(self, stock: Any) -> Any:
        return ayo_minirag.optimize(stock)

    def call(self, obj: Any, question: str) -> str:
        return obj.run(question)

    async def acall(self, obj: Any, question: str) -> str:
        return await obj.arun(question)

    def stream(self, obj: Any, question: str) -> list[str]:
        return list(obj.stream(question))

    async def astream(self, obj: Any, question: str) -> list[str]:
        return [chunk async for chunk in obj.astream(question)]

    def _recorded(self, obj: Any, question: str) -> EventRecorder:
        self.recorder.__init__()
        obj.run(question)
        return self.recorder

    def events(self, obj: Any, question: str) -> list[Event]:
        return self._recorded(obj, question).paths()

    def payloads(self, obj: Any, question: str) -> list[tuple]:
        return sorted(self._recorded(obj, question).payloads)

    def bad_input(self, obj: Any) -> Any:
        return obj.run(None)  # the user's search lowers the question

    def explain(self, obj: Any) -> str:
        return str(obj.explain())

    def trace(self, obj: Any) -> Any:
        return obj.last_trace
