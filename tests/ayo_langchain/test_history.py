"""Chat history, offline: ``RunnableWithMessageHistory`` and ``create_history_aware_retriever``
lowered by Ayo against the fake OpenAI server (real request bodies, deterministic answers).

Stock and optimized run side by side on separate stores; each check compares values, the
store's messages after every call, the callbacks' run tree and errors. The real-server
conversations are in ``test_history_llm.py``.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from lc_helpers import concat, fake_chat, plain

import ayo_langchain

warnings.filterwarnings("ignore", message=".*RunnableWithMessageHistory is deprecated.*")


def with_history(chain: Any, **keys: str) -> tuple[dict[str, Any], Any]:
    """``RunnableWithMessageHistory(chain, ...)`` over a fresh in-memory store (returned too)."""
    from langchain_core.runnables.history import RunnableWithMessageHistory

    store: dict[str, Any] = {}
    return store, RunnableWithMessageHistory(
        chain, lambda session_id: store.setdefault(session_id, InMemoryChatMessageHistory()), **keys)


def chat_chain(server: Any) -> Any:
    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), MessagesPlaceholder("history"),
                                               ("human", "{question}")])
    return prompt | fake_chat(server) | StrOutputParser()


def pair(server: Any) -> tuple[dict, Any, dict, Any]:
    """(stock store, stock runnable, Ayo's store, optimized runnable) of the same chat chain."""
    keys = {"input_messages_key": "question", "history_messages_key": "history"}
    stock_store, stock = with_history(chat_chain(server), **keys)
    fast_store, fast = with_history(chat_chain(server), **keys)
    return stock_store, stock, fast_store, ayo_langchain.optimize(fast)


def session(sid: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"session_id": sid}, **extra}


def tokens(chunks: Any) -> list:
    """A stream's non-empty chunks: Ayo's engine opens a chat stream with an empty chunk as vLLM does;
    the fake server (not vLLM) sends none, so stock has none here."""
    return [c for c in chunks if (c.content if isinstance(c, BaseMessage) else c)]


def messages(store: dict[str, Any]) -> dict[str, list]:
    return {sid: plain(h.messages) for sid, h in store.items()}


def outcome(call: Any) -> tuple:
    try:
        return ("value", plain(call()))
    except Exception as exc:  # noqa: BLE001 - the test compares whatever happens
        return ("error", type(exc), str(exc))


class Runs(BaseCallbackHandler):
    """Every run started: (kind, name, tags, parent run id), in order."""

    def __init__(self) -> None:
        self.runs: dict[Any, tuple] = {}
        self.errors: list[str] = []  # names of the chain runs that ended with an error, in order

    def on_chain_error(self, error: BaseException, **kw: Any) -> None:
        self.errors.append(self.runs[kw["run_id"]][1])

    def _start(self, kind: str, kw: dict) -> None:
        self.runs[kw["run_id"]] = (kind, kw.get("name"), tuple(kw.get("tags") or ()), kw.get("parent_run_id"))

    def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
        self._start("chain", kw)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
        self._start("llm", kw)

    def on_retriever_start(self, serialized: Any, query: Any, **kw: Any) -> None:
        self._start("retriever", kw)

    def tree(self, skip: tuple[str, ...] = ()) -> list[tuple]:
        """(kind, name, tags, parent's name) per run, runs named in ``skip`` left out (their children
        hang under the nearest run kept, as Ayo's composites report no run)."""
        def parent(pid: Any) -> Any:
            while pid in self.runs and self.runs[pid][1] in skip:
                pid = self.runs[pid][3]
            return self.runs[pid][1] if pid in self.runs else None

        return [(kind, name, tags, parent(pid)) for kind, name, tags, pid in self.runs.values() if name not in skip]


# ---- RunnableWithMessageHistory ----------------------------------------------------------
def test_history_is_lowered_and_the_store_matches_stock_after_each_turn(fake_server: Any) -> None:
    stock_store, stock, fast_store, fast = pair(fake_server)
    for turn, question in enumerate(["I am Bob.", "What is my name?", "Say it again."]):
        x = {"question": question}
        assert fast.invoke(x, session("a")) == stock.invoke(x, session("a"))
        assert messages(fast_store) == messages(stock_store)
        assert len(stock_store["a"].messages) == 2 * (turn + 1)
    text = str(fast.explain())
    assert "MessageHistory[RunnableWithMessageHistory]" in text and "LLMCall[ChatOpenAI]" in text
    assert "opaque (0)" in text and "whole chain is one opaque node" not in text
    assert any(n.endswith("history_end") for n in fast.last_graph.nodes)


