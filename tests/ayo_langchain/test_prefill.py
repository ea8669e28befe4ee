"""Prefill splitting warms exactly token prefixes of the final request (offline: the fake server's
tokenizer is one token per character of the JSON-encoded messages)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from lc_helpers import fake_chat, format_docs

import ayo_langchain

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You answer questions about the Python standard library from the context given. " * 2),
    ("human", "Question: {question}\nContext: {context}\nAnswer:"),
])


def test_static_and_progressive_prefill_warm_prefixes_of_the_final_request(fake_server: Any,
                                                                            vectorstore: Any) -> None:
    from langchain_classic.retrievers import MultiQueryRetriever

    llm = fake_chat(fake_server)
    mq = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}), llm=llm)
    chain = {"context": mq | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain, min_prefill_tokens=8)
    fake_server.stream_delay = 0.05  # the query generation takes a while, as a real decode does
    fake_server.requests.clear()
    assert fast.invoke("How do I serialize to JSON?") == chain.invoke("How do I serialize to JSON?")
    ops = [n.op.value for n in fast.last_trace.graph]
    assert ops.count("partial_prefill") == 2  # the static part, and the growing context
    # the static part comes from prefill splitting, the growing context from the progressive prefill
    assert {o["name"] for o in fast.last_graph.meta["optimizations"]} == {"prefill_splitting", "progressive_prefill"}
    finals = [r for r in fake_server.requests
              if r["path"].endswith("/chat/completions") and "Context:" in json.dumps(r.get("messages"))]
    final_text = json.dumps(finals[0]["messages"])
    warmups = [r["prompt"] for r in fake_server.requests
               if r["path"].endswith("/completions") and r.get("max_tokens") == 1 and isinstance(r.get("prompt"), list)]
    assert len(warmups) >= 2
    for ids in warmups:
        assert final_text.startswith("".join(map(chr, ids)))
    # the progressive warm-up reached into the retrieved context
    assert max(len(ids) for ids in warmups) > final_text.index("Context:")


def test_no_prefill_when_the_late_input_comes_quickly(fake_server: Any, vectorstore: Any) -> None:
    chain = ({"context": vectorstore.as_retriever() | format_docs, "question": RunnablePassthrough()}
             | PROMPT | fake_chat(fake_server))
    fast = ayo_langchain.optimize(chain)
    fast.invoke("json?")
    assert "partial_prefill" not in [n.op.value for n in fast.last_trace.graph]


def test_async_methods_run_on_the_callers_loop(fake_server: Any) -> None:
    seen: list[Any] = []

    async def where(x: dict) -> dict:
        seen.append(asyncio.get_running_loop())
        return x

    chain = RunnableLambda(where) | PROMPT | fake_chat(fake_server)
    fast = ayo_langchain.optimize(chain)

    async def main() -> Any:
        value = {"question": "q", "context": "c"}
        await fast.ainvoke(value)
        await fast.abatch([value, value])
        _ = [c async for c in fast.astream(value)]
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert seen and all(s is loop for s in seen)
