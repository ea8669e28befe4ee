"""RouterQueryEngine: stock vs optimized on the real vLLM server (fp32, eager, greedy).

Built as users build it: ``RouterQueryEngine.from_defaults(query_engine_tools=[...], llm=..., selector=...)``
over three indexes. The selector's LLM asks vLLM for structured outputs (the selection list's JSON schema):
with the 135M model and no schema the selection is rarely valid JSON.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from llama_index.core.query_engine import RetrieverQueryEngine, RouterQueryEngine
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.selectors import LLMMultiSelector, LLMSingleSelector
from llama_index.core.tools import QueryEngineTool, RetrieverTool

import ayo_llamaindex
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.router import OptimizedRouterQueryEngine
from tests.ayo_llamaindex.test_sub_question import QUESTIONS, debug_fixture, make_llm, tools_fixture  # noqa: F401 - fixtures

pytestmark = pytest.mark.llm


def selection_schema(n_choices: int, max_items: int) -> dict[str, Any]:
    """The JSON schema of LlamaIndex's selection list (``[{"choice": int, "reason": str}]``)."""
    item = {"type": "object", "properties": {"choice": {"type": "integer", "minimum": 1, "maximum": n_choices},
                                             "reason": {"type": "string", "maxLength": 60}},
            "required": ["choice", "reason"]}
    return {"type": "array", "items": item, "minItems": 1, "maxItems": max_items}


def router(url: str, tools: list[QueryEngineTool], *, multi: bool = False, structured: bool = True,
           select_tokens: int = 128, cls: type = RouterQueryEngine) -> Any:
    schema = selection_schema(len(tools), 2 if multi else 1) if structured else None
    select_llm = make_llm(url, select_tokens, schema)
    selector = (LLMMultiSelector.from_defaults(llm=select_llm, max_outputs=2) if multi
                else LLMSingleSelector.from_defaults(llm=select_llm))
    return cls.from_defaults(query_engine_tools=tools, llm=make_llm(url, 64), selector=selector)


def outcome(engine: Any, question: str, use_aquery: bool = False) -> tuple:
    try:
        response = asyncio.run(engine.aquery(question)) if use_aquery else engine.query(question)
    except Exception as exc:  # noqa: BLE001 - compared with stock's
        return ("error", type(exc).__name__, str(exc))
    sources = [(n.node.node_id, n.node.get_content(), n.score) for n in response.source_nodes]
    return ("ok", str(response), sources, response.metadata["selector_result"])


# three questions in the default suite (CI time), all five in make test-long
@pytest.mark.parametrize("questions", [pytest.param(QUESTIONS[:3], id="three"),
                                       pytest.param(QUESTIONS, id="five", marks=pytest.mark.long)])
def test_single_selector(llm_url: str, tools: list[QueryEngineTool], questions: list[str]) -> None:
    stock = router(llm_url, tools)
    fast = ayo_llamaindex.optimize(stock)
    assert isinstance(fast, OptimizedRouterQueryEngine)
    completed = 0
    for question in questions:
        expected = outcome(stock, question)
        assert outcome(fast, question) == expected, question
        completed += expected[0] == "ok"
    assert completed >= len(questions) - 2
    assert not fast.explain().opaque


def test_multi_selector_runs_chosen_engines_concurrently(llm_url: str, tools: list[QueryEngineTool]) -> None:
    stock = router(llm_url, tools, multi=True)
    fast = ayo_llamaindex.optimize(stock)
    for question, use_aquery in ((QUESTIONS[0], False), (QUESTIONS[2], True)):
        assert outcome(fast, question, use_aquery) == outcome(stock, question, use_aquery), question


def test_invalid_selection_raises_stocks_error(llm_url: str, tools: list[QueryEngineTool]) -> None:
    stock = router(llm_url, tools, structured=False, select_tokens=4)
    expected = outcome(stock, QUESTIONS[1])
    assert expected[0] == "error"
    assert outcome(ayo_llamaindex.optimize(stock), QUESTIONS[1]) == expected


