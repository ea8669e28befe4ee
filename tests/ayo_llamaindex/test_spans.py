"""The instrumentation dispatcher's spans of an optimized query engine against stock's: the same span
tree (each span named ``{Class}.{method}`` as stock's decorator names it, under the same parent) with
the same instrumentation events in each span, under ``query()`` and ``aquery()``.

Tracing integrations (OpenTelemetry, Phoenix, Langfuse) build their traces from these spans. Siblings
are compared as a multiset: Ayo runs independent calls at once, so their order is timing (stock's
``aquery`` runs them at once too). Offline: the tests' fake OpenAI server on loopback.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import QUESTIONS, TEXTS
from tests.ayo_llamaindex.test_events_retries_lifecycle import FakeOpenAIServer, make_engine, make_llm

SPANS: dict[str, tuple[str, str | None]] = {}  # span id -> (Class.method, parent id)
EVENTS: list[Any] = []


class SpanTree(BaseSpanHandler[SimpleSpan]):
    @classmethod
    def class_name(cls) -> str:
        return "AyoTestSpanTree"

    def new_span(self, id_: str, bound_args: Any, instance: Any = None, parent_span_id: str | None = None,
                 tags: Any = None, **kwargs: Any) -> SimpleSpan:
        SPANS[id_] = (id_.rsplit("-", 5)[0], parent_span_id)
        return SimpleSpan(id_=id_, parent_id=parent_span_id)

    def prepare_to_exit_span(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None,
                             **kwargs: Any) -> None:
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: Any, instance: Any = None, err: Any = None,
                             **kwargs: Any) -> None:
        return None


class EventLog(BaseEventHandler):
    @classmethod
    def class_name(cls) -> str:
        return "AyoTestEventLog"

    def handle(self, event: Any, **kwargs: Any) -> None:
        EVENTS.append(event)


@pytest.fixture(scope="module")
def server() -> Any:
    srv = FakeOpenAIServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def traced(server: Any, embed_model: Any) -> Any:
    """An index, with span and event recorders on the root dispatcher (and an LLM in Settings for the
    modes that build one from it)."""
    dispatcher, old_llm = get_dispatcher(), Settings._llm  # noqa: SLF001 - restored after
    spans, log = SpanTree(), EventLog()
    dispatcher.add_span_handler(spans)
    dispatcher.add_event_handler(log)
    Settings.llm = make_llm(server.url)
    yield VectorStoreIndex.from_documents([Document(text=t, id_=f"d{i}") for i, t in enumerate(TEXTS)],
                                          embed_model=embed_model)
    dispatcher.span_handlers.remove(spans)
    dispatcher.event_handlers.remove(log)
    Settings._llm = old_llm  # noqa: SLF001


def span_tree(run: Any) -> Counter:
    """Each span as its path of names from the root with the events sent inside it (a multiset)."""
    SPANS.clear()
    EVENTS.clear()
    run()
    in_span: dict[str | None, list[str]] = {}
    for event in EVENTS:
        in_span.setdefault(event.span_id, []).append(type(event).__name__)

    def path(span_id: str | None) -> str:
        names = []
        while span_id in SPANS:
            name, span_id = SPANS[span_id]
            names.append(name)
        return "/".join(reversed(names))

    tree = Counter(f"{path(s)} {sorted(in_span.get(s, []))}" for s in SPANS)
    tree.update(f"(no span) {name}" for s, names in in_span.items() if s not in SPANS for name in names)
    return tree


KINDS = ["compact", "refine", "tree_summarize", "simple_summarize", "accumulate", "generation", "no_text",
         "rerank", "fusion"]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_span_tree_is_stocks(server: Any, traced: Any, kind: str, use_async: bool) -> None:
    def run(engine: Any) -> Any:
        return lambda: asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])

    want = span_tree(run(make_engine(kind, traced, make_llm(server.url))))
    got = span_tree(run(ayo_llamaindex.optimize(make_engine(kind, traced, make_llm(server.url)))))
    assert got == want
    top = "RetrieverQueryEngine.aquery" if use_async else "RetrieverQueryEngine.query"
    assert f"{top} ['QueryEndEvent', 'QueryStartEvent']" in want  # the recorders saw stock's spans at all


def test_a_failing_call_drops_the_spans_as_stock(traced: Any) -> None:
    """A server error: every span from the LLM call up to the query is dropped (with a SpanDropEvent)."""
    import openai

    failing_server = FakeOpenAIServer(fail_first=(400, 400))  # one refused call for each side

    def failing(engine: Any) -> Any:
        def run() -> None:
            with pytest.raises(openai.BadRequestError):
                engine.query(QUESTIONS[0])
        return run

    def build() -> Any:
        return make_engine("compact", traced, make_llm(failing_server.url, max_retries=0))

    try:
        want = span_tree(failing(build()))
        assert any("SpanDropEvent" in key for key in want)
        assert span_tree(failing(ayo_llamaindex.optimize(build()))) == want
    finally:
        failing_server.close()
