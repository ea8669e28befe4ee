"""explain() of an optimized chain is the core's structured Explanation; prefill optimizations are listed."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from lc_helpers import fake_chat, format_docs

import ayo_langchain
from ayo_core.explain import Explanation

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You answer questions about the Python standard library from the context given. " * 2),
    ("human", "Question: {question}\nContext: {context}\nAnswer:"),
])


def test_explanation_lists_opaque_models_and_the_last_graph(fake_server: Any, vectorstore: Any) -> None:
    chain = ({"context": vectorstore.as_retriever() | format_docs, "question": RunnablePassthrough()}
             | PROMPT | FakeListChatModel(responses=["fine"]) | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    ex = fast.explain()
    assert isinstance(ex, Explanation) and ex.nodes == [] and ex.trace is None  # no query yet
    assert [o.name for o in ex.opaque] == ["FakeListChatModel"] and "ChatOpenAI" in ex.opaque[0].reason
    lowered = {m.name: m.template for m in ex.modules}
    assert {"ChatPromptTemplate", "VectorStoreRetriever", "StrOutputParser"} <= set(lowered)
    assert "FakeListChatModel" not in lowered and all(lowered.values())
    fast.invoke("json?")
    ex = fast.explain()
    assert ex.trace is not None and ex.trace["status"] == "done"
    assert ex.passes and ex.nodes and "search" in ex.ops


def test_prefill_optimizations_are_recorded_with_their_engine_calls(fake_server: Any, vectorstore: Any) -> None:
    from langchain_classic.retrievers import MultiQueryRetriever

    llm = fake_chat(fake_server)
    mq = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}), llm=llm)
    chain = {"context": mq | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain, min_prefill_tokens=8)
    fake_server.stream_delay = 0.05  # the query generation takes a while, as a real decode does
    assert fast.invoke("How do I serialize to JSON?") == chain.invoke("How do I serialize to JSON?")
    ex = fast.explain()
    (split,) = ex.fired("prefill_splitting")
    (progressive,) = ex.fired("progressive_prefill")
    assert ex.node(split.node).op == ex.node(progressive.node).op == "partial_prefill"
    assert split.engine_calls is not None and progressive.engine_calls is not None
    assert split.engine_calls + progressive.engine_calls >= 2  # tokenize + prefill requests were sent
    assert "progressive_prefill at" in str(ex)
