"""LangGraph graphs, stock vs ``ayo_langchain.optimize(graph)`` on the real vLLM server (fp32, greedy).

LangGraph's own Pregel loop runs the optimized graph; what changes is that nodes given as LCEL
runnables run on Ayo. So every check compares against the very same compiled graph run stock:
final state, each stream mode, callbacks, errors, a ``Send`` fan-out whose width the state decides
at run time, a checkpointed thread interrupted and resumed, and a node Ayo does not lower.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from lc_helpers import MODEL, plain

import ayo_langchain
from ayo_langchain.graph import OptimizedGraphMixin

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]

QUESTIONS = ["How do I read a file in Python?", "What is a Python dictionary?", "How do I sort a list?",
             "What does json.dumps do?", "How do I join paths with pathlib?"]


def chat(url: str, max_tokens: int = 16) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens)


class State(TypedDict, total=False):
    question: str
    aspects: list[str]
    answers: Annotated[list[str], operator.add]
    summary: str


def split(state: State) -> dict[str, Any]:
    """Aspects of the question: how many is decided by the state, at run time."""
    words = state["question"].rstrip("?").split()
    return {"aspects": [f"{state['question']} (aspect: {w})" for w in words[-(len(words) % 3 + 1):]]}


def fan_out(state: State) -> list[Send]:
    return [Send("answer", {"aspect": a}) for a in state["aspects"]]


def map_reduce(url: str, max_tokens: int = 16, checkpointer: Any = None) -> Any:
    answer = (ChatPromptTemplate.from_template("Answer in one sentence: {aspect}") | chat(url, max_tokens)
              | StrOutputParser() | RunnableLambda(lambda text: {"answers": [text]}))
    reduce = (ChatPromptTemplate.from_template("Question: {question}\nNotes:\n{answers}\nSummarize the notes.")
              | chat(url, max_tokens) | StrOutputParser() | RunnableLambda(lambda text: {"summary": text}))
    g = StateGraph(State)
    g.add_node("split", split)
    g.add_node("answer", answer)
    g.add_node("reduce", reduce)
    g.add_edge(START, "split")
    g.add_conditional_edges("split", fan_out, ["answer"])
    g.add_edge("answer", "reduce")
    g.add_edge("reduce", END)
    return g.compile(checkpointer=checkpointer)


def normalized(state: dict[str, Any]) -> dict[str, Any]:
    # answers of one fan-out are appended in completion order by the reducer, in stock too
    return {**state, "answers": sorted(state.get("answers", []))}


def test_recognizes_nodes_and_keeps_langgraph_in_charge(llm_url: str) -> None:
    stock = map_reduce(llm_url)
    fast = ayo_langchain.optimize(stock)
    assert isinstance(fast, type(stock)) and isinstance(fast, OptimizedGraphMixin)
    kinds = {n: p.kind for n, p in fast.ayo_plan.nodes.items()}
    assert kinds == {"split": "opaque", "answer": "lowered", "reduce": "lowered"}
    text = str(fast.explain())
    assert "split: Opaque (a Python function node" in text and "answer: lowered" in text
    assert stock.nodes["answer"].bound is not fast.nodes["answer"].bound  # the user's graph is untouched


def test_final_state_equivalence_64_tokens(llm_url: str) -> None:
    """>= 5 questions, >= 64-token outputs, a fan-out per question: the same final state."""
    stock = map_reduce(llm_url, max_tokens=64)
    fast = ayo_langchain.optimize(stock)
    want = [normalized(stock.invoke({"question": q})) for q in QUESTIONS]
    got = [normalized(s) for s in fast.batch([{"question": q} for q in QUESTIONS])]
    assert got == want
    assert any(len(a.split()) > 30 for s in want for a in s["answers"])  # long outputs, not a 1-token echo
    assert len(fast.last_traces) >= len(QUESTIONS) * 2  # lowered node calls ran on Ayo


def test_fan_out_width_decided_at_run_time_and_async(llm_url: str) -> None:
    stock = map_reduce(llm_url)
    fast = ayo_langchain.optimize(stock)
    widths = set()
    for q in ["Sort a list?", "How do I sort a list?", "How do I sort a big list?"]:
        want = normalized(stock.invoke({"question": q}))
        got = normalized(asyncio.run(fast.ainvoke({"question": q})))
        assert got == want
        widths.add(len(got["answers"]))
    assert len(widths) > 1


@pytest.mark.parametrize("mode", ["values", "updates"])
def test_stream_modes_values_updates(llm_url: str, mode: str) -> None:
    stock = map_reduce(llm_url)
    fast = ayo_langchain.optimize(stock)
    x = {"question": "What does json.dumps do?"}

    def canon(chunks: list[Any]) -> list[Any]:
        out = [normalized(c) if mode == "values" else c for c in chunks]
        # the fan-out's updates arrive in completion order (stock too): compare them as a multiset
        return sorted(map(repr, out)) if mode == "updates" else out

    assert canon(list(fast.stream(x, stream_mode=mode))) == canon(list(stock.stream(x, stream_mode=mode)))

    async def astream(g: Any) -> list[Any]:
        return [c async for c in g.astream(x, stream_mode=mode)]

    assert canon(asyncio.run(astream(fast))) == canon(asyncio.run(astream(stock)))


def messages_by_node(chunks: list[tuple[Any, dict]]) -> list[tuple[str, str]]:
    """Each model message streamed in ``messages`` mode: (node, text), sorted (fan-out order varies)."""
    texts: dict[str, list[str]] = {}
    nodes: dict[str, str] = {}
    for chunk, meta in chunks:
        texts.setdefault(chunk.id, []).append(chunk.content)
        nodes[chunk.id] = meta["langgraph_node"]
    return sorted((nodes[i], "".join(t)) for i, t in texts.items())


def test_stream_mode_messages_and_multiple_modes(llm_url: str) -> None:
    stock = map_reduce(llm_url)
    fast = ayo_langchain.optimize(stock)
    x = {"question": "What is a Python dictionary?"}
    want = messages_by_node(list(stock.stream(x, stream_mode="messages")))
    assert messages_by_node(list(fast.stream(x, stream_mode="messages"))) == want
    assert {n for n, _ in want} == {"answer", "reduce"} and all(t for _, t in want)
    both = list(fast.stream(x, stream_mode=["updates", "messages"]))
    assert {mode for mode, _ in both} == {"updates", "messages"}
    assert messages_by_node([c for mode, c in both if mode == "messages"]) == want


class Runs(BaseCallbackHandler):
    """Every run a handler sees: its name, its parent's name and its tags."""

    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[str, UUID | None, tuple[str, ...]]] = {}

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       tags: list[str] | None = None, **kw: Any) -> None:
        self.runs[run_id] = (kw.get("name") or "", parent_run_id, tuple(sorted(tags or [])))

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None, **kw: Any) -> None:
        self.runs[run_id] = ("chat:" + (kw.get("name") or ""), parent_run_id, tuple(sorted(tags or [])))

    def tree(self) -> list[tuple[str, str, tuple[str, ...]]]:
        def name(r: UUID | None) -> str:
            return self.runs[r][0] if r in self.runs else "-"

        return sorted((n, name(parent), tags) for n, parent, tags in self.runs.values())