class AuditedRouter(RouterQueryEngine):
    """A user's subclass that changes the control flow."""

    def _query(self, query_bundle: Any) -> Any:
        logging.getLogger("user").info("routing %s", query_bundle.query_str)
        return super()._query(query_bundle)


def test_user_subclass_runs_as_the_users_object(llm_url: str, tools: list[QueryEngineTool],
                                                 caplog: pytest.LogCaptureFixture) -> None:
    stock = router(llm_url, tools, cls=AuditedRouter)
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex.sub_question"):
        fast = ayo_llamaindex.optimize(stock)
    assert type(fast) is OptimizedQueryEngine and "AuditedRouter overrides _query" in caplog.text
    assert outcome(fast, QUESTIONS[3]) == outcome(stock, QUESTIONS[3])


def test_pydantic_selector_stays_opaque_with_a_reason(llm_url: str, tools: list[QueryEngineTool]) -> None:
    from llama_index.core.selectors import PydanticSingleSelector
    from llama_index.llms.openai_like import OpenAILike

    # what a user with a tool-calling server writes (the plan is all this test reads: no query runs)
    calling = OpenAILike(model="SmolLM2-135M-Instruct", api_base=llm_url, api_key="none", is_chat_model=True,
                         is_function_calling_model=True, temperature=0.0, max_tokens=64)
    stock = RouterQueryEngine.from_defaults(query_engine_tools=tools, llm=make_llm(llm_url, 64),
                                            selector=PydanticSingleSelector.from_defaults(llm=calling))
    fast = ayo_llamaindex.optimize(stock)
    assert isinstance(fast, OptimizedRouterQueryEngine)
    reasons = dict((m.name, m.reason) for m in fast.explain().opaque)
    assert "tool calling" in reasons["selector"]


def test_pydantic_selector_on_a_tool_calling_server(tools: list[QueryEngineTool], tools_llm_url: str) -> None:
    """The selector stays the user's object (a function call through the server's tool parser); the chosen
    engine is still optimized: same answer, same selection, same error when the 135M model writes no call."""
    from llama_index.core.selectors import PydanticSingleSelector
    from llama_index.llms.openai_like import OpenAILike

    url = tools_llm_url
    calling = OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                         is_function_calling_model=True, temperature=0.0, max_tokens=128)
    stock = RouterQueryEngine.from_defaults(query_engine_tools=tools, llm=make_llm(url, 64),
                                            selector=PydanticSingleSelector.from_defaults(llm=calling))
    fast = ayo_llamaindex.optimize(stock)
    assert outcome(fast, QUESTIONS[0]) == outcome(stock, QUESTIONS[0])


def test_router_retriever_multi_selection_matches_stock(llm_url: str, tools: list[QueryEngineTool]) -> None:
    """A ``RouterRetriever`` over the tools' retrievers in a query engine (64-token answers): the selector's
    structured decode through Ayo's engine, the chosen retrievers at once; answers and sources as stock's."""
    def engine() -> RetrieverQueryEngine:
        retriever_tools = [RetrieverTool.from_defaults(t.query_engine.retriever, name=t.metadata.name,
                                                       description=t.metadata.description) for t in tools]
        selector = LLMMultiSelector.from_defaults(llm=make_llm(llm_url, 128, selection_schema(len(tools), 2)),
                                                  max_outputs=2)
        router = RouterRetriever(selector=selector, retriever_tools=retriever_tools, llm=make_llm(llm_url, 64))
        return RetrieverQueryEngine.from_args(router, llm=make_llm(llm_url, 64))

    def answer(qe: Any, question: str, use_aquery: bool) -> tuple:
        response = asyncio.run(qe.aquery(question)) if use_aquery else qe.query(question)
        return str(response), [(n.node.node_id, round(n.score, 5)) for n in response.source_nodes]

    stock, fast = engine(), ayo_llamaindex.optimize(engine())
    assert "Selection+Retrieval" in str(fast.explain()) and not fast.explain().opaque
    for question, use_aquery in ((QUESTIONS[0], False), (QUESTIONS[2], True)):
        want = answer(stock, question, use_aquery)
        assert len(want[0].split()) > 20  # a 64-token answer, not a trivial match
        assert answer(fast, question, use_aquery) == want, question
