"""SubQuestionQueryEngine: stock vs optimized on the real vLLM server (fp32, eager, greedy).

Built as users build it: three indexes, one ``QueryEngineTool`` each, ``SubQuestionQueryEngine.from_defaults``
with an ``LLMQuestionGenerator`` (``llama-index-question-gen-openai`` is not installed, and the 135M model
has no function calling). The generator's LLM asks vLLM for structured outputs (a JSON schema of the
sub-question list), as a user with a small model would: without it the model rarely writes valid JSON.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload, LlamaDebugHandler
from llama_index.core.query_engine import RetrieverQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.tools import QueryEngineTool
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.sub_question import OptimizedSubQuestionQueryEngine, complete_objects, streaming_parts
from tests.ayo_llamaindex.li_helpers import TEXTS

pytestmark = pytest.mark.llm
MODEL = "SmolLM2-135M-Instruct"
TOOLS = [  # (name, description, indices into TEXTS)
    ("serialization_docs", "Python modules that turn objects into text or bytes (json, pickle)", (0, 5)),
    ("algorithm_docs", "Python modules for heaps and sorted lists (heapq, bisect)", (2, 3)),
    ("file_docs", "Python modules for filesystem paths and spreadsheet files (pathlib, csv)", (1, 4)),
]
QUESTIONS = [
    "How do I serialize objects to JSON and keep a list sorted?",
    "Compare the heap queue algorithm with keeping a sorted list.",
    "How do I read spreadsheet data and store Python objects as bytes?",
    "Which module handles filesystem paths, and which one implements a priority queue?",
    "How do json.dumps and pickle differ?",
]


def sub_question_schema(tool_names: list[str], max_items: int = 3) -> dict[str, Any]:
    """The JSON schema of LlamaIndex's sub-question list (``{"items": [{sub_question, tool_name}]}``)."""
    item = {"type": "object", "properties": {"sub_question": {"type": "string", "maxLength": 100},
                                             "tool_name": {"type": "string", "enum": tool_names}},
            "required": ["sub_question", "tool_name"]}
    return {"type": "object", "properties": {"items": {"type": "array", "items": item, "minItems": 1,
                                                       "maxItems": max_items}}, "required": ["items"]}


def make_llm(url: str, max_tokens: int, schema: dict[str, Any] | None = None) -> OpenAILike:
    extra = {"additional_kwargs": {"extra_body": {"structured_outputs": {"json": schema}}}} if schema else {}
    return OpenAILike(model=MODEL, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                      max_tokens=max_tokens, **extra)


@pytest.fixture(scope="module", name="debug")
def debug_fixture() -> LlamaDebugHandler:
    return LlamaDebugHandler(print_trace_on_end=False)


@pytest.fixture(scope="module", name="tools")
def tools_fixture(llm_url: str, embed_model: Any, debug: LlamaDebugHandler) -> list[QueryEngineTool]:
    llm, cm = make_llm(llm_url, 64), CallbackManager([debug])
    out = []
    for name, description, picks in TOOLS:
        index = VectorStoreIndex.from_documents([Document(text=TEXTS[i], id_=f"doc{i}") for i in picks],
                                                embed_model=embed_model)
        # the stock answer path of index.as_query_engine, with a callback manager that records SUB_QUESTION events
        qe = RetrieverQueryEngine.from_args(index.as_retriever(similarity_top_k=1), llm=llm, callback_manager=cm)
        out.append(QueryEngineTool.from_defaults(qe, name=name, description=description))
    return out


def sub_question_engine(url: str, tools: list[QueryEngineTool], *, structured: bool = True, gen_tokens: int = 192,
                        cls: type = SubQuestionQueryEngine, **kw: Any) -> Any:
    schema = sub_question_schema([t.metadata.name for t in tools]) if structured else None
    generator = LLMQuestionGenerator.from_defaults(llm=make_llm(url, gen_tokens, schema))
    return cls.from_defaults(query_engine_tools=tools, llm=make_llm(url, 64), question_gen=generator,
                             verbose=False, **kw)


def outcome(engine: Any, question: str, debug: LlamaDebugHandler, use_aquery: bool = False) -> tuple:
    """What a user sees: the answer, its source nodes (texts, scores), the SUB_QUESTION answer pairs; or the error."""
    debug.flush_event_logs()
    try:
        response = asyncio.run(engine.aquery(question)) if use_aquery else engine.query(question)
    except Exception as exc:  # noqa: BLE001 - compared with stock's
        return ("error", type(exc).__name__, str(exc))
    pairs = []
    for _, end in debug.get_event_pairs(CBEventType.SUB_QUESTION):
        p = end.payload[EventPayload.SUB_QUESTION]
        pairs.append((p.sub_q.sub_question, p.sub_q.tool_name, p.answer,
                      [(n.node.node_id, n.node.get_content()) for n in p.sources]))
    # scores to 5 places: a query embedded in a batch differs from one embedded alone by float32
    # rounding (~1e-7, ayo_core.engines.embedding); the ranking and texts are compared exactly
    sources = [(n.node.get_content(), None if n.score is None else round(n.score, 5)) for n in response.source_nodes]
    return ("ok", str(response), sources, sorted(pairs, key=repr))


def test_streaming_parts_finds_complete_objects() -> None:
    text = '```json\n{"items": [{"sub_question": "What is {x}?", "tool_name": "a"}, {"sub_question": "Wh'
    assert complete_objects(text) == [complete_objects(text)[0]]
    assert complete_objects(text)[0].sub_question == "What is {x}?"
    assert streaming_parts(text)[-1] is None  # the object still being written is held back
    done = text + 'y \\"b\\"?", "tool_name": "b"}]}\n```'
    assert [q.tool_name for q in complete_objects(done)] == ["a", "b"]
    assert complete_objects('{"items": [{"tool_name": "a"}]}') == []  # not a sub-question: nothing streams


