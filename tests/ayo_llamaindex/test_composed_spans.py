"""The dispatcher's spans of optimized composed engines against stock's (``test_spans.py``'s check):
TransformQueryEngine with HyDE under ``query()`` and ``aquery()`` (the transform's ``_run`` span with its
sync predict on both paths, then the inner engine's own ``query``/``_query`` spans around its steps).
CitationQueryEngine (its citation chunks); a Workflow whose step awaits a query engine and a model; RouterQueryEngine (single and multi selection) and SubQuestionQueryEngine: the selector's / question
generator's decode, then each chosen engine's own spans. Offline: the fake OpenAI server (it answers a
selector prompt and a sub-question prompt with the JSON their parsers read)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
from llama_index.core.indices.vector_store import VectorIndexRetriever
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import (
    CitationQueryEngine,
    RouterQueryEngine,
    SubQuestionQueryEngine,
    TransformQueryEngine,
)
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.selectors import LLMMultiSelector, LLMSingleSelector
from llama_index.core.tools import QueryEngineTool
from llama_index.core.workflow import Event, StartEvent, StopEvent, Workflow, step

import ayo_llamaindex
from tests.adapters.li_case import EventRecorder
from tests.ayo_langchain.test_event_stream import _UUID
from tests.ayo_llamaindex.li_helpers import QUESTIONS
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures


def hyde(index: Any, url: str) -> Any:
    llm = make_llm(url)
    return TransformQueryEngine(index.as_query_engine(llm=llm, similarity_top_k=2), HyDEQueryTransform(llm=llm))


def tools(index: Any, url: str) -> list[QueryEngineTool]:
    return [QueryEngineTool.from_defaults(index.as_query_engine(llm=make_llm(url), similarity_top_k=2), name=name,
                                          description=f"Python docs about {topic}")
            for name, topic in (("serialization", "JSON and pickle"), ("containers", "sorted lists and heaps"))]


def router(index: Any, url: str, multi: bool = False) -> Any:
    selector = (LLMMultiSelector if multi else LLMSingleSelector).from_defaults(llm=make_llm(url))
    return RouterQueryEngine(selector=selector, query_engine_tools=tools(index, url), llm=make_llm(url))


def sub_question(index: Any, url: str) -> Any:
    return SubQuestionQueryEngine.from_defaults(query_engine_tools=tools(index, url), llm=make_llm(url),
                                                question_gen=LLMQuestionGenerator.from_defaults(llm=make_llm(url)))


def citation(index: Any, url: str) -> Any:
    return CitationQueryEngine.from_args(index, llm=make_llm(url), similarity_top_k=2, citation_chunk_size=64)


BUILDERS = {"hyde": hyde, "citation": citation, "router": router, "router_multi": lambda index, url: router(index, url, multi=True),
            "sub_question": sub_question}


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_composed_span_tree_is_stocks(server: Any, traced: Any, kind: str, use_async: bool) -> None:  # noqa: F811
    def run(engine: Any) -> Any:
        return lambda: asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])

    want = span_tree(run(BUILDERS[kind](traced, server.url)))
    fast = ayo_llamaindex.optimize(BUILDERS[kind](traced, server.url))
    got = span_tree(run(fast))
    assert fast.explain().opaque == [] or kind == "hyde", fast.explain().opaque  # lowered, not run as stock
    assert got == want


class Question(Event):
    question: str


class AskThenRewrite(Workflow):
    """A step awaiting a query engine, then its model on the answer: the workflow's run and step spans hold
    the engine's and the model's, as stock's do."""

    def __init__(self, index: Any, url: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.engine, self.llm = index.as_query_engine(llm=make_llm(url), similarity_top_k=2), make_llm(url)

    @step
    async def split(self, ev: StartEvent) -> Question:
        return Question(question=ev.question)

    @step
    async def answer(self, ev: Question) -> StopEvent:
        response = await self.engine.aquery(ev.question)
        return StopEvent(result=str(await self.llm.acomplete(f"Rewrite briefly: {response}")))


def test_workflow_span_tree_is_stocks(server: Any, traced: Any) -> None:  # noqa: F811
    def run(workflow: Any) -> Any:
        async def go() -> Any:
            return await workflow.run(question=QUESTIONS[0])

        return lambda: asyncio.run(go())

    want = span_tree(run(AskThenRewrite(traced, server.url, timeout=60)))
    assert any(path.startswith("AskThenRewrite.run/AskThenRewrite.answer/RetrieverQueryEngine.aquery") for path in want)
    assert span_tree(run(ayo_llamaindex.optimize(AskThenRewrite(traced, server.url, timeout=60)))) == want


@pytest.mark.parametrize("use_async", [False, True])
def test_citation_callback_events_nest_as_stocks(server: Any, traced: Any, use_async: bool) -> None:  # noqa: F811
    """The citation engine's own ``RETRIEVE`` event holds the retriever's events (and their query
    embedding's) and the citation cut's ``CHUNKING`` events, as stock's ``_query`` opens it around them,
    though Ayo runs them in other graph nodes."""
    recorder = EventRecorder()

    def observed(engine: Any) -> tuple[list[Any], list[tuple]]:
        recorder.reset()
        asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])
        # citation nodes get new ids per query (stock's own uuid4s)
        return recorder.paths(), sorted(_UUID.sub("<id>", repr(p)) for p in recorder.payloads)

    def build() -> Any:
        callbacks = CallbackManager([recorder])
        retriever = VectorIndexRetriever(traced, similarity_top_k=2, callback_manager=callbacks)
        splitter = SentenceSplitter(chunk_size=64, chunk_overlap=20, callback_manager=callbacks)
        return CitationQueryEngine(retriever, llm=make_llm(server.url), text_splitter=splitter,
                                   callback_manager=callbacks)

    want = observed(build())
    assert {("query", "retrieve", "retrieve"), ("query", "retrieve", "chunking")} <= set(want[0]), want[0]
    assert observed(ayo_llamaindex.optimize(build())) == want
