"""``RunnableEach`` / ``.map()`` inside a chain on the real server: identical outputs (invoke, batch, stream),
every element's decode in flight together."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from lc_helpers import MODEL, check_equivalent

import ayo_langchain

pytestmark = [pytest.mark.llm, pytest.mark.timeout(900)]
PROMPT = ChatPromptTemplate.from_messages([("human", "Explain in two sentences: {topic}")])
TOPICS = ["json serialization", "path joining", "sorted lists"]


def chat(url: str, max_tokens: int = 64, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=kw.pop("model", MODEL), base_url=url, api_key="none", temperature=0,
                      max_tokens=max_tokens, **kw)


def split(text: str) -> list[dict[str, str]]:
    return [{"topic": t.strip()} for t in text.split(",")]


def test_map_in_a_chain(llm_url: str) -> None:
    explain_each = (PROMPT | chat(llm_url) | StrOutputParser()).map()
    chain = RunnableLambda(split) | explain_each | RunnableLambda(lambda answers: "\n\n".join(answers))
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [", ".join(TOPICS)])
    fast.invoke(", ".join(TOPICS))
    calls = [c for c in fast.last_trace.engine_calls if c.engine == "llm"]
    assert len(calls) == 3 and max(c.start for c in calls) < min(c.end for c in calls)  # all elements at once
    text = fast.explain()
    assert "Map" in text and "opaque (0)" in text


def test_map_over_an_empty_list(llm_url: str) -> None:
    chain = RunnableLambda(lambda _: []) | (PROMPT | chat(llm_url) | StrOutputParser()).map()
    fast = ayo_langchain.optimize(chain)
    assert fast.invoke("x") == chain.invoke("x") == []


def test_server_rejection_raises_the_sdks_error(llm_url: str) -> None:
    chain = RunnableLambda(split) | (PROMPT | chat(llm_url, model="no-such-model", max_retries=0)).map()
    with pytest.raises(openai.NotFoundError) as stock_error:
        chain.invoke(", ".join(TOPICS))
    with pytest.raises(openai.NotFoundError) as fast_error:
        ayo_langchain.optimize(chain).invoke(", ".join(TOPICS))
    assert str(fast_error.value) == str(stock_error.value)