def test_ainvoke_uses_the_async_history_methods_as_stock(fake_server: Any) -> None:
    stock_store, stock, fast_store, fast = pair(fake_server)

    async def turns(r: Any) -> list:
        return [await r.ainvoke({"question": q}, session("s")) for q in ("Hi, I am Ann.", "Who am I?", "Thanks")]

    assert asyncio.run(turns(fast)) == asyncio.run(turns(stock))
    assert messages(fast_store) == messages(stock_store)


def test_batch_with_different_sessions_and_stream(fake_server: Any) -> None:
    stock_store, stock, fast_store, fast = pair(fake_server)
    inputs = [{"question": q} for q in ("I like json.", "I like regex.", "I like paths.")]
    configs = [session(s) for s in ("one", "two", "three")]
    for _turn in range(2):
        assert fast.batch(inputs, configs) == stock.batch(inputs, configs)
        assert messages(fast_store) == messages(stock_store)

    async def abatch(r: Any) -> list:
        return await r.abatch(inputs, configs)

    assert asyncio.run(abatch(fast)) == asyncio.run(abatch(stock))
    assert messages(fast_store) == messages(stock_store)
    x = {"question": "What do I like?"}
    want, got = list(stock.stream(x, session("two"))), list(fast.stream(x, session("two")))
    assert tokens(got) == tokens(want) and concat(got) == concat(want)
    assert messages(fast_store) == messages(stock_store)


def test_run_tree_matches_stock(fake_server: Any) -> None:
    _, stock, _, fast = pair(fake_server)
    stock_runs, fast_runs = Runs(), Runs()
    x = {"question": "Hello"}
    stock.invoke(x, session("t", callbacks=[stock_runs]))
    fast.invoke(x, session("t", callbacks=[fast_runs]))
    # every run, the composites Ayo splits into nodes (the insert_history assign, its parallel) among them
    assert fast_runs.tree() == stock_runs.tree()
    names = [name for _, name, _, _ in fast_runs.tree()]
    assert names[:3] == ["RunnableWithMessageHistory", "insert_history", "RunnableParallel<history>"]


def test_stream_and_astream_run_the_chain_on_ayo_with_stocks_history_writes(fake_server: Any) -> None:
    stock_store, stock, fast_store, fast = pair(fake_server)
    for q in ("I like json.", "What do I like?"):
        want, got = list(stock.stream({"question": q}, session("s"))), list(fast.stream({"question": q}, session("s")))
        assert tokens(got) == tokens(want) and len(tokens(got)) > 1  # token by token, as stock
        assert messages(fast_store) == messages(stock_store)
    assert fast.last_trace is not None and fast.last_trace.engine_calls  # the chain's model call ran on Ayo's engine

    async def astream(r: Any, q: str) -> list:
        return [c async for c in r.astream({"question": q}, session("a"))]

    for q in ("I like regex.", "And what else?"):
        assert tokens(asyncio.run(astream(fast, q))) == tokens(asyncio.run(astream(stock, q)))
        assert messages(fast_store) == messages(stock_store)


def test_stream_run_tree_and_a_binding_around_the_history_match_stock(fake_server: Any) -> None:
    _, stock, _, fast = pair(fake_server)
    stock_runs, fast_runs = Runs(), Runs()
    bound_stock = stock.with_config(tags=["outer"], run_name="chat")
    bound_fast = ayo_langchain.optimize(fast.wrapped.with_config(tags=["outer"], run_name="chat"))
    x = {"question": "Hello"}
    assert tokens(bound_fast.stream(x, session("t", callbacks=[fast_runs]))) == tokens(
        bound_stock.stream(x, session("t", callbacks=[stock_runs])))
    # stock's own stream opens the runnable's runs (its load steps included); the chain's come from Ayo
    assert fast_runs.tree() == stock_runs.tree()
    assert fast_runs.tree()[0][:3] == ("chain", "chat", ("outer",))


