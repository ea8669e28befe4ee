"""Chat history on the real server: 3-turn conversations, stock vs optimized.

Two patterns as users write them, each on five conversations of three turns (one session
each, all sessions of a turn in one ``batch`` with different session ids):

* a chat chain with memory: ``RunnableWithMessageHistory(prompt | ChatOpenAI | StrOutputParser())``,
  64-token answers;
* conversational RAG: ``RunnableWithMessageHistory(create_retrieval_chain(
  create_history_aware_retriever(llm, retriever, rephrase_prompt), create_stuff_documents_chain(llm,
  qa_prompt)))`` (turn 1 retrieves the question, later turns rephrase it with the history first).

After every turn the answers and every session's stored messages must be identical; then
one more session runs its turns through ``invoke``, ``ainvoke`` and ``stream``.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from lc_helpers import MODEL, concat, plain

import ayo_langchain

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]
warnings.filterwarnings("ignore", message=".*RunnableWithMessageHistory is deprecated.*")

CONVERSATIONS = [
    ["What does json.dumps do?", "And how do I read it back?", "Which module were we talking about?"],
    ["How do I join file paths in Python?", "Does it work on Windows too?", "Repeat the function name."],
    ["How can I count hashable objects?", "Is it a dict subclass?", "Summarize our conversation."],
    ["How do I parse command line arguments?", "How do I add an option?", "What did I ask first?"],
    ["How do I compute a SHA-256 digest?", "Of a string or of bytes?", "Name the module again."],
]


def chat_model(url: str, max_tokens: int) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens)


def with_history(chain: Any, **keys: str) -> tuple[dict[str, Any], Any]:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    store: dict[str, Any] = {}
    return store, RunnableWithMessageHistory(
        chain, lambda session_id: store.setdefault(session_id, InMemoryChatMessageHistory()), **keys)


def chat_with_memory(url: str) -> tuple[dict, Any]:
    prompt = ChatPromptTemplate.from_messages([("system", "You are a helpful Python tutor."),
                                               MessagesPlaceholder("history"), ("human", "{question}")])
    return with_history(prompt | chat_model(url, 64) | StrOutputParser(), input_messages_key="question",
                        history_messages_key="history")


def conversational_rag(url: str, vectorstore: Any) -> tuple[dict, Any]:
    from langchain_classic.chains import create_history_aware_retriever, create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    rephrase = ChatPromptTemplate.from_messages([
        MessagesPlaceholder("chat_history"), ("human", "{input}"),
        ("human", "Given the conversation above, write a search query for the last question.")])
    qa = ChatPromptTemplate.from_messages([("system", "Answer the question using this context:\n\n{context}"),
                                           MessagesPlaceholder("chat_history"), ("human", "{input}")])
    retriever = create_history_aware_retriever(chat_model(url, 24), vectorstore.as_retriever(search_kwargs={"k": 2}),
                                               rephrase)
    chain = create_retrieval_chain(retriever, create_stuff_documents_chain(chat_model(url, 40), qa))
    return with_history(chain, input_messages_key="input", history_messages_key="chat_history",
                        output_messages_key="answer")


def stored(store: dict[str, Any]) -> dict[str, list]:
    return {sid: plain(h.messages) for sid, h in store.items()}


def run_conversations(stock: Any, fast: Any, stock_store: dict, fast_store: dict, key: str) -> list[list]:
    """Every turn of every conversation as one batch of sessions; returns the answers per turn."""
    configs = [{"configurable": {"session_id": f"s{i}"}} for i in range(len(CONVERSATIONS))]
    answers = []
    for turn in range(3):
        inputs = [{key: conversation[turn]} for conversation in CONVERSATIONS]
        want = plain(stock.batch(inputs, configs))
        got = plain(fast.batch(inputs, configs))
        assert got == want, f"turn {turn + 1}"
        assert stored(fast_store) == stored(stock_store), f"stores after turn {turn + 1}"
        answers.append(got)
    assert all(len(h.messages) == 6 for h in fast_store.values())
    return answers


@pytest.mark.long  # the default suite's chat with memory: test_lc_long_answers.py (two turns, 64 tokens)
def test_chat_with_memory_three_turns(llm_url: str) -> None:
    stock_store, stock = chat_with_memory(llm_url)
    fast_store, inner = chat_with_memory(llm_url)
    fast = ayo_langchain.optimize(inner)
    answers = run_conversations(stock, fast, stock_store, fast_store, "question")
    assert sum(len(a.split()) >= 30 for turn in answers for a in turn) >= 5  # long answers, not stubs
    assert "MessageHistory[RunnableWithMessageHistory]" in str(fast.explain())


def test_conversational_rag_three_turns(llm_url: str, vectorstore: Any) -> None:
    stock_store, stock = conversational_rag(llm_url, vectorstore)
    fast_store, inner = conversational_rag(llm_url, vectorstore)
    fast = ayo_langchain.optimize(inner)
    answers = run_conversations(stock, fast, stock_store, fast_store, "input")
    assert all(a["context"] for turn in answers for a in turn)
    text = str(fast.explain())
    assert "HistoryAwareRetrieval" in text and "opaque (0)" in text
    # turn 3 rephrased: the graph grew by the rephrase arm, a decode then embed + search on the engines
    grown = [(s.node.rsplit("/", 1)[-1].split(".")[-1], s.op) for s in fast.last_trace.nodes if "/" in s.node]
    assert ("llm", "decode") in grown and ("embed", "embed") in grown and ("search", "search") in grown, grown


def test_invoke_ainvoke_stream_turns(llm_url: str, vectorstore: Any) -> None:
    stock_store, stock = conversational_rag(llm_url, vectorstore)
    fast_store, inner = conversational_rag(llm_url, vectorstore)
    fast = ayo_langchain.optimize(inner)
    cfg = {"configurable": {"session_id": "calls"}}
    q1, q2, q3 = CONVERSATIONS[0]
    assert plain(fast.invoke({"input": q1}, cfg)) == plain(stock.invoke({"input": q1}, cfg))

    async def acall(r: Any) -> Any:
        return await r.ainvoke({"input": q2}, cfg)

    assert plain(asyncio.run(acall(fast))) == plain(asyncio.run(acall(stock)))
    assert stored(fast_store) == stored(stock_store)
    want, got = list(stock.stream({"input": q3}, cfg)), list(fast.stream({"input": q3}, cfg))
    assert plain(concat(got)) == plain(concat(want))
    assert stored(fast_store) == stored(stock_store)
    # the stream ran the chain on Ayo (stock's history stream around it): the answer streamed from its engine
    assert len([c for c in got if c.get("answer")]) > 5
    assert {"chat", "aembed"} <= {c.method for c in fast.last_trace.engine_calls}
    assert len(fast_store["calls"].messages) == 6
