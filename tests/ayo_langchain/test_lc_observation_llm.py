"""Every observation API against stock's, for each pattern the adapter lowers, on the real vLLM server
(issue 30 items 1 and 3's matrix): what a tracer builds (LangChain's ``BaseTracer``: every callback
hook with its run id and parent, inputs, outputs with ``usage_metadata``, tags, metadata, errors and
the per-token ``new_token`` events) under ``invoke``, ``ainvoke`` and ``stream``; ``astream_events``
run by run (v2 for every pattern, v1 for two); and ``astream_log``'s final state. In the default suite:
the tracer under ``stream`` and ``astream_events`` v2 for the first twelve patterns; the rest, and every
API for the other shapes the adapter lowers (a ``RunnableBranch``, ``.map()``, an ``EnsembleRetriever``, a
history-aware retriever, an ``LLMChainFilter``, a model ``with_fallbacks``, a text-completion model:
``MORE_PATTERNS``), with ``make test-long``.

The offline suites (``test_tracer_runs.py``, ``test_event_stream.py``) check the same APIs on more
shapes against a fake server whose stream cuts are fixed; here the answers are the real model's, so
a difference late in a decode, in the server's stream or in a real retriever's runs shows. Each
pattern's chains are built for each call, a fresh pair per API, so one API's run cannot warm or feed
another's. The comparison rules (what is random in stock too, what is an order of timing) are those of
the offline suites, and named where they are applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableParallel, RunnablePassthrough
from langchain_core.runnables.history import RunnableWithMessageHistory

import ayo_langchain
from tests.ayo_langchain import test_event_stream as shapes
from tests.ayo_langchain.lc_helpers import format_docs
from tests.ayo_langchain.test_event_stream import _log_state, _plain, assert_same_runs
from tests.ayo_langchain.test_lc_long_answers import PATTERNS, chat
from tests.ayo_langchain.test_tracer_runs import traced

pytestmark = [pytest.mark.llm, pytest.mark.timeout(600)]
TOKENS = 48  # long enough for the model's answer to run on past its first sentence; the 64-256-token suites: test_lc_long_answers.py
QUESTION = "How do I serialize a Python object to JSON?"

Build = Callable[[str, Any], tuple[Any, Any]]  # (server URL, vector store) -> (chain, input)


def _retrieval(pattern: str) -> Build:
    """A pattern of ``test_lc_long_answers.py`` over the real Chroma store."""
    return lambda url, vs: (PATTERNS[pattern](url, vs, TOKENS), QUESTION)


def _offline_shape(build: Any) -> Build:
    """A chain shape of ``test_event_stream.py`` (its lambdas stand in for a retriever), at the real server."""
    return lambda url, _vs: build(url)


def _with_history(url: str, _vs: Any) -> tuple[Any, Any]:
    prompt = ChatPromptTemplate.from_messages([("system", "You are a helpful Python tutor."),
                                               MessagesPlaceholder("history"), ("human", "{question}")])
    store: dict[str, Any] = {}
    chain = RunnableWithMessageHistory(prompt | chat(url, TOKENS) | StrOutputParser(),
                                       lambda session_id: store.setdefault(session_id, InMemoryChatMessageHistory()),
                                       input_messages_key="question", history_messages_key="history")
    return chain.with_config(configurable={"session_id": "s"}), {"question": QUESTION}


def _sources_beside_answer(url: str, vs: Any) -> tuple[Any, Any]:
    # LangChain's "returning sources" recipe over the real retriever
    answer = shapes.PROMPT | chat(url, TOKENS) | StrOutputParser()
    chain = RunnableParallel({"context": vs.as_retriever(search_kwargs={"k": 2}) | format_docs,
                              "question": RunnablePassthrough()}).assign(answer=answer)
    return chain, QUESTION


def _langgraph(url: str, _vs: Any) -> tuple[Any, Any]:
    return shapes.two_node_graph(url), {"question": QUESTION}


def _agent(url: str, _vs: Any) -> tuple[Any, Any]:
    from tests.ayo_langchain.test_create_agent import QUESTIONS, agents

    return agents(url, TOKENS)["create_agent"], {"messages": [("user", QUESTIONS[1])]}


def _rag_over(url: str, retriever: Any, model: Any = None, prompt: Any = None) -> Any:
    """The RAG chain of the offline shapes over ``retriever`` (and ``model``: the chat model by default)."""
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()} | (prompt or shapes.PROMPT)
            | (model or chat(url, TOKENS)) | StrOutputParser())


def _branch(url: str, vs: Any) -> tuple[Any, Any]:
    from langchain_core.runnables import RunnableBranch

    detailed = shapes.PROMPT | chat(url, TOKENS) | StrOutputParser()
    brief = ChatPromptTemplate.from_messages([("human", "In one sentence: {question}")]) | chat(url, TOKENS) \
        | StrOutputParser()
    branch = RunnableBranch((lambda d: "json" in d["question"].lower(), detailed), brief)
    return {"context": vs.as_retriever(search_kwargs={"k": 2}) | format_docs,
            "question": RunnablePassthrough()} | branch, QUESTION


def _map(url: str, _vs: Any) -> tuple[Any, Any]:
    one = ChatPromptTemplate.from_messages([("human", "Answer briefly: {question}")]) | chat(url, TOKENS) \
        | StrOutputParser()
    return one.map(), [{"question": QUESTION}, {"question": "What does itertools.chain do?"}]


def _ensemble(url: str, vs: Any) -> tuple[Any, Any]:
    from langchain_classic.retrievers import EnsembleRetriever

    ensemble = EnsembleRetriever(retrievers=[vs.as_retriever(search_kwargs={"k": 2}),
                                             vs.as_retriever(search_kwargs={"k": 3})], weights=[0.6, 0.4])
    return _rag_over(url, ensemble), QUESTION


def _history_aware(url: str, vs: Any) -> tuple[Any, Any]:
    from langchain_classic.chains import create_history_aware_retriever, create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain
    from langchain_core.messages import AIMessage, HumanMessage

    rephrase = ChatPromptTemplate.from_messages([MessagesPlaceholder("chat_history"), ("human", "{input}"),
                                                 ("human", "Rewrite the question above as a standalone search query.")])
    qa = ChatPromptTemplate.from_messages([("system", "Answer using this context:\n\n{context}"),
                                           MessagesPlaceholder("chat_history"), ("human", "{input}")])
    retriever = create_history_aware_retriever(chat(url, TOKENS), vs.as_retriever(search_kwargs={"k": 2}), rephrase)
    chain = create_retrieval_chain(retriever, create_stuff_documents_chain(chat(url, TOKENS), qa))
    history = [HumanMessage(QUESTION), AIMessage("Call json.dumps on the object.")]
    return chain, {"input": "And how do I read it back?", "chat_history": history}


def _chain_filter(url: str, vs: Any) -> tuple[Any, Any]:
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import LLMChainFilter

    retriever = ContextualCompressionRetriever(base_compressor=LLMChainFilter.from_llm(chat(url, 8)),
                                               base_retriever=vs.as_retriever(search_kwargs={"k": 3}))
    return _rag_over(url, retriever), QUESTION


def _fallbacks(url: str, vs: Any) -> tuple[Any, Any]:
    model = chat(url, TOKENS).with_fallbacks([chat(url, TOKENS // 2)])
    return _rag_over(url, vs.as_retriever(search_kwargs={"k": 2}), model), QUESTION


def _completion(url: str, vs: Any) -> tuple[Any, Any]:
    from langchain_core.prompts import PromptTemplate
    from langchain_openai import OpenAI

    from tests.ayo_langchain.lc_helpers import MODEL

    model = OpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=TOKENS)
    prompt = PromptTemplate.from_template("Context: {context}\nQuestion: {question}\nAnswer:")
    return _rag_over(url, vs.as_retriever(search_kwargs={"k": 2}), model, prompt), QUESTION


def _agent_calling_a_tool(url: str, _vs: Any) -> tuple[Any, Any]:
    """A ``create_agent`` agent whose first model call must call a tool (``tool_choice="required"`` set by a
    ``wrap_model_call`` middleware, as LangChain's docs force one): this model calls none on its own, so
    without it the matrix sees only the agent's model path. Here the model calls the calculator, with
    arguments its schema rejects, so the tools node answers with the tool's error and the model answers
    again: the whole tool path on the real server (a tool started from the stream: offline,
    ``test_agent_early_tools.py``)."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import ToolMessage

    from tests.ayo_langchain.test_create_agent import calculator, search

    def tool_first(request: Any) -> Any:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return request
        return request.override(tool_choice="required")

    class ToolFirst(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return handler(tool_first(request))

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(tool_first(request))

    agent = create_agent(chat(url, 160), [search, calculator], system_prompt="Use the tools, then answer briefly.",
                         middleware=[ToolFirst()])
    return agent, {"messages": [("user", "What is 12 * 7?")]}


# the other shapes the adapter lowers (docs/modules.md): opt-in (make test-long), CI's time
MORE_PATTERNS: dict[str, Build] = {"create_agent_calling_a_tool": _agent_calling_a_tool, "branch": _branch, "map": _map, "ensemble": _ensemble,
                                   "history_aware_retriever": _history_aware, "chain_filter": _chain_filter,
                                   "fallbacks": _fallbacks, "completion_model": _completion}
MIN_RUNS = {"langgraph": 3, "create_agent": 3, "create_agent_calling_a_tool": 3}  # the runs stock's events have at least (8 by default)
GRAPHS = {"langgraph", "create_agent", "create_agent_calling_a_tool"}
PATTERNS_OBSERVED: dict[str, Build] = {
    **{name: _retrieval(name) for name in PATTERNS},  # rag, multi_query, compression, retrieval_chain
    "history": _with_history,
    "sources_beside_answer": _sources_beside_answer,
    "nested_parallel": _offline_shape(shapes.nested),
    "routing_lambda": _offline_shape(shapes.routing),
    "two_drafts": _offline_shape(shapes.two_drafts),
    "langgraph": _langgraph,
    "create_agent": _agent,  # the session's server speaks tool calls (``tools_llm_url``)
    **MORE_PATTERNS,
}
ALL = [pytest.param(p, marks=pytest.mark.long) if p in MORE_PATTERNS else p for p in sorted(PATTERNS_OBSERVED)]


def _pair(pattern: str, url: str, vs: Any) -> tuple[Any, Any, Any]:
    """Stock's chain, Ayo's (optimized from a second build: no state shared with stock's), and the input."""
    build = PATTERNS_OBSERVED[pattern]
    stock, x = build(url, vs)
    return stock, ayo_langchain.optimize(build(url, vs)[0]), x


LONG = pytest.mark.long  # opt-in (``make test-long``): CI's time; the offline suites run these APIs on every shape


@pytest.mark.parametrize("how", [pytest.param("invoke", marks=LONG), pytest.param("ainvoke", marks=LONG), "stream"])
@pytest.mark.parametrize("pattern", ALL)
def test_tracer_run_tree_is_stocks(pattern: str, how: str, llm_url: str, vectorstore: Any) -> None:
    """Every callback hook as a tracer sees it: the same runs under the same parents, field by field."""
    stock, fast, x = _pair(pattern, llm_url, vectorstore)
    # Runs compared as a multiset of rows: a parallel's branches start in its thread pool in an order of
    # timing, in stock too (the offline tests, whose timing is fixed, compare the start order); a sequence's
    # steps keep their order in their ``seq:step:N`` tags, each run its events' order
    want = sorted(traced(stock, x, how))
    got = sorted(traced(fast, x, how))
    assert got == want, _first_difference(got, want)
    assert any(r[1] == "llm" for r in want)  # the model's run is there (the tracer saw the whole tree)
    if how == "stream" and pattern not in GRAPHS | {"map"}:  # a graph's stream (its updates), .map()'s invoke the model
        assert any("new_token" in r[7] for r in want)  # a streamed chain's model reports its tokens


def _around(text: Any, other: Any) -> str:
    """``text`` from a little before where it first differs from ``other``."""
    text, other = str(text), str(other)
    at = next((i for i, (a, b) in enumerate(zip(text, other, strict=False)) if a != b), min(len(text), len(other)))
    return text[max(0, at - 80):at + 160]


FIELDS = ("path", "type", "tags", "metadata", "inputs", "outputs", "error", "events")


def _first_difference(got: list[tuple], want: list[tuple]) -> str:
    """The first run whose fields differ, field by field (a whole tree does not fit an assertion message)."""
    for g, w in zip(got, want, strict=False):  # a length difference: reported below
        if g != w:
            return "\n".join(f"{w[0]} {name}:\n  got  ...{_around(gf, wf)}\n  want ...{_around(wf, gf)}"
                             for name, gf, wf in zip(FIELDS, g, w, strict=True) if gf != wf)
    return f"{len(got)} runs against stock's {len(want)}"


@pytest.mark.parametrize("pattern", ALL)
def test_astream_events_v2_are_stocks(pattern: str, llm_url: str, vectorstore: Any) -> None:
    if pattern == "map":  # RunnableEach has no astream_events in stock: Ayo's raises the same error
        for chain in _pair(pattern, llm_url, vectorstore)[:2]:
            with pytest.raises(NotImplementedError, match="RunnableEach does not support astream_events yet"):
                asyncio.run(_drain(chain.astream_events([{"question": QUESTION}], version="v2")))
        return
    assert_same_runs(_as_server_build(pattern, vectorstore), llm_url, "v2", min_runs=MIN_RUNS.get(pattern, 8))


@LONG
@pytest.mark.parametrize("pattern", ["rag", "history"])
def test_astream_events_v1_are_stocks(pattern: str, llm_url: str, vectorstore: Any) -> None:
    assert_same_runs(_as_server_build(pattern, vectorstore), llm_url, "v1")


@LONG
@pytest.mark.parametrize("pattern", ALL)
def test_astream_log_is_stocks(pattern: str, llm_url: str, vectorstore: Any) -> None:
    stock, fast, x = _pair(pattern, llm_url, vectorstore)
    want_logs, want_out = asyncio.run(_log_state(stock, x))
    got_logs, got_out = asyncio.run(_log_state(fast, x))
    assert got_out == want_out
    # log keys number runs of one name in start order: timing among concurrent branches (a multiset)
    assert sorted(got_logs.values()) == sorted(want_logs.values())


@LONG
@pytest.mark.parametrize("pattern", ["rag", "history"])
def test_with_listeners_get_stocks_runs(pattern: str, llm_url: str, vectorstore: Any) -> None:
    """``with_listeners`` on the whole chain: the listeners see stock's run (name, inputs, outputs)."""
    def listened(chain: Any, seen: list[tuple]) -> Any:
        def note(kind: str) -> Any:
            return lambda run: seen.append((kind, run.name, _plain(run.inputs), _plain(run.outputs)))

        return chain.with_listeners(on_start=note("start"), on_end=note("end"))

    stock, _fast, x = _pair(pattern, llm_url, vectorstore)
    want: list[tuple] = []
    listened(stock, want).invoke(x)
    got: list[tuple] = []
    ayo_langchain.optimize(listened(PATTERNS_OBSERVED[pattern](llm_url, vectorstore)[0], got)).invoke(x)
    assert got == want and len(want) == 2


async def _drain(events: Any) -> None:
    async for _ in events:
        pass


def _as_server_build(pattern: str, vs: Any) -> Callable[[str], tuple[Any, Any]]:
    """The pattern as ``assert_same_runs`` builds its chains: from the server alone."""
    return lambda url: PATTERNS_OBSERVED[pattern](url, vs)
