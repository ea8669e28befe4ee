"""``optimize(..., options=Options(...))``: the core's one set of knobs, old keywords still working."""

from __future__ import annotations

from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import QueryEngineTool
from llama_index.core.workflow import StartEvent, StopEvent, Workflow, step

import ayo_llamaindex
from ayo_core.pipeline import Options
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.runtime import LLM_INFLIGHT
from ayo_llamaindex.workflow import OptimizedWorkflow


class _Echo(CustomQueryEngine):
    def custom_query(self, query_str: str) -> str:
        return f"echo: {query_str}"


def test_options_give_the_policy_and_the_old_keyword_still_works() -> None:
    stock = _Echo()
    by_keyword = ayo_llamaindex.optimize(stock, policy="depth")
    by_options = ayo_llamaindex.optimize(stock, options=Options(policy="depth", timeout=30.0))
    assert isinstance(by_options, OptimizedQueryEngine) and by_options._policy == by_keyword._policy == "depth"
    assert by_options._options.timeout == 30.0
    assert str(by_options.query("hi")) == str(by_keyword.query("hi")) == str(stock.query("hi"))
    assert by_options.last_trace is not None and by_options.last_trace.status == "done"
    # optimized again with options: a new stand-in over the stock engine; same policy, no options: itself
    assert ayo_llamaindex.optimize(by_keyword, policy="depth") is by_keyword
    again = ayo_llamaindex.optimize(by_keyword, options=Options(policy="fifo"))
    assert again is not by_keyword and again.stock is stock and again._policy == "fifo"


# -- the options reach the engines an optimized object runs inside it --------------------------------

def _llm() -> Any:
    from llama_index.llms.openai_like import OpenAILike

    # capture only: nothing is sent (port 9, discard, is never asked)
    return OpenAILike(model="fake", api_base="http://127.0.0.1:9/v1", api_key="unused", is_chat_model=True)


def _echo_tools() -> list[QueryEngineTool]:
    return [QueryEngineTool.from_defaults(_Echo(), name=name, description=f"answers about {name}")
            for name in ("json", "heapq")]


def test_a_composed_engines_inner_engines_take_its_options() -> None:
    options = Options(policy="depth", timeout=9.0, llm_inflight=7, passes=False)
    llm = _llm()
    router = RouterQueryEngine(selector=LLMSingleSelector.from_defaults(llm=llm), query_engine_tools=_echo_tools(),
                               llm=llm)
    sub_question = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=_echo_tools(), llm=llm, question_gen=LLMQuestionGenerator.from_defaults(llm=llm))
    routed = ayo_llamaindex.optimize(router, options=options).plan.engines
    asked = list(ayo_llamaindex.optimize(sub_question, options=options).plan.tools.values())
    for inner in (*routed, *asked):
        assert inner._options is options, type(inner).__name__
    # no options: the inner engines run with the policy alone, as before
    assert ayo_llamaindex.optimize(router, policy="fifo").plan.engines[0]._options == Options(policy="fifo")


class _Ask(Workflow):
    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=ev.question)


def test_a_workflow_takes_the_in_flight_limit_and_its_steps_engines_all_options() -> None:
    options = Options(policy="depth", timeout=9.0, llm_inflight=7)
    fast = ayo_llamaindex.optimize(_Ask(), options=options)
    assert isinstance(fast, OptimizedWorkflow) and fast._policy == "depth" and fast._llm_inflight == 7
    index = VectorStoreIndex.from_documents([Document(text="json.dumps writes JSON.")],
                                            embed_model=MockEmbedding(embed_dim=8))
    assert fast.query_engines.lowered(index.as_query_engine(llm=_llm()))._options is options
    assert fast.query_engines.lowered_retriever(index.as_retriever())._options is options
    assert ayo_llamaindex.optimize(fast, policy="depth") is fast  # same policy, no options: itself
    again = ayo_llamaindex.optimize(fast, options=Options(policy="depth"))
    assert again is not fast and again.stock is fast.stock and again._llm_inflight == LLM_INFLIGHT
