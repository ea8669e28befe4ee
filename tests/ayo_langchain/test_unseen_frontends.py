"""Stock vs ``ayo_langchain.optimize`` on LangGraph / chat-history programs written as users write them
(tutorials, docs), not by the front-ends' authors: compiled ``StateGraph``s (``add_messages``, loops with
a counter, partial updates, checkpointers and threads, every stream mode, ``astream_events``, ``Send``,
subgraphs, ``batch``, errors, interrupts), ``RunnableWithMessageHistory`` and the conversational-RAG
tutorial. Each program runs twice, stock and optimized, each with its own store / checkpointer, on the
real vLLM server (greedy, a few tokens): outputs, streamed chunks, final state, checkpoints, history
stores and errors must be the same.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import warnings
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import ConfigurableFieldSpec, RunnableConfig, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from langgraph.checkpoint.memory import MemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from lc_helpers import MODEL, concat, plain

import ayo_langchain

pytestmark = [pytest.mark.llm, pytest.mark.timeout(600)]
warnings.filterwarnings("ignore", message=".*RunnableWithMessageHistory is deprecated.*")


def llm(url: str, max_tokens: int = 8) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=url, api_key="none", model=MODEL, temperature=0, max_tokens=max_tokens)


def outcome(call: Callable[[], Any]) -> Any:
    """What a call gives, comparable across runs: its value (messages by type and text) or its error."""
    try:
        return ("value", plain(call()))
    except Exception as exc:  # the error is part of the outcome: type and first line
        return ("raised", type(exc).__name__, str(exc).split("\n")[0])


def both(build: Callable[[], Any], **options: Any) -> tuple[Any, Any]:
    """(stock, optimized), each built fresh: own checkpointer, own store."""
    return build(), ayo_langchain.optimize(build(), **options)


def same(build: Callable[[], Any], scenario: Callable[[Any], Any]) -> Any:
    stock, fast = both(build)
    want = scenario(stock)
    assert scenario(fast) == want
    return want


# ---- graphs --------------------------------------------------------------------------------
class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


SYSTEM = ChatPromptTemplate.from_messages([("system", "You are a terse Python tutor."), MessagesPlaceholder("messages")])


def count(state: ChatState) -> dict[str, Any]:
    return {"turns": state.get("turns", 0) + 1}  # a partial update: messages untouched


def again(state: ChatState) -> str:
    return "chatbot" if state["turns"] < 2 else END


def chatbot_graph(url: str, lcel: bool, checkpointer: Any = None, **compile_kw: Any) -> Any:
    """The quickstart chatbot with a counter loop: chatbot -> count -> (chatbot twice | END)."""
    model = llm(url)
    if lcel:  # the node given as an LCEL runnable (Ayo lowers it)
        node: Any = SYSTEM | model | RunnableLambda(lambda m: {"messages": [m]})
    else:  # the node as a function calling the chain (the user's code)
        chain = SYSTEM | model

        def node(state: ChatState) -> dict[str, Any]:
            return {"messages": [chain.invoke(state)]}
    g = StateGraph(ChatState)
    g.add_node("chatbot", node)
    g.add_node("count", count)
    g.add_edge(START, "chatbot")
    g.add_edge("chatbot", "count")
    g.add_conditional_edges("count", again, ["chatbot", END])
    return g.compile(checkpointer=checkpointer, **compile_kw)


def first_turn(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)], "turns": 0}


QUESTIONS = ["What is a Python list?", "What does json.dumps do?"]


@pytest.mark.parametrize("lcel", [True, False], ids=["lcel-node", "function-node"])
def test_chatbot_loop_invoke_and_ainvoke(llm_url: str, lcel: bool) -> None:
    def scenario(g: Any) -> Any:
        return [outcome(lambda q=q: g.invoke(first_turn(q))) for q in QUESTIONS] + [
            outcome(lambda: asyncio.run(g.ainvoke(first_turn(QUESTIONS[0]))))]

    want = same(lambda: chatbot_graph(llm_url, lcel), scenario)
    assert want[0][0] == "value" and len(want[0][1]["messages"]) == 3 and want[0][1]["turns"] == 2


def test_checkpointer_thread_across_two_invocations(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        out = []
        for thread in ("a", "b"):
            cfg = {"configurable": {"thread_id": thread}}
            out.append(outcome(lambda cfg=cfg: g.invoke(first_turn(QUESTIONS[0]), cfg)))
            out.append(outcome(lambda cfg=cfg: g.invoke({"messages": [("user", "Shorter, please.")], "turns": 1},
                                                        cfg)))
            state = g.get_state(cfg)
            out.append((plain(state.values), state.next, [s.next for s in g.get_state_history(cfg)]))
        return out

    want = same(lambda: chatbot_graph(llm_url, True, MemorySaver()), scenario)
    assert len(want[2][0]["messages"]) == 5


@pytest.mark.parametrize("mode", ["updates", "values"])
def test_stream_updates_and_values(llm_url: str, mode: str) -> None:
    def scenario(g: Any) -> Any:
        out = [plain(list(g.stream(first_turn(q), stream_mode=mode))) for q in QUESTIONS]

        async def astream() -> list[Any]:
            return [c async for c in g.astream(first_turn(QUESTIONS[0]), stream_mode=mode)]

        return [*out, plain(asyncio.run(astream()))]

    same(lambda: chatbot_graph(llm_url, True), scenario)


def by_message(chunks: list[tuple[Any, dict[str, Any]]]) -> list[tuple[str, int, str]]:
    """``messages`` mode: (node, step, text joined) per streamed message, in order of first chunk."""
    order: list[str] = []
    texts: dict[str, list[str]] = {}
    where: dict[str, tuple[str, int]] = {}
    for chunk, meta in chunks:
        if chunk.id not in texts:
            order.append(chunk.id)
            texts[chunk.id] = []
        texts[chunk.id].append(chunk.content)
        where[chunk.id] = (meta["langgraph_node"], meta["langgraph_step"])
    return [(*where[i], "".join(texts[i])) for i in order]


@pytest.mark.parametrize("lcel", [True, False], ids=["lcel-node", "function-node"])
def test_stream_messages(llm_url: str, lcel: bool) -> None:
    def scenario(g: Any) -> Any:
        out = [by_message(list(g.stream(first_turn(q), stream_mode="messages"))) for q in QUESTIONS]

        async def astream() -> list[Any]:
            return [c async for c in g.astream(first_turn(QUESTIONS[1]), stream_mode="messages")]

        return [*out, by_message(asyncio.run(astream()))]

    want = same(lambda: chatbot_graph(llm_url, lcel), scenario)
    assert [node for node, _, _ in want[0]] == ["chatbot", "chatbot"] and all(t for _, _, t in want[0])


def test_astream_events_v2(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        async def events() -> list[dict[str, Any]]:
            return [e async for e in g.astream_events(first_turn(QUESTIONS[0]), version="v2")]

        seen = asyncio.run(events())
        tokens = [e["data"]["chunk"].content for e in seen if e["event"] == "on_chat_model_stream"]
        models = [(e["event"], e["metadata"].get("langgraph_node")) for e in seen
                  if e["event"] in ("on_chat_model_start", "on_chat_model_end")]
        ends = [plain(e["data"]["output"]) for e in seen if e["event"] == "on_chain_end" and e["name"] == "LangGraph"]
        # every run's start and end, where it hangs (depth) and its tags: a node's LCEL steps hang under the
        # node's run, as LangGraph flattens them (the order of a step's start among the model's chunks and the
        # chunk count may differ: Ayo's stream ends with a chunk of its own for the finish reason)
        runs = sorted((e["event"], e["name"], tuple(sorted(e["tags"])), len(e["parent_ids"])) for e in seen
                      if not e["event"].endswith("_stream"))
        return "".join(tokens), models, ends, runs

    want = same(lambda: chatbot_graph(llm_url, True), scenario)
    assert want[0] and len(want[1]) == 4
    assert ("on_prompt_start", "ChatPromptTemplate", ("seq:step:1",), 2) in want[3]


def writer_graph(url: str) -> Any:
    """Steps of an LCEL node that write custom stream events and read the run's config (user style)."""
    def announce(state: ChatState, config: RunnableConfig) -> ChatState:
        get_stream_writer()({"status": f"answering for {config['configurable'].get('user', 'nobody')}"})
        return state

    def done(message: Any) -> dict[str, Any]:
        get_stream_writer()({"status": "done", "chars": len(message.content)})
        return {"messages": [message], "turns": 1}

    g = StateGraph(ChatState)
    g.add_node("chatbot", RunnableLambda(announce) | SYSTEM | llm(url) | RunnableLambda(done))
    g.add_edge(START, "chatbot")
    return g.compile()