def test_history_around_a_bare_model(fake_server: Any) -> None:
    stock_store, stock = with_history(fake_chat(fake_server))
    fast_store, inner = with_history(fake_chat(fake_server))
    fast = ayo_langchain.optimize(inner)
    for x in ("Hello there", [HumanMessage("How are you?")], "Bye"):
        assert plain(fast.invoke(x, session("m"))) == plain(stock.invoke(x, session("m")))
        assert messages(fast_store) == messages(stock_store)
    assert "LLMCall[ChatOpenAI]" in str(fast.explain())


def test_history_around_a_routing_function(fake_server: Any) -> None:
    from langchain_core.runnables import RunnableLambda

    def route(x: dict) -> Any:
        return chat_chain(fake_server) if "?" in x["question"] else RunnableLambda(lambda _: "Noted.")

    keys = {"input_messages_key": "question", "history_messages_key": "history"}
    stock_store, stock = with_history(RunnableLambda(route), **keys)
    fast_store, inner = with_history(RunnableLambda(route), **keys)
    fast = ayo_langchain.optimize(inner)
    for q in ("I am Kim.", "Who am I?"):
        assert fast.invoke({"question": q}, session("k")) == stock.invoke({"question": q}, session("k"))
        assert messages(fast_store) == messages(stock_store)


def test_missing_session_id_raises_stock_error(fake_server: Any) -> None:
    _, stock, _, fast = pair(fake_server)
    x = {"question": "hi"}
    stock_error, fast_error = outcome(lambda: stock.invoke(x)), outcome(lambda: fast.invoke(x))
    assert stock_error[0] == "error" and fast_error == stock_error
    assert outcome(lambda: fast.batch([x, x])) == outcome(lambda: stock.batch([x, x])) == stock_error
    # known difference: stock merges every input's config before its batch starts, so even
    # return_exceptions=True raises; Ayo returns the error in that input's place
    assert outcome(lambda: fast.batch([x], return_exceptions=True))[1][0].args == stock_error[2:]


def test_an_error_in_the_chain_is_stocks_and_writes_no_history(fake_server: Any) -> None:
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question} {missing}")])
    keys = {"input_messages_key": "question", "history_messages_key": "history"}
    stock_store, stock = with_history(prompt | fake_chat(fake_server), **keys)
    fast_store, inner = with_history(prompt | fake_chat(fake_server), **keys)
    fast = ayo_langchain.optimize(inner)
    stock_runs, fast_runs = Runs(), Runs()
    want = outcome(lambda: stock.invoke({"question": "hi"}, session("e", callbacks=[stock_runs])))
    assert want[0] == "error" and want[1] is KeyError
    assert outcome(lambda: fast.invoke({"question": "hi"}, session("e", callbacks=[fast_runs]))) == want
    assert messages(fast_store) == messages(stock_store) == {"e": []}
    # the runs around the failure end with the error, innermost first, as in stock
    assert fast_runs.errors == stock_runs.errors
    assert fast_runs.errors[-3:] == ["RunnableSequence", "check_sync_or_async", "RunnableWithMessageHistory"]


def test_history_inside_a_chain_and_custom_session_keys(fake_server: Any) -> None:
    from langchain_core.runnables import ConfigurableFieldSpec, RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    def make(store: dict) -> Any:
        specs = [ConfigurableFieldSpec(id=k, annotation=str, is_shared=True) for k in ("user_id", "conversation_id")]
        return RunnableWithMessageHistory(
            chat_chain(fake_server),
            lambda user_id, conversation_id: store.setdefault((user_id, conversation_id), InMemoryChatMessageHistory()),
            input_messages_key="question", history_messages_key="history", history_factory_config=specs) \
            | RunnableLambda(str.upper)

    stock_store, fast_store = {}, {}
    stock, fast = make(stock_store), ayo_langchain.optimize(make(fast_store))
    cfg = {"configurable": {"user_id": "u1", "conversation_id": "c1"}}
    for q in ("I am Zoe.", "Who am I?"):
        assert fast.invoke({"question": q}, cfg) == stock.invoke({"question": q}, cfg)
        assert messages(fast_store) == messages(stock_store)
    assert "MessageHistory[RunnableWithMessageHistory]" in str(fast.explain())
    bad = {"configurable": {"user_id": "u1"}}
    assert outcome(lambda: fast.invoke({"question": "x"}, bad)) == outcome(lambda: stock.invoke({"question": "x"}, bad))