def test_callbacks_see_the_same_runs(llm_url: str) -> None:
    stock = map_reduce(llm_url)
    fast = ayo_langchain.optimize(stock)
    theirs, ours = Runs(), Runs()
    x = {"question": "How do I sort a list?"}
    stock.invoke(x, config={"callbacks": [theirs]})
    fast.invoke(x, config={"callbacks": [ours]})
    assert ours.tree() == theirs.tree()
    assert ("chat:", "answer", ("seq:step:2",)) in ours.tree()
    theirs, ours = Runs(), Runs()
    asyncio.run(stock.ainvoke(x, config={"callbacks": [theirs]}))
    asyncio.run(fast.ainvoke(x, config={"callbacks": [ours]}))
    assert ours.tree() == theirs.tree()


def test_errors_as_stock(llm_url: str) -> None:
    """A lowered node whose prompt misses a variable raises stock's error, through stock's graph."""
    bad = ChatPromptTemplate.from_template("{missing}") | chat(llm_url) | StrOutputParser()
    g = StateGraph(State)
    g.add_node("bad", bad | RunnableLambda(lambda t: {"summary": t}))
    g.add_edge(START, "bad")
    stock = g.compile()
    fast = ayo_langchain.optimize(stock)
    assert fast.ayo_plan.nodes["bad"].kind == "lowered"

    def outcome(call: Any) -> tuple[type, str]:
        with pytest.raises(Exception) as info:
            call()
        return type(info.value), str(info.value).split("\n")[0]

    x = {"question": "q"}
    assert outcome(lambda: fast.invoke(x)) == outcome(lambda: stock.invoke(x))
    assert outcome(lambda: asyncio.run(fast.ainvoke(x))) == outcome(lambda: asyncio.run(stock.ainvoke(x)))


def test_recursion_limit_as_stock(llm_url: str) -> None:
    from langgraph.errors import GraphRecursionError

    step = ChatPromptTemplate.from_template("Say: {question}") | chat(llm_url, 4) | StrOutputParser() | (
        lambda t: {"answers": [t]})
    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if len(s["answers"]) < 10 else END)
    stock = g.compile()
    fast = ayo_langchain.optimize(stock)
    for graph in (stock, fast):
        with pytest.raises(GraphRecursionError):
            graph.invoke({"question": "hi"}, config={"recursion_limit": 3})


