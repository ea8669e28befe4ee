"""The optimized chain sends the very request bodies ChatOpenAI / OpenAI send (offline, fake server)."""

from __future__ import annotations

from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from lc_helpers import fake_chat, fake_completion_llm, plain

import ayo_langchain

# transport-level keys: the engine streams when a consumer wants tokens early, and hands vLLM a priority
TRANSPORT = {"path", "stream", "stream_options", "priority"}


def bodies(server: Any) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TRANSPORT} for r in server.completions()]


def run_both(server: Any, chain: Any, inputs: list[Any]) -> tuple[list[dict], list[dict]]:
    fast = ayo_langchain.optimize(chain)
    server.requests.clear()
    stock_out = [plain(chain.invoke(x)) for x in inputs]
    stock_bodies = bodies(server)
    server.requests.clear()
    fast_out = [plain(fast.invoke(x)) for x in inputs]
    assert fast_out == stock_out
    return stock_bodies, bodies(server)


def test_chat_request_is_stock(fake_server: Any) -> None:
    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), ("placeholder", "{history}"),
                                               ("human", "{q}")])
    llm = fake_chat(fake_server, max_tokens=12, temperature=0.3, top_p=0.9, seed=7, stop=["\n\n"],
                    model_kwargs={"frequency_penalty": 0.1}, extra_body={"top_k": 5, "repetition_penalty": 1.1})
    chain = prompt | llm.bind(stop=["END"]) | StrOutputParser()
    inputs = [{"q": "What is json?", "history": [("human", "hi"), ("ai", "hello")]}]
    stock, fast = run_both(fake_server, chain, inputs)
    assert fast == stock
    assert stock[0]["max_completion_tokens"] == 12 and stock[0]["top_k"] == 5 and stock[0]["stop"] == ["END"]


def test_unset_temperature_stays_unset(fake_server: Any) -> None:
    from langchain_openai import ChatOpenAI

    llm = fake_chat(fake_server, temperature=None, max_tokens=None)
    assert isinstance(llm, ChatOpenAI)
    stock, fast = run_both(fake_server, PromptTemplate.from_template("{q}") | llm, [{"q": "x"}])
    assert fast == stock
    assert "temperature" not in fast[0] and "max_tokens" not in fast[0]


def test_completion_request_is_stock(fake_server: Any) -> None:
    llm = fake_completion_llm(fake_server, max_tokens=9, stop=["\n"], logit_bias={"50256": -100})
    chain = PromptTemplate.from_template("Q: {q}\nA:") | llm
    stock, fast = run_both(fake_server, chain, [{"q": "json"}, {"q": "paths"}])
    assert fast == stock


def test_streamed_request_matches_stock_stream(fake_server: Any) -> None:
    llm = fake_chat(fake_server, max_tokens=10)
    chain = PromptTemplate.from_template("{q}") | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    fake_server.requests.clear()
    stock_chunks = list(chain.stream({"q": "stream me"}))
    stock = fake_server.completions()
    fake_server.requests.clear()
    fast_chunks = list(fast.stream({"q": "stream me"}))
    mine = fake_server.completions()
    assert "".join(fast_chunks) == "".join(stock_chunks)
    assert len([c for c in fast_chunks if c]) > 1, "the final model's tokens are streamed, not one chunk"
    keep = lambda r: {k: v for k, v in r.items() if k not in {"priority", "stream_options"}}  # noqa: E731
    assert [keep(r) for r in mine] == [keep(r) for r in stock]


def test_unsupported_request_goes_to_the_original_client(fake_server: Any) -> None:
    """n > 1 is not something the engine serves: the user's own client sends it, unchanged."""
    llm = fake_chat(fake_server, n=2)
    chain = PromptTemplate.from_template("{q}") | llm
    stock, fast = run_both(fake_server, chain, [{"q": "x"}])
    assert fast == stock
