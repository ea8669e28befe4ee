"""LangChain v1 ``create_agent`` and LangGraph's prebuilt ``create_react_agent``, stock vs optimized.

An agent is a compiled LangGraph graph: ``optimize`` keeps LangGraph's loop and nodes; the model
node (a tool-calling request) and the ``ToolNode`` run as the user's objects, each with its reason
in ``explain()``. The equivalence tests run on the tool-calling server (``tools_llm_url``: the
tool-aware chat template and vLLM's hermes parser). The 135M model rarely emits a tool call on its
own, so the test of a raising tool drives the loop with a scripted chat model (a fake model, said
here: the real one cannot be made to call the tool), and compares stock's handling with Ayo's.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from lc_helpers import MODEL

import ayo_langchain
from ayo_core.engines.llm_client import LLMEngine
from ayo_langchain.graph import AGENT_MODEL_REASON, AGENT_MODEL_ROUTED_REASON
from ayo_shims import langgraph as lg

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]

QUESTIONS = ["Look up json.loads in the Python docs and say what it does.", "What is 12 * 7?",
             "Explain what os.path.join does.", "Search the docs for itertools.chain and explain it.",
             "What does base64.b64encode return? Then compute 14 * 5."]


@tool
def search(query: str) -> str:
    """Look a name up in the Python documentation."""
    return f"[{query}] A function of the Python standard library."


@tool
def calculator(expression: str) -> str:
    """Do arithmetic on an expression like 12 * 7."""
    a, _, b = expression.partition("*")
    return str(int(a) * int(b))


def chat(url: str, max_tokens: int) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens)


def agents(url: str, max_tokens: int = 16) -> dict[str, Any]:
    return {
        "create_agent": create_agent(chat(url, max_tokens), [search, calculator],
                                     system_prompt="Use the tools when they help, then answer briefly."),
        "create_react_agent": create_react_agent(chat(url, max_tokens), [search, calculator],
                                                 prompt="Use the tools when they help, then answer briefly."),
    }


def canon(state: dict[str, Any]) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """The conversation, minus what differs run to run (ids, timings, token usage)."""
    return [(m.type, str(m.content), [(c["name"], c["args"]) for c in getattr(m, "tool_calls", [])])
            for m in state["messages"]]


@pytest.mark.parametrize("kind", ["create_agent", "create_react_agent"])
def test_agent_nodes_run_as_the_users_objects_with_reasons(tools_llm_url: str, kind: str) -> None:
    stock = agents(tools_llm_url)[kind]
    fast = ayo_langchain.optimize(stock)
    model_node = "model" if kind == "create_agent" else "agent"
    plans = fast.ayo_plan.nodes
    assert plans[model_node].kind == "opaque" and plans[model_node].reason.startswith(AGENT_MODEL_ROUTED_REASON)
    assert plans["tools"].kind == "opaque" and "ToolNode" in plans["tools"].reason
    # both tools are plain @tool functions: their calls start from the model's stream (when it streams)
    assert "start as soon as their arguments are complete" in plans["tools"].reason
    assert set(fast.ayo_plan.early_tools.tools) == {"search", "calculator"}
    assert "whole chain is one opaque node" in fast.explain()
    assert isinstance(fast, type(stock))


@pytest.mark.parametrize("kind", ["create_agent", "create_react_agent"])
def test_agent_equivalence_64_tokens(tools_llm_url: str, kind: str) -> None:
    """>= 5 questions, 64-token answers: the same conversation, sync and async."""
    stock = agents(tools_llm_url, 64)[kind]
    fast = ayo_langchain.optimize(stock)
    inputs = [{"messages": [("user", q)]} for q in QUESTIONS]
    want = [canon(s) for s in stock.batch(inputs)]
    assert [canon(s) for s in fast.batch(inputs)] == want
    assert [canon(s) for s in asyncio.run(fast.abatch(inputs))] == want
    assert any(len(str(s[-1][1]).split()) > 25 for s in want)  # long answers


@pytest.mark.parametrize("kind", ["create_agent", "create_react_agent"])
def test_an_agents_async_model_requests_go_through_ayos_engine(tools_llm_url: str, kind: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The model node's requests (tools bound) are sent by Ayo's LLM engine, invoked and streamed, with
    stock's conversation; the sync path stays the model's own client."""
    stock = agents(tools_llm_url, 32)[kind]
    fast = ayo_langchain.optimize(stock)
    sent: list[dict[str, Any]] = []
    chat = LLMEngine.chat

    async def counted(self: LLMEngine, messages: Any, **kw: Any) -> Any:
        sent.append(kw)
        return await chat(self, messages, **kw)

    monkeypatch.setattr(LLMEngine, "chat", counted)
    inputs = [{"messages": [("user", q)]} for q in QUESTIONS[:3]]
    want = [canon(s) for s in stock.batch(inputs)]
    assert not sent  # stock's requests are its own client's
    assert [canon(s) for s in asyncio.run(fast.abatch(inputs))] == want
    assert len(sent) >= len(inputs) and all({t["function"]["name"] for t in kw["tools"]} == {"search", "calculator"}
                                            for kw in sent)

    async def streamed(graph: Any, x: Any) -> list[tuple[str, str]]:
        return [(m["langgraph_node"], c.content) async for c, m in graph.astream(x, stream_mode="messages")]

    before = len(sent)
    assert asyncio.run(streamed(fast, inputs[0])) == asyncio.run(streamed(stock, inputs[0]))
    assert len(sent) > before and sent[-1].get("stream_cb") is not None  # streamed through the engine
    before = len(sent)
    assert canon(fast.invoke(inputs[0])) == want[0]
    assert len(sent) == before  # the sync path: the model's own client