def _history_shapes(server: Any) -> dict[str, Any]:
    """``name -> (make(store) -> runnable, inputs, config)``: the shapes users wrap in a history."""
    from langchain_core.runnables import ConfigurableFieldSpec, RunnableLambda, RunnablePassthrough
    from langchain_core.runnables.history import RunnableWithMessageHistory

    def factory(store: dict) -> Any:
        return lambda session_id: store.setdefault(session_id, InMemoryChatMessageHistory())

    def route(x: dict) -> Any:
        return chat_chain(server) if "?" in x["question"] else RunnableLambda(lambda _: "Noted.")

    keys = {"input_messages_key": "question", "history_messages_key": "history"}
    specs = [ConfigurableFieldSpec(id=k, annotation=str, is_shared=True) for k in ("user_id", "conversation_id")]
    return {
        "bare model": (lambda st: RunnableWithMessageHistory(fake_chat(server), factory(st)),
                       ["Hello there", "Bye"], session("m")),
        "routing function": (lambda st: RunnableWithMessageHistory(RunnableLambda(route), factory(st), **keys),
                             [{"question": "I am Kim."}, {"question": "Who am I?"}], session("k")),
        "custom session keys": (
            lambda st: RunnableWithMessageHistory(
                chat_chain(server), lambda user_id, conversation_id: st.setdefault(
                    (user_id, conversation_id), InMemoryChatMessageHistory()), history_factory_config=specs, **keys),
            [{"question": "I am Zoe."}, {"question": "Who am I?"}],
            {"configurable": {"user_id": "u1", "conversation_id": "c1"}}),
        "dict output": (
            lambda st: RunnableWithMessageHistory(
                RunnablePassthrough.assign(answer=chat_chain(server)), factory(st), output_messages_key="answer",
                **keys),
            [{"question": "I like json."}, {"question": "What do I like?"}], session("d")),
        "missing session": (lambda st: RunnableWithMessageHistory(chat_chain(server), factory(st), **keys),
                            [{"question": "hi"}], {}),
    }


@pytest.mark.parametrize("shape", ["bare model", "routing function", "custom session keys", "dict output",
                                   "missing session"])
def test_streams_of_history_shapes_match_stock(fake_server: Any, shape: str) -> None:
    make, inputs, cfg = _history_shapes(fake_server)[shape]
    stock_store, fast_store = {}, {}
    stock, fast = make(stock_store), ayo_langchain.optimize(make(fast_store))

    def streamed(r: Any, x: Any) -> tuple:
        try:
            return ("value", plain(tokens(r.stream(x, cfg))))
        except Exception as exc:  # noqa: BLE001 - compared with stock's
            return ("error", type(exc), str(exc))

    async def astreamed(r: Any, x: Any) -> tuple:
        try:
            return ("value", plain(tokens([c async for c in r.astream(x, cfg)])))
        except Exception as exc:  # noqa: BLE001 - compared with stock's
            return ("error", type(exc), str(exc))

    for x in inputs:
        assert streamed(fast, x) == streamed(stock, x)
        assert messages(fast_store) == messages(stock_store)
        assert asyncio.run(astreamed(fast, x)) == asyncio.run(astreamed(stock, x))
        assert messages(fast_store) == messages(stock_store)


class BrokenStore(BaseChatMessageHistory):
    """A history store that fails on reading or on writing."""

    def __init__(self, fail: str) -> None:
        self.fail, self.kept = fail, []

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        if self.fail == "read":
            raise ConnectionError("history store unreachable")
        return list(self.kept)

    def add_messages(self, messages: Any) -> None:
        if self.fail == "write":
            raise PermissionError("history store is read-only")
        self.kept.extend(messages)

    def clear(self) -> None:
        self.kept = []


