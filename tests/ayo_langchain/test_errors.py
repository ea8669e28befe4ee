"""Bad input fails exactly as in stock LangChain (same exception type and message), and never hangs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import JsonOutputParser, StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from lc_helpers import fake_chat, format_docs

import ayo_langchain

pytestmark = pytest.mark.timeout(120)

PROMPT = ChatPromptTemplate.from_messages([("human", "Question: {question}\nContext: {context}")])


class FailingRetriever(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        raise ValueError(f"index offline while searching for {query!r}")


def outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return (type(exc), str(exc))


def same_error(stock: Any, fast: Any, value: Any, batch: bool = True) -> BaseException:
    with pytest.raises(Exception) as want:
        stock.invoke(value)
    with pytest.raises(type(want.value)) as got:
        fast.invoke(value)
    assert str(got.value) == str(want.value)
    with pytest.raises(type(want.value)) as got_async:
        asyncio.run(fast.ainvoke(value))
    assert str(got_async.value) == str(want.value)
    assert outcome(lambda: list(fast.stream(value))) == outcome(lambda: list(stock.stream(value)))
    if batch:
        got_batch = fast.batch([value, value], return_exceptions=True)
        want_batch = stock.batch([value, value], return_exceptions=True)
        assert [(type(e), str(e)) for e in got_batch] == [(type(e), str(e)) for e in want_batch]
    return want.value


def test_input_missing_prompt_variable(fake_server: Any) -> None:
    chain = PROMPT | fake_chat(fake_server) | StrOutputParser()
    err = same_error(chain, ayo_langchain.optimize(chain), {"question": "json?"})
    assert isinstance(err, KeyError)


def test_string_input_to_a_dict_prompt(fake_server: Any) -> None:
    chain = PROMPT | fake_chat(fake_server)
    same_error(chain, ayo_langchain.optimize(chain), "just a string")


def test_dict_input_to_a_vector_retriever(fake_server: Any, vectorstore: Any) -> None:
    chain = ({"context": vectorstore.as_retriever() | format_docs, "question": RunnablePassthrough()}
             | PROMPT | fake_chat(fake_server))
    same_error(chain, ayo_langchain.optimize(chain), {"question": "not a string"})


def test_parser_failing_on_model_text(fake_server: Any) -> None:
    chain = PromptTemplate.from_template("Tell me about {x}") | fake_chat(fake_server) | JsonOutputParser()
    err = same_error(chain, ayo_langchain.optimize(chain), {"x": "paths"}, batch=False)
    assert type(err).__name__ == "OutputParserException"


def test_retriever_that_raises(fake_server: Any) -> None:
    chain = ({"context": FailingRetriever() | format_docs, "question": RunnablePassthrough()}
             | PROMPT | fake_chat(fake_server) | StrOutputParser())
    err = same_error(chain, ayo_langchain.optimize(chain), "json?")
    assert isinstance(err, ValueError)


def test_multi_query_over_a_retriever_that_raises(fake_server: Any) -> None:
    from langchain_classic.retrievers import MultiQueryRetriever

    llm = fake_chat(fake_server)
    mq = MultiQueryRetriever.from_llm(retriever=FailingRetriever(), llm=llm)
    chain = {"context": mq | format_docs, "question": RunnablePassthrough()} | PROMPT | llm
    same_error(chain, ayo_langchain.optimize(chain), "json?")


def test_server_error_is_the_sdk_error(fake_server: Any) -> None:
    """An HTTP error from the server reaches the user as the OpenAI SDK's exception, as in stock."""
    original = fake_server.handle

    def handle(request: httpx.Request) -> httpx.Response:
        if b"REJECT" in request.content:
            return httpx.Response(400, json={"error": {"message": "prompt rejected", "type": "BadRequestError",
                                                       "code": 400}})
        return original(request)

    fake_server.handle = handle
    chain = PromptTemplate.from_template("{q}") | fake_chat(fake_server) | StrOutputParser()
    err = same_error(chain, ayo_langchain.optimize(chain), {"q": "REJECT this"}, batch=False)
    assert "prompt rejected" in str(err)
