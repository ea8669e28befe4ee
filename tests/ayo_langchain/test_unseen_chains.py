"""Stock vs optimized on pipelines written the way users write them (found by a sweep of
user-style chains): whole-chain opaque objects (agents, graphs, message history), message
metadata, call-time kwargs, stream-only errors, the Runnable introspection surface.

Offline tests use the fake OpenAI server; ``@pytest.mark.llm`` ones the real vLLM server.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from operator import itemgetter
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import FakeListChatModel, FakeListLLM
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder, PromptTemplate
from langchain_core.runnables import ConfigurableField, RunnableLambda
from langchain_core.runnables.base import coerce_to_runnable
from lc_helpers import MODEL, concat, fake_chat, fake_completion_llm, plain

import ayo_langchain

TOPICS = [{"topic": "json"}, {"topic": "regex"}]


class ChainStarts(BaseCallbackHandler):
    """Counts chain runs by name (an extra run of Ayo's own would show up here)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.names.append(kwargs.get("name") or "")


def message_view(m: BaseMessage) -> dict[str, Any]:
    """Everything of a message that is deterministic run to run (ids and cache hits are not)."""
    meta = {k: v for k, v in m.response_metadata.items() if k not in ("id", "token_usage", "created")}
    usage = m.response_metadata.get("token_usage") or {}
    return {"type": m.type, "content": m.content, "meta": meta, "additional_kwargs": m.additional_kwargs,
            "usage_keys": sorted(usage), "tokens": (usage.get("prompt_tokens"), usage.get("completion_tokens"))}


# ---- whole-chain opaque objects run as the user's object -----------------------------------
def _graph() -> Any:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        topic: str
        shout: str
        length: int

    g = StateGraph(State)
    g.add_node("shout", lambda s: {"shout": s["topic"].upper()})
    g.add_node("measure", lambda s: {"length": len(s["shout"])})
    g.add_edge(START, "shout")
    g.add_edge("shout", "measure")
    g.add_edge("measure", END)
    return g.compile()


def test_langgraph_graph_streams_its_updates_as_stock() -> None:
    stock, fast = _graph(), ayo_langchain.optimize(_graph())
    for x in TOPICS:
        assert fast.invoke(x) == stock.invoke(x)
        assert list(fast.stream(x)) == list(stock.stream(x))  # per-node updates, not one final state
        assert list(fast.stream(x, stream_mode="values")) == list(stock.stream(x, stream_mode="values"))
    assert "whole chain is one opaque node" in fast.explain()


def _agent() -> Any:
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.tools import Tool

    prompt = PromptTemplate.from_template("Tools: {tools} ({tool_names})\nQuestion: {input}\n{agent_scratchpad}")
    llm = FakeListLLM(responses=["Thought: add\nAction: calc\nAction Input: 2+2", "Final Answer: 4"])
    tools = [Tool(name="calc", func=lambda e: "4", description="arithmetic")]
    return AgentExecutor(agent=create_react_agent(llm, tools, prompt), tools=tools, max_iterations=3)


def test_agent_executor_streams_its_steps_with_one_run() -> None:
    x = {"input": "what is 2+2?"}
    stock_chunks, fast_chunks = list(_agent().stream(x)), list(ayo_langchain.optimize(_agent()).stream(x))
    assert [sorted(c) for c in fast_chunks] == [sorted(c) for c in stock_chunks]  # actions, steps, output
    assert fast_chunks[-1]["output"] == stock_chunks[-1]["output"] == "4"
    stock_runs, fast_runs = ChainStarts(), ChainStarts()
    _agent().invoke(x, {"callbacks": [stock_runs]})
    ayo_langchain.optimize(_agent()).invoke(x, {"callbacks": [fast_runs]})
    assert fast_runs.names == stock_runs.names


def _with_history() -> Any:
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.runnables.history import RunnableWithMessageHistory

    store: dict[str, Any] = {}
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    model = FakeListChatModel(responses=["hello there", "your name is Bob"])
    return RunnableWithMessageHistory(prompt | model, lambda sid: store.setdefault(sid, InMemoryChatMessageHistory()),
                                      input_messages_key="question", history_messages_key="history")


def test_message_history_streams_chunks_as_stock() -> None:
    stock, fast = _with_history(), ayo_langchain.optimize(_with_history())
    cfg = {"configurable": {"session_id": "s"}}
    for q in ("I am Bob", "Who am I?"):
        want = list(stock.stream({"question": q}, cfg))
        got = list(fast.stream({"question": q}, cfg))
        assert [type(c) for c in got] == [type(c) for c in want]  # chunks, not one finished message
        assert plain(concat(got)) == plain(concat(want))
    with pytest.raises(ValueError) as stock_err:
        stock.invoke({"question": "x"})
    with pytest.raises(ValueError) as fast_err:
        fast.invoke({"question": "x"})
    assert str(fast_err.value) == str(stock_err.value)


def test_dict_and_function_are_coerced_as_lcel_does() -> None:
    for obj in ({"t": itemgetter("topic"), "n": lambda x: len(x["topic"])}, lambda x: x["topic"].upper()):
        stock, fast = coerce_to_runnable(obj), ayo_langchain.optimize(obj)
        assert [fast.invoke(x) for x in TOPICS] == [stock.invoke(x) for x in TOPICS]
        assert fast.batch(TOPICS, {"max_concurrency": 1}) == stock.batch(TOPICS)
        assert concat(list(fast.stream(TOPICS[0]))) == concat(list(stock.stream(TOPICS[0])))


# ---- models: the stock message, the stock request ------------------------------------------
def test_chat_message_is_the_sdk_parsed_response(fake_server: Any) -> None:
    chain = ChatPromptTemplate.from_template("Say a fact about {topic}.") | fake_chat(fake_server)
    fast = ayo_langchain.optimize(chain)
    for x in TOPICS:
        want, got = chain.invoke(x), fast.invoke(x)
        # the SDK's ChatCompletion adds e.g. additional_kwargs["refusal"]; a plain dict would not
        assert message_view(got) == message_view(want)
        assert got.usage_metadata == want.usage_metadata


def test_call_time_kwargs_reach_the_model(fake_server: Any) -> None:
    llm = fake_chat(fake_server)
    want = llm.invoke("count one two three", stop=["two"])
    fast = ayo_langchain.optimize(llm)
    got = fast.invoke("count one two three", stop=["two"])
    assert got.content == want.content
    assert fake_server.completions()[-1]["stop"] == ["two"]  # the kwarg made it into the request


def test_completion_stream_has_no_empty_opening_chunk(fake_server: Any) -> None:
    chain = PromptTemplate.from_template("Tell me about {topic}:") | fake_completion_llm(fake_server) | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    for x in TOPICS:
        assert list(fast.stream(x)) == list(chain.stream(x))


REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST_ID", default="unset")


def test_steps_after_the_model_see_the_callers_context_under_every_call(fake_server: Any) -> None:
    """A request id the caller set reaches the steps after the streaming model (sync stream ran them in
    a worker thread without the caller's context variables; found by sweep 4)."""
    seen: list[str] = []

    def after(text: str) -> str:
        seen.append(REQUEST_ID.get())
        return text

    chain = ChatPromptTemplate.from_template("About {topic}") | fake_chat(fake_server) | StrOutputParser() | after
    fast = ayo_langchain.optimize(chain)
    token = REQUEST_ID.set("req-42")
    try:
        for call in (lambda r: r.invoke(TOPICS[0]), lambda r: list(r.stream(TOPICS[0])), lambda r: r.batch(TOPICS)):
            seen.clear()
            want = call(chain), list(seen)
            seen.clear()
            assert (call(fast), list(seen)) == want
            assert want[1] and set(want[1]) == {"req-42"}
    finally:
        REQUEST_ID.reset(token)


class Threads(BaseCallbackHandler):
    """Which thread each sync handler event ran on (a Streamlit handler writes nothing from another)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bool]] = []

    def _saw(self, what: str) -> None:
        self.events.append((what, threading.get_ident() == CALLER))

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self._saw(f"chain_start:{kwargs.get('name')}")

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self._saw("chat_model_start")

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self._saw("token")

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self._saw("chain_end")


CALLER = threading.get_ident()


def test_sync_handlers_run_on_the_callers_thread_under_invoke_and_stream(fake_server: Any) -> None:
    """As stock, under sync invoke/stream a sync handler sees the chain's and the model's events (its
    tokens: a Streamlit handler writes them) on the caller's thread (sweep 4: Ayo's nodes report through
    async managers, which ran them in a pool thread). A sync step Ayo runs in a worker thread (a prompt,
    a parser) reports its own run there, as docs/observability.md says."""
    global CALLER
    CALLER = threading.get_ident()
    chain = ChatPromptTemplate.from_template("About {topic}") | fake_chat(fake_server) | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    for call in (lambda r, h: r.invoke(TOPICS[0], {"callbacks": [h]}),
                 lambda r, h: list(r.stream(TOPICS[0], {"callbacks": [h]}))):
        want, got = Threads(), Threads()
        assert call(fast, got) == call(chain, want)
        assert [what for what, _ in got.events] == [what for what, _ in want.events]
        assert want.events and all(on_caller for _, on_caller in want.events)
        steps = ("chain_start:ChatPromptTemplate", "chain_start:StrOutputParser")
        model_and_chain = [on_caller for i, (what, on_caller) in enumerate(got.events)
                           if what not in steps and not (what == "chain_end" and 0 < i < len(got.events) - 1)]
        assert model_and_chain and all(model_and_chain)


async def _only_async(x: dict) -> dict:
    return {"topic": x["topic"].upper()}


def test_async_only_lambda_under_sync_stream_raises_the_stock_error(fake_server: Any) -> None:
    chain = (RunnableLambda(_only_async) | ChatPromptTemplate.from_template("About {topic}")
             | fake_chat(fake_server) | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    calls = (lambda r: r.invoke(TOPICS[0]), lambda r: list(r.stream(TOPICS[0])))
    for call in calls:
        with pytest.raises(TypeError) as stock_err:
            call(chain)
        with pytest.raises(TypeError) as fast_err:
            call(fast)
        assert str(fast_err.value) == str(stock_err.value)
    assert asyncio.run(fast.ainvoke(TOPICS[0])) == asyncio.run(chain.ainvoke(TOPICS[0]))


# ---- the Runnable surface ------------------------------------------------------------------
def test_config_specs_graph_and_configurable_invoke(fake_server: Any) -> None:
    llm = fake_chat(fake_server).configurable_fields(max_tokens=ConfigurableField(id="max_tokens"))
    chain = ChatPromptTemplate.from_template("About {topic}") | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    assert fast.config_specs == chain.config_specs != []
    assert fast.get_graph().draw_mermaid() == chain.get_graph().draw_mermaid()
    cfg = {"configurable": {"max_tokens": 3}}
    assert fast.invoke(TOPICS[0], cfg) == chain.invoke(TOPICS[0], cfg)
    assert fast.with_config(cfg).invoke(TOPICS[1]) == chain.with_config(cfg).invoke(TOPICS[1])


# ---- the real server -----------------------------------------------------------------------
def _real_chat(url: str, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=8, **kw)


@pytest.mark.llm
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kw", [{}, {"streaming": True}, {"stream_usage": True}], ids=["plain", "streaming", "usage"])
def test_real_server_message_metadata(llm_url: str, kw: dict) -> None:
    chain = ChatPromptTemplate.from_template("One fact about {topic}.") | _real_chat(llm_url, **kw)
    fast = ayo_langchain.optimize(chain)
    x = TOPICS[0]
    want, got = chain.invoke(x), fast.invoke(x)
    assert message_view(got) == message_view(want)  # system_fingerprint, logprobs, refusal, finish_reason
    want_s, got_s = concat(list(chain.stream(x))), concat(list(fast.stream(x)))
    assert message_view(got_s) == message_view(want_s)
    assert (got_s.usage_metadata is None) == (want_s.usage_metadata is None)