@pytest.mark.parametrize("fail", ["read", "write"])
def test_a_history_store_that_raises(fake_server: Any, fail: str) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    keys = {"input_messages_key": "question", "history_messages_key": "history"}
    stores = {"stock": BrokenStore(fail), "fast": BrokenStore(fail)}
    stock = RunnableWithMessageHistory(chat_chain(fake_server), lambda sid: stores["stock"], **keys)
    fast = ayo_langchain.optimize(RunnableWithMessageHistory(chat_chain(fake_server), lambda sid: stores["fast"], **keys))
    x = {"question": "hello"}
    want = outcome(lambda: stock.invoke(x, session("b")))
    assert outcome(lambda: fast.invoke(x, session("b"))) == want
    assert stores["fast"].kept == stores["stock"].kept

    async def acall(r: Any) -> Any:
        return await r.ainvoke(x, session("b"))

    assert outcome(lambda: asyncio.run(acall(fast))) == outcome(lambda: asyncio.run(acall(stock)))
    if fail == "read":
        assert want[0] == "error" and want[1] is ConnectionError


def test_a_users_subclass_runs_as_their_object(fake_server: Any) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    class AuditedHistory(RunnableWithMessageHistory):
        pass

    stores: dict[str, dict] = {"stock": {}, "fast": {}}

    def make(side: str) -> Any:
        return AuditedHistory(chat_chain(fake_server),
                              lambda sid: stores[side].setdefault(sid, InMemoryChatMessageHistory()),
                              input_messages_key="question", history_messages_key="history")

    stock, fast = make("stock"), ayo_langchain.optimize(make("fast"))
    for q in ("I am Eve.", "Who am I?"):
        assert fast.invoke({"question": q}, session("u")) == stock.invoke({"question": q}, session("u"))
    assert messages(stores["fast"]) == messages(stores["stock"])
    text = str(fast.explain())
    assert "AuditedHistory subclasses RunnableWithMessageHistory" in text and "one opaque node" in text


# ---- create_history_aware_retriever -------------------------------------------------------
REPHRASE = ChatPromptTemplate.from_messages([MessagesPlaceholder("chat_history"), ("human", "{input}"),
                                             ("human", "Write a search query for the question above.")])
ANSWER = ChatPromptTemplate.from_messages([("system", "Answer from the context:\n{context}"),
                                           MessagesPlaceholder("chat_history"), ("human", "{input}")])
# the history before the documents: all of it is known while the rephrase decodes
ANSWER_HISTORY_FIRST = ChatPromptTemplate.from_messages([
    ("system", "You answer questions about the Python standard library."), MessagesPlaceholder("chat_history"),
    ("human", "Context:\n{context}\n\nQuestion: {input}")])
HISTORY = [("human", "What is json?"), ("ai", "A data format.")]


def history_aware(server: Any, vectorstore: Any) -> Any:
    from langchain_classic.chains import create_history_aware_retriever

    return create_history_aware_retriever(fake_chat(server), vectorstore.as_retriever(search_kwargs={"k": 2}),
                                          REPHRASE)


def retrieval_chain(server: Any, vectorstore: Any, answer: Any = ANSWER) -> Any:
    from langchain_classic.chains import create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    return create_retrieval_chain(history_aware(server, vectorstore), create_stuff_documents_chain(fake_chat(server),
                                                                                                   answer))


def test_history_aware_retriever_alone(fake_server: Any, vectorstore: Any) -> None:
    stock, fast = history_aware(fake_server, vectorstore), ayo_langchain.optimize(history_aware(fake_server,
                                                                                                 vectorstore))
    for x in ({"input": "How do I parse it?", "chat_history": HISTORY}, {"input": "How do I join paths?"},
              {"input": "And the reverse?", "chat_history": []}):
        assert plain(fast.invoke(x)) == plain(stock.invoke(x))
    text = str(fast.explain())
    assert "HistoryAwareRetrieval[RunnableBranch]" in text
    assert "Retrieval[VectorStoreRetriever]" in text and "LLMCall[ChatOpenAI]" in text


