"""Long answers on the real server (issue 30 item 3): each pattern the adapter lowers, stock vs Ayo at
64, 128 and 256 output tokens with ``make test-long``, and in the default suite the plain RAG chain at
256 (marked ``slow``; a greedy 256-token answer holds the shorter ones as its prefix; the other
patterns' 256-token cases left CI's run when it neared its 90 minutes), called
(``invoke``) and streamed (``stream``: every chunk, in order, not only their concatenation; cut where
stock's stream is cut, but for a server's merged events: ``tests/server_streams.py``). A difference
late in a decode or at a stream boundary shows here, where the short-answer suites (16-48 tokens)
cannot see it. A 128-token answer takes this 2-core machine's server about 6 s: one question per
pattern keeps CI's time bounded.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnablePassthrough
from lc_helpers import MODEL, format_docs, plain

import ayo_langchain
from tests.server_streams import assert_same_stream

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]
QUESTION = "Explain in detail how to serialize a Python object to JSON and read it back."
# issue 30 asks for at least 64 tokens (128 where the model writes that much) and asked for 256 per pattern
# in CI; CI's 70 minutes now hold the plain RAG chain at 256, the others run in make test-long
LENGTHS = (64, 128, 256)
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You are an assistant for question-answering tasks. Use the retrieved context to answer."),
    ("human", "Question: {question}\nContext: {context}\nAnswer:"),
])


def chat(url: str, max_tokens: int) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens)


def rag_chain(url: str, vectorstore: Any, tokens: int) -> Any:
    return ({"context": vectorstore.as_retriever(search_kwargs={"k": 2}) | format_docs,
             "question": RunnablePassthrough()} | PROMPT | chat(url, tokens) | StrOutputParser())


def multi_query_chain(url: str, vectorstore: Any, tokens: int) -> Any:
    from langchain_classic.retrievers import MultiQueryRetriever

    mq = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}),
                                      llm=chat(url, 64))
    return {"context": mq | format_docs, "question": RunnablePassthrough()} | PROMPT | chat(url, tokens) \
        | StrOutputParser()


def compressed_rag_chain(url: str, vectorstore: Any, tokens: int) -> Any:
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor

    retriever = ContextualCompressionRetriever(base_compressor=LLMChainExtractor.from_llm(chat(url, 64)),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 2}))
    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | chat(url, tokens) \
        | StrOutputParser()


def retrieval_chain(url: str, vectorstore: Any, tokens: int) -> Any:
    from langchain_classic.chains import create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    qa = ChatPromptTemplate.from_messages([("system", "Answer the question using this context:\n\n{context}"),
                                           ("human", "{input}")])
    chain = create_retrieval_chain(vectorstore.as_retriever(search_kwargs={"k": 2}),
                                   create_stuff_documents_chain(chat(url, tokens), qa))
    return (lambda q: {"input": q}) | chain | (lambda out: out["answer"])


PATTERNS = {"rag": rag_chain, "multi_query": multi_query_chain, "compression": compressed_rag_chain,
            "retrieval_chain": retrieval_chain}


def cases() -> list[Any]:
    """Each pattern at each length; only rag at 256 in the default suite (``slow``), the rest ``long``."""
    return [pytest.param(p, n, id=f"{p}-{n}", marks=pytest.mark.slow if (p, n) == ("rag", 256) else pytest.mark.long)
            for p in sorted(PATTERNS) for n in LENGTHS]


@pytest.mark.parametrize(("pattern", "tokens"), cases())
def test_long_answers_called_and_streamed(llm_url: str, vectorstore: Any, pattern: str, tokens: int) -> None:
    stock = PATTERNS[pattern](llm_url, vectorstore, tokens)
    fast = ayo_langchain.optimize(stock)
    want = plain(stock.invoke(QUESTION))
    assert plain(fast.invoke(QUESTION)) == want
    assert len(want.split()) >= tokens // 3, "the model ended its answer early: pick a question it answers at length"
    stock_chunks = [plain(c) for c in stock.stream(QUESTION)]
    assert_same_stream([plain(c) for c in fast.stream(QUESTION)], stock_chunks)
    assert "".join(stock_chunks) == want


@pytest.mark.parametrize("tokens", [pytest.param(n, marks=pytest.mark.long) for n in LENGTHS])
def test_long_answers_with_history_and_map(llm_url: str, tokens: int) -> None:
    """A chat chain with memory (two turns, the second reading the first long answer back) and ``.map()``."""
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.runnables.history import RunnableWithMessageHistory

    prompt = ChatPromptTemplate.from_messages([("system", "You are a helpful Python tutor."),
                                               MessagesPlaceholder("history"), ("human", "{question}")])
    stores: list[dict[str, Any]] = [{}, {}]

    def chain(store: dict[str, Any]) -> Any:
        return RunnableWithMessageHistory(
            prompt | chat(llm_url, tokens) | StrOutputParser(),
            lambda session_id: store.setdefault(session_id, InMemoryChatMessageHistory()),
            input_messages_key="question", history_messages_key="history")

    stock, fast = chain(stores[0]), ayo_langchain.optimize(chain(stores[1]))
    config = {"configurable": {"session_id": "s"}}
    for turn in (QUESTION, "Now give a complete example program that does both."):
        assert plain(fast.invoke({"question": turn}, config)) == plain(stock.invoke({"question": turn}, config))
    assert plain(stores[1]["s"].messages) == plain(stores[0]["s"].messages)

    mapped = (ChatPromptTemplate.from_template("{question}") | chat(llm_url, tokens) | StrOutputParser()).map()
    inputs = [{"question": QUESTION}, {"question": "Explain in detail how Python's pathlib joins paths."}]
    assert plain(ayo_langchain.optimize(mapped).invoke(inputs)) == plain(mapped.invoke(inputs))