def test_engine_touchpoints_verify_and_are_listed() -> None:
    from pathlib import Path

    from ayo_shims import llamaindex_engines
    from ayo_shims import touchpoints as tp

    readme = (Path(llamaindex_engines.__file__).parents[1] / "README.md").read_text()
    ours = [t for t in tp.touchpoints() if t.name.startswith(("llama_index.core.query_engine.sub_question",
                                                                "llama_index.core.query_engine.router",
                                                                "llama_index.core.question_gen",
                                                                "llama_index.core.selectors"))]
    assert len(ours) == 15  # SubQuestion, Router, ToolRetrieverRouter, RetrieverRouter, their generator and selectors
    for t in ours:
        t.verify()
        assert f"| `{t.name}` | {t.framework} | {t.checked} |" in readme


# two questions in the default suite (CI time), all five in make test-long
@pytest.mark.parametrize("questions", [pytest.param(QUESTIONS[:2], id="two"),
                                       pytest.param(QUESTIONS, id="five", marks=pytest.mark.long)])
def test_equivalence_and_pipelining(llm_url: str, tools: list[QueryEngineTool], debug: LlamaDebugHandler,
                                    questions: list[str]) -> None:
    stock = sub_question_engine(llm_url, tools)  # use_async=True: from_defaults' default, stock at its best
    fast = ayo_llamaindex.optimize(stock)
    assert isinstance(fast, OptimizedSubQuestionQueryEngine)
    completed, pipelined = 0, 0
    for question in questions:
        expected = outcome(stock, question, debug)
        got = outcome(fast, question, debug)
        assert got == expected, question
        if expected[0] != "ok":
            continue
        completed += 1
        spans = fast.last_trace.nodes
        gen = next(s for s in spans if s.node == "question_gen")
        answers = [s for s in spans if s.node == "sub_answer" and s.part is not None]
        if len(answers) >= 2:  # the first sub-answer started while the generator still wrote the list
            assert min(s.start for s in answers) < gen.end, question
            pipelined += 1
    assert completed >= max(1, len(questions) - 2) and pipelined >= 1, (completed, pipelined)
    assert fast.explain().fired("sub_question_pipelining")


def test_sync_default_use_async_false_and_aquery(llm_url: str, tools: list[QueryEngineTool],
                                                 debug: LlamaDebugHandler) -> None:
    stock = sub_question_engine(llm_url, tools, use_async=False)
    fast = ayo_llamaindex.optimize(stock)
    assert outcome(fast, QUESTIONS[0], debug) == outcome(stock, QUESTIONS[0], debug)
    assert outcome(fast, QUESTIONS[1], debug, use_aquery=True) == outcome(stock, QUESTIONS[1], debug, use_aquery=True)


def test_invalid_json_raises_stocks_error(llm_url: str, tools: list[QueryEngineTool], debug: LlamaDebugHandler) -> None:
    # no structured outputs and a budget too small for a JSON list: stock's parser raises
    stock = sub_question_engine(llm_url, tools, structured=False, gen_tokens=6)
    expected = outcome(stock, QUESTIONS[0], debug)
    assert expected[0] == "error" and "No valid JSON found in output" in expected[2]
    assert outcome(ayo_llamaindex.optimize(stock), QUESTIONS[0], debug) == expected


class LoggingSubQuestionEngine(SubQuestionQueryEngine):
    """A user's subclass that changes the control flow: Ayo must not assume stock's."""

    def _query(self, query_bundle: Any) -> Any:
        logging.getLogger("user").info("asking %s", query_bundle.query_str)
        return super()._query(query_bundle)


def test_user_subclass_runs_as_the_users_object(llm_url: str, tools: list[QueryEngineTool], debug: LlamaDebugHandler,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    stock = sub_question_engine(llm_url, tools, cls=LoggingSubQuestionEngine, use_async=False, gen_tokens=96)
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex.sub_question"):
        fast = ayo_llamaindex.optimize(stock)
    assert type(fast) is OptimizedQueryEngine
    assert "LoggingSubQuestionEngine overrides _query" in caplog.text
    assert [m.name for m in fast.explain().opaque] == ["query_engine"]  # one opaque node: the user's engine
    assert outcome(fast, QUESTIONS[4], debug) == outcome(stock, QUESTIONS[4], debug)


def test_a_sub_question_engine_awaited_in_a_workflow_step_runs_as_its_composed_graph(
        llm_url: str, tools: list[QueryEngineTool], debug: LlamaDebugHandler) -> None:
    from llama_index.core.workflow import StartEvent, StopEvent, Workflow, step

    class Ask(Workflow):
        engine = sub_question_engine(llm_url, tools)

        @step
        async def answer(self, ev: StartEvent) -> StopEvent:
            response = await self.engine.aquery(ev.question)
            return StopEvent(result=(str(response), [(n.node.get_content(), n.score) for n in response.source_nodes]))

    async def both(question: str) -> tuple[Any, Any, Any]:
        fast = ayo_llamaindex.optimize(Ask(timeout=300))
        return await Ask(timeout=300).run(question=question), await fast.run(question=question), fast

    for question in QUESTIONS[:1]:  # one question: the composed graph is the same for every question
        want, got, fast = asyncio.run(both(question))
        assert got == want, question
        stand_in = fast.query_engines.lowered(Ask.engine)
        assert isinstance(stand_in, OptimizedSubQuestionQueryEngine) and stand_in.last_trace is not None
        assert fast.query_engines.served == {"answer": 1}
