"""The LangChain core pattern, stock vs Ayo, on a second server implementation: ``transformers serve
--continuous-batching`` (no priority, /metrics, /tokenize, prefix-cache reset or ``data: [DONE]``).

The LCEL RAG chain ``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt
| llm | StrOutputParser()``, with ``ChatOpenAI`` pointed at that server, gives the same text in Ayo as
in stock: invoked, batched (requests run together there) and streamed (the same chunks).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnablePassthrough
from lc_helpers import format_docs
from test_llm_equivalence import PROMPT, QUESTIONS, chat

import ayo_langchain

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(600)]
MAX_TOKENS = 32


def rag_chain(url: str, vectorstore: Any) -> Any:
    return ({"context": vectorstore.as_retriever(search_kwargs={"k": 2}) | format_docs,
             "question": RunnablePassthrough()} | PROMPT | chat(url, max_tokens=MAX_TOKENS) | StrOutputParser())


def test_rag_chain(transformers_llm_url: str, vectorstore: Any) -> None:
    stock = rag_chain(transformers_llm_url, vectorstore)
    fast = ayo_langchain.optimize(stock)
    want = stock.invoke(QUESTIONS[0])
    assert want.strip() and fast.invoke(QUESTIONS[0]) == want
    assert fast.batch(QUESTIONS) == stock.batch(QUESTIONS)


def message_view(chunks: list[Any]) -> list[tuple[Any, ...]]:
    """What a user reads of a model's streamed messages (ids and timings differ run to run)."""
    return [(c.content, c.response_metadata.get("finish_reason"), c.usage_metadata) for c in chunks]


def test_rag_chain_streamed(transformers_llm_url: str, vectorstore: Any) -> None:
    stock = rag_chain(transformers_llm_url, vectorstore)
    fast = ayo_langchain.optimize(stock)
    want = list(stock.stream(QUESTIONS[0]))
    assert len(want) > 1 and list(fast.stream(QUESTIONS[0])) == want
    # the model's own chunks too: this server finishes on an empty chunk of its own that carries the usage
    to_model = stock.first | PROMPT | stock.steps[2]
    want_messages = message_view(list(to_model.stream(QUESTIONS[1])))
    assert any(usage for *_, usage in want_messages)
    assert message_view(list(ayo_langchain.optimize(to_model).stream(QUESTIONS[1]))) == want_messages