def approval_graph(url: str, checkpointer: Any) -> Any:
    draft = (ChatPromptTemplate.from_template("Answer in one sentence: {question}") | chat(url)
             | StrOutputParser() | RunnableLambda(lambda t: {"answers": [t]}))

    def review(state: State) -> dict[str, Any]:
        verdict = interrupt({"draft": state["answers"][-1]})
        return {"summary": f"{verdict}: {state['answers'][-1]}"}

    final = (ChatPromptTemplate.from_template("Rewrite more briefly: {summary}") | chat(url)
             | StrOutputParser() | RunnableLambda(lambda t: {"answers": [t]}))
    g = StateGraph(State)
    g.add_node("draft", draft)
    g.add_node("review", review)
    g.add_node("final", final)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", "final")
    g.add_edge("final", END)
    return g.compile(checkpointer=checkpointer)


def test_checkpointed_thread_interrupt_and_resume(llm_url: str) -> None:
    stock = approval_graph(llm_url, InMemorySaver())
    fast = ayo_langchain.optimize(approval_graph(llm_url, InMemorySaver()))
    results = []
    for graph in (stock, fast):
        cfg = {"configurable": {"thread_id": "t-1"}}
        first = graph.invoke({"question": "What is a tuple?"}, config=cfg)
        assert "__interrupt__" in first
        paused = graph.get_state(cfg)
        assert paused.next == ("review",)
        done = graph.invoke(Command(resume="approved"), config=cfg)
        history = [s.next for s in graph.get_state_history(cfg)]
        results.append((plain(first["answers"]), first["__interrupt__"][0].value, done, history))
    assert results[0] == results[1]
    assert results[1][2]["summary"].startswith("approved: ")


class Shouting(Runnable):
    """A user's own Runnable class: Ayo does not know what it does, so it runs as-is."""

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return {"summary": input["question"].upper()}


def test_custom_node_runs_as_the_users_object(llm_url: str) -> None:
    g = StateGraph(State)
    g.add_node("shout", Shouting())
    g.add_node("answer", ChatPromptTemplate.from_template("Answer: {summary}") | chat(llm_url)
               | StrOutputParser() | (lambda t: {"answers": [t]}))
    g.add_edge(START, "shout")
    g.add_edge("shout", "answer")
    stock = g.compile()
    fast = ayo_langchain.optimize(stock)
    plan = fast.ayo_plan.nodes["shout"]
    assert plan.kind == "opaque" and "Shouting" in plan.reason
    assert fast.nodes["shout"].bound is stock.nodes["shout"].bound
    assert f"node shout: {plan.reason}" in str(fast.explain())
    x = {"question": "what is a set?"}
    assert fast.invoke(x) == stock.invoke(x)


def test_subgraph_node_is_optimized_too(llm_url: str) -> None:
    inner = map_reduce(llm_url)
    g = StateGraph(State)
    g.add_node("inner", inner)
    g.add_edge(START, "inner")
    stock = g.compile()
    fast = ayo_langchain.optimize(stock)
    assert fast.ayo_plan.nodes["inner"].kind == "subgraph"
    x = {"question": "What is a set?"}
    assert normalized(fast.invoke(x)) == normalized(stock.invoke(x))


def test_interrupt_inside_a_lowered_node(llm_url: str) -> None:
    """``interrupt()`` in a lambda of an LCEL node Ayo lowers: the same pause and resume as stock."""
    def build() -> Any:
        def ask(x: dict[str, Any]) -> dict[str, Any]:
            return {**x, "verdict": interrupt({"question": x["question"]})}

        node = (RunnableLambda(ask) | ChatPromptTemplate.from_template("Say {verdict} about {question}")
                | chat(llm_url, 8) | StrOutputParser() | (lambda t: {"summary": t}))
        g = StateGraph(State)
        g.add_node("ask", node)
        g.add_edge(START, "ask")
        return g.compile(checkpointer=InMemorySaver())

    async def paused_then_resumed(graph: Any) -> tuple[Any, Any]:
        cfg = {"configurable": {"thread_id": "t-2"}}
        first = await graph.ainvoke({"question": "sets"}, cfg)
        return first["__interrupt__"][0].value, await graph.ainvoke(Command(resume="yes"), cfg)

    fast = ayo_langchain.optimize(build())
    assert fast.ayo_plan.nodes["ask"].kind == "lowered"
    want = asyncio.run(paused_then_resumed(build()))
    assert asyncio.run(paused_then_resumed(fast)) == want
    assert want[0] == {"question": "sets"} and want[1]["summary"]