def test_agent_stream_modes_and_callbacks(tools_llm_url: str) -> None:
    stock = agents(tools_llm_url)["create_agent"]
    fast = ayo_langchain.optimize(stock)
    x = {"messages": [("user", QUESTIONS[1])]}
    for mode in ("values", "updates"):
        got = [repr(canon(c) if mode == "values" else sorted(c)) for c in fast.stream(x, stream_mode=mode)]
        assert got == [repr(canon(c) if mode == "values" else sorted(c)) for c in stock.stream(x, stream_mode=mode)]

    def tokens(graph: Any) -> list[tuple[str, str]]:
        return [(m["langgraph_node"], c.content) for c, m in graph.stream(x, stream_mode="messages")]

    assert tokens(fast) == tokens(stock)

    async def atokens(graph: Any) -> list[tuple[str, str]]:  # the async stream: where Ayo watches for tool calls
        return [(m["langgraph_node"], c.content) async for c, m in graph.astream(x, stream_mode="messages")]

    assert asyncio.run(atokens(fast)) == asyncio.run(atokens(stock))

    class Names(BaseCallbackHandler):
        def __init__(self) -> None:
            self.names: list[str] = []

        def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kw: Any) -> None:
            self.names.append(kw.get("name") or "")

    theirs, ours = Names(), Names()
    stock.invoke(x, config={"callbacks": [theirs]})
    fast.invoke(x, config={"callbacks": [ours]})
    assert ours.names == theirs.names


class ScriptedChat(GenericFakeChatModel):
    """A fake chat model that answers from a script (it ignores the tools it is bound to)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def scripted() -> ScriptedChat:
    return ScriptedChat(messages=iter([
        AIMessage("", tool_calls=[{"name": "calculator", "args": {"expression": "12 / 0"}, "id": "c1"},
                                  {"name": "search", "args": {"query": "json.loads"}, "id": "c2"}]),
        AIMessage("Division by zero is undefined; json.loads parses JSON."),
    ]))


@tool
def divide(expression: str) -> str:
    """Divide: an expression like 12 / 4."""
    a, _, b = expression.partition("/")
    return str(int(a) / int(b))


@pytest.mark.parametrize("kind", ["create_agent", "create_react_agent"])
def test_agent_whose_tool_raises_behaves_as_stock(kind: str) -> None:
    """create_agent's default ToolNode raises a tool's own error; a prebuilt agent given
    ``ToolNode(handle_tool_errors=True)`` turns it into a tool message and goes on."""
    def build() -> Any:
        from langgraph.prebuilt import ToolNode

        calc = divide.model_copy(update={"name": "calculator"})
        if kind == "create_agent":
            return create_agent(scripted(), [calc, search])
        return create_react_agent(scripted(), ToolNode([calc, search], handle_tool_errors=True))

    def outcome(graph: Any) -> Any:
        try:
            return canon(graph.invoke({"messages": [("user", "What is 12 / 0? And json.loads?")]}))
        except Exception as exc:
            return (type(exc).__name__, str(exc))

    want = outcome(build())
    assert outcome(ayo_langchain.optimize(build())) == want
    if kind == "create_react_agent":  # stock's ToolNode turned the error into a tool message, the loop went on
        assert any(t == "tool" and "division by zero" in c for t, c, _ in want)
    else:
        assert want[0] == "ZeroDivisionError"


def test_an_agent_whose_model_ayo_does_not_serve_keeps_its_own_client() -> None:
    """A chat model that is not a ChatOpenAI at a server of its own: the model node runs as stock's."""
    graph = create_agent(scripted(), [search, calculator])
    fast = ayo_langchain.optimize(graph)
    assert fast.ayo_plan.nodes["model"].reason.startswith(AGENT_MODEL_REASON)
    assert getattr(lg.node_bound(fast.nodes["model"]), "engine", "absent") is None