def test_retrieval_chain_warms_the_answer_prompt_while_the_rephrase_decodes(fake_server: Any,
                                                                            vectorstore: Any) -> None:
    stock, fast = retrieval_chain(fake_server, vectorstore), ayo_langchain.optimize(retrieval_chain(fake_server,
                                                                                                     vectorstore))
    x = {"input": "How do I parse it?", "chat_history": HISTORY}
    assert plain(fast.invoke(x)) == plain(stock.invoke(x))
    explained = fast.explain()
    assert explained.fired("history_prefill")
    warm = [n for n in fast.last_graph.nodes if n.endswith("answer_warmup")]
    assert warm and fast.last_graph.nodes[warm[0]].inputs == {"base": fast.last_graph.nodes[warm[0]].inputs["base"]}
    stock_runs, fast_runs = Runs(), Runs()
    stock.invoke(x, {"callbacks": [stock_runs]})
    fast.invoke(x, {"callbacks": [fast_runs]})
    # stock's tree, the composites Ayo splits (assigns, parallels, nested sequences) included: the
    # branch's run, its condition and the chosen arm's leaves under it, the answer's leaves, same tags
    assert fast_runs.tree() == stock_runs.tree()
    assert ("chain", "RunnableLambda", ("condition:1",), "retrieve_documents") in fast_runs.tree()


def test_the_warm_up_prefills_a_token_prefix_of_the_final_answer_request(fake_server: Any,
                                                                          vectorstore: Any) -> None:
    """Where the device rule allows (the fake server is not known to be a CPU server), the warm-up
    sends a prefill of exactly a token prefix of the answer request (the fake tokenizer: one token per
    character of the JSON-encoded messages), holding the system prompt, the history and the question;
    without history (stock skips the rephrase) it sends none."""
    import json

    chain = retrieval_chain(fake_server, vectorstore, ANSWER_HISTORY_FIRST)
    fast = ayo_langchain.optimize(chain, min_prefill_tokens=8)
    for x, warms in (({"input": "How do I parse it?", "chat_history": HISTORY}, True), ({"input": "json?", "chat_history": []}, False)):
        fake_server.requests.clear()
        assert plain(fast.invoke(x)) == plain(chain.invoke(x))
        finals = [json.dumps(r["messages"]) for r in fake_server.requests
                  if r["path"].endswith("/chat/completions") and "Context:" in json.dumps(r["messages"])]
        warmups = ["".join(map(chr, r["prompt"])) for r in fake_server.requests
                   if r["path"].endswith("/completions") and r.get("max_tokens") == 1 and isinstance(r.get("prompt"),
                                                                                                   list)]
        assert len(finals) == 2 and finals[0] == finals[1]  # Ayo's answer request is stock's
        if not warms:
            assert warmups == []
            continue
        assert len(warmups) == 1 and finals[0].startswith(warmups[0])
        assert "A data format." in warmups[0] and "How do I parse it?" not in warmups[0]  # history, not the rest


def test_conversational_rag_with_history_offline(fake_server: Any, vectorstore: Any) -> None:
    keys = {"input_messages_key": "input", "history_messages_key": "chat_history", "output_messages_key": "answer"}
    stock_store, stock = with_history(retrieval_chain(fake_server, vectorstore), **keys)
    fast_store, inner = with_history(retrieval_chain(fake_server, vectorstore), **keys)
    fast = ayo_langchain.optimize(inner)
    for q in ("What does json.dumps do?", "And how do I read it back?", "Which module was that?"):
        assert plain(fast.invoke({"input": q}, session("r"))) == plain(stock.invoke({"input": q}, session("r")))
        assert messages(fast_store) == messages(stock_store)
    assert "HistoryAwareRetrieval" in str(fast.explain())


# ---- legacy chains -------------------------------------------------------------------------
def test_agent_executor_stays_the_users_object_with_a_reason() -> None:
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.language_models import FakeListLLM
    from langchain_core.prompts import PromptTemplate
    from langchain_core.tools import Tool

    def agent() -> Any:
        prompt = PromptTemplate.from_template("Tools: {tools} ({tool_names})\nQuestion: {input}\n{agent_scratchpad}")
        llm = FakeListLLM(responses=["Thought: add\nAction: calc\nAction Input: 2+2", "Final Answer: 4"])
        tools = [Tool(name="calc", func=lambda e: "4", description="arithmetic")]
        return AgentExecutor(agent=create_react_agent(llm, tools, prompt), tools=tools, max_iterations=3)

    fast = ayo_langchain.optimize(agent())
    assert fast.invoke({"input": "2+2?"}) == agent().invoke({"input": "2+2?"})
    text = str(fast.explain())
    assert "legacy AgentExecutor (langchain_classic)" in text and "whole chain is one opaque node" in text