def test_stream_custom_events_and_config_from_lambda_steps(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        cfg = {"configurable": {"user": "ann"}}
        custom = list(g.stream(first_turn(QUESTIONS[0]), cfg, stream_mode="custom"))

        async def astream() -> list[Any]:
            return [plain(c) async for c in g.astream(first_turn(QUESTIONS[1]), cfg, stream_mode=["custom", "updates"])]

        return custom, asyncio.run(astream())

    want = same(lambda: writer_graph(llm_url), scenario)
    assert want[0][0] == {"status": "answering for ann"} and want[0][1]["status"] == "done"


# ---- Send map-reduce, subgraphs ----------------------------------------------------------------
class Topics(TypedDict, total=False):
    subject: str
    topics: list[str]
    facts: Annotated[list[str], operator.add]
    best: str


class OneTopic(TypedDict):
    topic: str


def map_reduce_graph(url: str) -> Any:
    fact = (ChatPromptTemplate.from_template("One short fact about {topic}.") | llm(url) | StrOutputParser()
            | RunnableLambda(lambda text: {"facts": [text]}))
    pick = (ChatPromptTemplate.from_template("Pick the best fact:\n{facts}") | llm(url) | StrOutputParser()
            | (lambda text: {"best": text}))

    def topics(state: Topics) -> dict[str, Any]:
        return {"topics": [f"{state['subject']} {w}" for w in ("lists", "dicts", "sets")[:len(state["subject"]) % 3 + 1]]}

    def fan_out(state: Topics) -> list[Send]:
        return [Send("fact", {"topic": t}) for t in state["topics"]]

    g = StateGraph(Topics)
    g.add_node("topics", topics)
    g.add_node("fact", fact, input_schema=OneTopic)
    g.add_node("pick", pick)
    g.add_edge(START, "topics")
    g.add_conditional_edges("topics", fan_out, ["fact"])
    g.add_edge("fact", "pick")
    g.add_edge("pick", END)
    return g.compile()


def sorted_facts(result: Any) -> Any:
    if result[0] == "value":  # a fan-out's results are appended in completion order (stock too)
        return ("value", {**result[1], "facts": sorted(result[1]["facts"])})
    return result


def test_send_map_reduce(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        return [sorted_facts(outcome(lambda s=s: g.invoke({"subject": s}))) for s in ("python", "json")]

    want = same(lambda: map_reduce_graph(llm_url), scenario)
    assert {len(w[1]["facts"]) for w in want} == {1, 2}


def subgraph_parent(url: str) -> Any:
    inner = chatbot_graph(url, True)

    def greet(state: ChatState) -> dict[str, Any]:
        return {"messages": [("user", "Answer in five words.")], "turns": 0}

    g = StateGraph(ChatState)
    g.add_node("greet", greet)
    g.add_node("tutor", inner)
    g.add_edge(START, "greet")
    g.add_edge("greet", "tutor")
    return g.compile()


def test_subgraph_as_a_node(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        values = [outcome(lambda q=q: g.invoke(first_turn(q))) for q in QUESTIONS]
        nested = [(ns, plain(update)) for ns, update in g.stream(first_turn(QUESTIONS[0]), subgraphs=True)]
        return values, [(len(ns), u) for ns, u in nested]

    stock, fast = both(lambda: subgraph_parent(llm_url))
    assert fast.ayo_plan.nodes["tutor"].kind == "subgraph"
    assert scenario(fast) == scenario(stock)


def test_batch_of_a_compiled_graph(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        inputs = [first_turn(q) for q in QUESTIONS]
        return plain(g.batch(inputs)), plain(asyncio.run(g.abatch(inputs)))

    same(lambda: chatbot_graph(llm_url, True), scenario)


# ---- errors and interrupts ---------------------------------------------------------------------
def raising_graph(url: str, lcel: bool) -> Any:
    def check(state: ChatState) -> dict[str, Any]:
        if "json" in state["messages"][0].content:
            raise ValueError(f"no json questions, got {state['messages'][0].content!r}")
        return {"turns": 1}

    g = StateGraph(ChatState)
    g.add_node("answer", SYSTEM | llm(url) | (lambda m: {"messages": [m]}))
    g.add_node("check", RunnableLambda(check) | (lambda u: u) if lcel else check)
    g.add_edge(START, "answer")
    g.add_edge("answer", "check")
    return g.compile()


@pytest.mark.parametrize("lcel", [True, False], ids=["lcel-node", "function-node"])
def test_a_node_that_raises(llm_url: str, lcel: bool) -> None:
    def scenario(g: Any) -> Any:
        def streamed() -> Any:
            return list(g.stream(first_turn(QUESTIONS[1]), stream_mode="updates"))

        return ([outcome(lambda q=q: g.invoke(first_turn(q))) for q in QUESTIONS]
                + [outcome(streamed), outcome(lambda: asyncio.run(g.ainvoke(first_turn(QUESTIONS[1]))))])

    want = same(lambda: raising_graph(llm_url, lcel), scenario)
    assert want[1][:2] == ("raised", "ValueError")


def test_interrupt_before_resumed_with_none(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        cfg = {"configurable": {"thread_id": "t"}}
        first = outcome(lambda: g.invoke(first_turn(QUESTIONS[0]), cfg))
        paused = g.get_state(cfg).next
        resumed = outcome(lambda: g.invoke(None, cfg))
        return first, paused, resumed, g.get_state(cfg).next

    want = same(lambda: chatbot_graph(llm_url, True, MemorySaver(), interrupt_before=["count"]), scenario)
    assert want[1] == ("count",)


def approval_graph(url: str) -> Any:
    def review(state: ChatState) -> dict[str, Any]:
        verdict = interrupt({"draft": state["messages"][-1].content})
        return {"messages": [("user", f"Reviewer says: {verdict}. Rewrite it.")], "turns": 1}

    g = StateGraph(ChatState)
    g.add_node("draft", SYSTEM | llm(url) | (lambda m: {"messages": [m]}))
    g.add_node("review", review)
    g.add_node("final", SYSTEM | llm(url) | (lambda m: {"messages": [m]}))
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", "final")
    return g.compile(checkpointer=MemorySaver())


def test_interrupt_resumed_with_command(llm_url: str) -> None:
    def scenario(g: Any) -> Any:
        cfg = {"configurable": {"thread_id": "t"}}
        first = g.invoke(first_turn(QUESTIONS[1]), cfg)
        asked = first["__interrupt__"][0].value
        done = asyncio.run(g.ainvoke(Command(resume="too long"), cfg))
        return plain(first["messages"]), asked, plain(done), [s.next for s in g.get_state_history(cfg)]

    same(lambda: approval_graph(llm_url), scenario)


# ---- chat history ------------------------------------------------------------------------------
def with_store(chain: Any, **kw: Any) -> tuple[dict[str, Any], Any]:
    store: dict[str, Any] = {}

    def get_session_history(session_id: str) -> InMemoryChatMessageHistory:
        if session_id not in store:
            store[session_id] = InMemoryChatMessageHistory()
        return store[session_id]

    return store, RunnableWithMessageHistory(chain, get_session_history, **kw)


def stored(store: dict[Any, Any]) -> dict[Any, Any]:
    return {k: plain(h.messages) for k, h in store.items()}


def same_with_store(build: Callable[[], tuple[dict[str, Any], Any]], scenario: Callable[[Any], Any]) -> Any:
    stock_store, stock = build()
    fast_store, inner = build()
    fast = ayo_langchain.optimize(inner)
    want = scenario(stock)
    assert scenario(fast) == want
    assert stored(fast_store) == stored(stock_store)
    return want, stored(stock_store)


def session(sid: str) -> dict[str, Any]:
    return {"configurable": {"session_id": sid}}


def test_history_over_prompt_and_model_with_keys(llm_url: str) -> None:
    prompt = ChatPromptTemplate.from_messages([("system", "You are a terse assistant."),
                                               MessagesPlaceholder(variable_name="history"), ("human", "{question}")])

    def scenario(r: Any) -> Any:
        out = []
        for sid in ("s1", "s2"):
            out.append(outcome(lambda sid=sid: r.invoke({"question": "My name is Bob. Hi!"}, session(sid))))
            out.append(outcome(lambda sid=sid: r.invoke({"question": "What is my name?"}, session(sid))))
        out.append(plain(concat(list(r.stream({"question": "Say it again."}, session("s1"))))))
        return out

    _, store = same_with_store(lambda: with_store(prompt | llm(llm_url), input_messages_key="question",
                                                  history_messages_key="history"), scenario)
    assert len(store["s1"]) == 6 and len(store["s2"]) == 4


def test_history_over_a_bare_model_with_message_lists(llm_url: str) -> None:
    """The tutorial chatbot: ``RunnableWithMessageHistory(model, get_session_history)`` fed message lists."""
    def scenario(r: Any) -> Any:
        out = [outcome(lambda: r.invoke([HumanMessage(content="Hi! I'm Bob")], session("abc2")))]
        out.append(outcome(lambda: r.invoke([HumanMessage(content="What's my name?")], session("abc2"))))
        out.append(outcome(lambda: asyncio.run(r.ainvoke("And yours?", session("abc3")))))
        return out

    same_with_store(lambda: with_store(llm(llm_url)), scenario)
    prompt = ChatPromptTemplate.from_messages([("system", "Answer all questions briefly."),
                                               MessagesPlaceholder(variable_name="messages")])
    same_with_store(lambda: with_store(prompt | llm(llm_url)), scenario)


def test_history_factory_config_user_and_conversation(llm_url: str) -> None:
    def build() -> tuple[dict[Any, Any], Any]:
        store: dict[Any, Any] = {}

        def get_session_history(user_id: str, conversation_id: str) -> InMemoryChatMessageHistory:
            return store.setdefault((user_id, conversation_id), InMemoryChatMessageHistory())

        prompt = ChatPromptTemplate.from_messages([("system", "You're an assistant who's good at {ability}."),
                                                   MessagesPlaceholder(variable_name="history"), ("human", "{input}")])
        return store, RunnableWithMessageHistory(
            prompt | llm(llm_url) | StrOutputParser(), get_session_history, input_messages_key="input",
            history_messages_key="history",
            history_factory_config=[
                ConfigurableFieldSpec(id="user_id", annotation=str, name="User ID", description="The user.",
                                      default="", is_shared=True),
                ConfigurableFieldSpec(id="conversation_id", annotation=str, name="Conversation ID",
                                      description="The conversation.", default="", is_shared=True)])

    def scenario(r: Any) -> Any:
        out = []
        for user, conv in (("123", "1"), ("123", "2"), ("123", "1")):
            cfg = {"configurable": {"user_id": user, "conversation_id": conv}}
            out.append(outcome(lambda cfg=cfg: r.invoke({"ability": "math", "input": "What does cosine mean?"}, cfg)))
        out.append(outcome(lambda: r.invoke({"ability": "math", "input": "Hi"}, session("x"))))  # stock's KeyError?
        return out

    _, store = same_with_store(build, scenario)
    assert len(store[("123", "1")]) == 4


def conversational_rag(url: str, vectorstore: Any) -> tuple[dict[str, Any], Any]:
    """The LangChain conversational-RAG tutorial, as written there."""
    from langchain_classic.chains import create_history_aware_retriever, create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    model = llm(url, 16)
    retriever = vectorstore.as_retriever(search_kwargs={"k": 2})
    contextualize_q_prompt = ChatPromptTemplate.from_messages([
        ("system", "Given a chat history and the latest user question which might reference context in the chat "
                   "history, formulate a standalone question which can be understood without the chat history. "
                   "Do NOT answer the question, just reformulate it if needed and otherwise return it as is."),
        MessagesPlaceholder("chat_history"), ("human", "{input}")])
    history_aware_retriever = create_history_aware_retriever(model, retriever, contextualize_q_prompt)
    qa_prompt = ChatPromptTemplate.from_messages([
        ("system", "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
                   "context to answer the question. Use three sentences maximum.\n\n{context}"),
        MessagesPlaceholder("chat_history"), ("human", "{input}")])
    rag_chain = create_retrieval_chain(history_aware_retriever, create_stuff_documents_chain(model, qa_prompt))
    return with_store(rag_chain, input_messages_key="input", history_messages_key="chat_history",
                      output_messages_key="answer")


def test_conversational_rag_tutorial(llm_url: str, vectorstore: Any) -> None:
    def scenario(r: Any) -> Any:
        out = []
        for sid in ("abc123", "xyz"):
            for q in ("What does json.dumps do?", "How do I do the reverse?"):
                out.append(outcome(lambda q=q, sid=sid: r.invoke({"input": q}, session(sid))))
        return out

    want, store = same_with_store(lambda: conversational_rag(llm_url, vectorstore), scenario)
    assert want[1][1]["context"] and len(store["abc123"]) == 4


# ---- what optimize takes -----------------------------------------------------------------------
def test_optimize_never_raises_on_these_objects(caplog: pytest.LogCaptureFixture) -> None:
    """A graph builder not compiled, a checkpointer, a history: not runnables Ayo optimizes; they come back
    unchanged, with a warning that says what to pass instead."""
    builder = StateGraph(ChatState)
    builder.add_node("count", count)
    builder.add_edge(START, "count")
    for obj in (builder, MemorySaver(), InMemoryChatMessageHistory()):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ayo_langchain"):
            assert ayo_langchain.optimize(obj) is obj
        assert type(obj).__name__ in caplog.text and "unchanged" in caplog.text
        if obj is builder:
            assert "builder.compile(" in caplog.text


class Asked(TypedDict, total=False):
    question: str
    answer: str


def history_in_a_graph(url: str) -> tuple[dict[str, Any], Any]:
    """A graph node that is a chain with memory: the session id rides in the graph's config."""
    prompt = ChatPromptTemplate.from_messages([("system", "You are terse."), MessagesPlaceholder("history"),
                                               ("human", "{question}")])
    store, chain = with_store(prompt | llm(url) | StrOutputParser(), input_messages_key="question",
                              history_messages_key="history")
    g = StateGraph(Asked)
    g.add_node("answer", chain | (lambda text: {"answer": text}))
    g.add_edge(START, "answer")
    return store, g.compile()


def run_events(g: Any, x: Any, cfg: Any = None, skip: tuple[str, ...] = ()) -> list[tuple[str, str, tuple[str, ...]]]:
    """``astream_events`` v2: each run's start and end (event, name, tags), runs named in ``skip`` left out."""
    async def events() -> list[dict[str, Any]]:
        return [e async for e in g.astream_events(x, cfg, version="v2")]

    return sorted((e["event"], e["name"], tuple(sorted(e["tags"]))) for e in asyncio.run(events())
                  if not e["event"].endswith("_stream") and e["name"] not in skip)


def test_with_config_steps_in_a_node(llm_url: str) -> None:
    """Steps named and tagged by ``with_config`` inside a node: the runs of invoke and of astream_events."""
    def build() -> Any:
        g = StateGraph(Asked)
        g.add_node("answer", ChatPromptTemplate.from_template("Answer: {question}")
                   | llm(llm_url).with_config(run_name="tutor", tags=["tutor"])
                   | StrOutputParser().with_config(run_name="parse") | (lambda t: {"answer": t}))
        g.add_edge(START, "answer")
        return g.compile()

    def scenario(g: Any) -> Any:
        runs = Runs()
        value = outcome(lambda: g.invoke({"question": "What is a set?"}, {"callbacks": [runs]}))
        return value, runs.tree(), run_events(g, {"question": "What is a dict?"})

    want = same(build, scenario)
    assert ("chat_model", "tutor", ("seq:step:2", "tutor"), "answer") in want[1]


class Runs(BaseCallbackHandler):
    """Every run a handler sees: (kind, name, tags, its parent's name), runs named in ``skip`` left out
    (their children hang under the nearest run kept: Ayo's composites report no run)."""

    def __init__(self) -> None:
        self.runs: dict[Any, tuple[str, str, tuple[str, ...], Any]] = {}

    def _start(self, kind: str, kw: dict[str, Any]) -> None:
        self.runs[kw["run_id"]] = (kind, kw.get("name") or "", tuple(sorted(kw.get("tags") or ())),
                                   kw.get("parent_run_id"))

    def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
        self._start("chain", kw)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
        self._start("chat_model", kw)

    def tree(self, skip: tuple[str, ...] = ()) -> list[tuple[str, str, tuple[str, ...], str]]:
        def parent(pid: Any) -> str:
            while pid in self.runs and self.runs[pid][1] in skip:
                pid = self.runs[pid][3]
            return self.runs[pid][1] if pid in self.runs else "-"

        return sorted((kind, name, tags, parent(pid)) for kind, name, tags, pid in self.runs.values()
                      if name not in skip)


HISTORY_COMPOSITES = ("insert_history", "RunnableParallel<history>")  # assigns Ayo splits into nodes


def test_a_chain_with_memory_as_a_graph_node(llm_url: str) -> None:
    """Values, the store, and the runs: the history's own runs under the node's, as stock (the graph's
    context config must not leak into the configs Ayo merges)."""
    def scenario(g: Any) -> Any:
        out = [outcome(lambda q=q, sid=sid: g.invoke({"question": q}, session(sid)))
               for sid in ("s1", "s2") for q in ("I am Ann.", "Who am I?")]
        sync, asynchronous = Runs(), Runs()
        g.invoke({"question": "Again?"}, {**session("s3"), "callbacks": [sync]})
        asyncio.run(g.ainvoke({"question": "Again?"}, {**session("s3"), "callbacks": [asynchronous]}))
        # stock's composites (the history's insert_history assign) report runs Ayo's split nodes do not
        return out, sync.tree(HISTORY_COMPOSITES), asynchronous.tree(HISTORY_COMPOSITES)

    stock_store, stock = history_in_a_graph(llm_url)
    fast_store, inner = history_in_a_graph(llm_url)
    fast = ayo_langchain.optimize(inner)
    want, got = scenario(stock), scenario(fast)
    assert got == want
    assert stored(fast_store) == stored(stock_store) and len(stock_store["s1"].messages) == 4
    streamed = [run_events(g, {"question": "And now?"}, session("s4"), HISTORY_COMPOSITES) for g in (stock, fast)]
    assert streamed[1] == streamed[0]
    assert stored(fast_store) == stored(stock_store)
    assert ("chain", "RunnableWithMessageHistory", ("seq:step:1",), "answer") in got[1]
    assert ("chat_model", "", ("seq:step:2",), "RunnableSequence") in got[1]


class UnreachableStore(BaseChatMessageHistory):
    """A history store that cannot be read (a database down)."""

    @property
    def messages(self) -> list[Any]:  # type: ignore[override]
        raise ConnectionError("history store unreachable")

    def add_messages(self, messages: Any) -> None:
        raise AssertionError("never written: the read failed first")

    def clear(self) -> None:
        pass


class Errors(Runs):
    """Runs, plus the names of the runs that ended with an error, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []

    def on_chain_error(self, error: BaseException, **kw: Any) -> None:
        self.errors.append(self.runs[kw["run_id"]][1])


def test_a_store_that_fails_under_a_graph_node(llm_url: str) -> None:
    """The store's error, out of the graph as stock raises it, ending the same runs (Ayo's split composites,
    the history's insert_history assign, report none)."""
    def build() -> Any:
        prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
        chain = RunnableWithMessageHistory(prompt | llm(llm_url) | StrOutputParser(), lambda session_id:
                                           UnreachableStore(), input_messages_key="question",
                                           history_messages_key="history")
        g = StateGraph(Asked)
        g.add_node("answer", chain | (lambda text: {"answer": text}))
        g.add_edge(START, "answer")
        return g.compile()

    def scenario(g: Any) -> Any:
        out = []
        for call in (lambda c: g.invoke({"question": "hi"}, c), lambda c: asyncio.run(g.ainvoke({"question": "hi"}, c))):
            runs = Errors()
            out.append((outcome(lambda call=call, runs=runs: call({**session("s"), "callbacks": [runs]})),
                        [name for name in runs.errors if name not in HISTORY_COMPOSITES], runs.tree(HISTORY_COMPOSITES)))
        return out

    want = same(build, scenario)
    assert want[0][0] == ("raised", "ConnectionError", "history store unreachable")
    assert want[0][1][:2] == ["load_history", "RunnableWithMessageHistory"]


def test_optimizing_twice(llm_url: str) -> None:
    """``optimize(optimize(x, ...), ...)`` (a notebook cell run twice, other options): planned from the user's
    objects again, not as an opaque wrapper of Ayo's own."""
    graph = chatbot_graph(llm_url, True)
    twice = ayo_langchain.optimize(ayo_langchain.optimize(graph), policy="fifo")
    assert {n: p.kind for n, p in twice.ayo_plan.nodes.items()} == {"chatbot": "lowered", "count": "opaque"}
    assert twice.ayo_plan.options.policy == "fifo"
    x = first_turn(QUESTIONS[0])
    assert outcome(lambda: twice.invoke(x)) == outcome(lambda: graph.invoke(x))
    chain = SYSTEM | llm(llm_url)
    again = ayo_langchain.optimize(ayo_langchain.optimize(chain))
    assert again.wrapped is chain and type(again.plan.root).__name__ == "Sequence"


def test_a_chain_with_memory_inside_an_assign(llm_url: str) -> None:
    """``RunnablePassthrough.assign(answer=<chain with memory>, ...)``: values, store and runs (stock's assign
    composites left out: Ayo splits them into nodes), invoke and abatch."""
    from langchain_core.runnables import RunnablePassthrough

    prompt = ChatPromptTemplate.from_messages([("system", "You are terse."), MessagesPlaceholder("history"),
                                               ("human", "{question}")])

    def build() -> tuple[dict[str, Any], Any]:
        store, chain = with_store(prompt | llm(llm_url) | StrOutputParser(), input_messages_key="question",
                                  history_messages_key="history")
        return store, RunnablePassthrough.assign(answer=chain, chars=lambda x: len(x["question"]))

    skip = (*HISTORY_COMPOSITES, "RunnableAssign<answer,chars>", "RunnableParallel<answer,chars>")

    def scenario(r: Any) -> Any:
        out = []
        for q in ("I am Ann.", "Who am I?"):
            runs = Runs()
            out.append((outcome(lambda q=q, runs=runs: r.invoke({"question": q}, {**session("a"), "callbacks": [runs]})),
                        runs.tree(skip)))
        out.append(outcome(lambda: asyncio.run(r.abatch([{"question": "x"}, {"question": "y"}],
                                                        [session("b1"), session("b2")]))))
        return out

    want, store = same_with_store(build, scenario)
    assert len(store["a"]) == 4 and any(run[1] == "RunnableWithMessageHistory" for run in want[0][1])
