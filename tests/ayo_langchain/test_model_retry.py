"""``model.with_retry(...)`` and ``model.with_fallbacks([...])`` inside a chain: lowered (the model's calls on
Ayo's engine), LangChain's own ``RunnableRetry`` / ``RunnableWithFallbacks`` kept around them (their runs,
attempts, exception filters; a fallback model called by its own client)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

import ayo_langchain
from tests.ayo_langchain.lc_helpers import check_equivalent, fake_chat

PROMPT = ChatPromptTemplate.from_template("Say {question}")


class Runs(BaseCallbackHandler):
    def __init__(self) -> None:
        self.runs: list[tuple[str, tuple[str, ...], str | None]] = []
        self.names: dict[UUID, str] = {}

    def _start(self, name: str, run_id: UUID, parent: UUID | None, tags: list[str] | None) -> None:
        self.names[run_id] = name
        self.runs.append((name, tuple(tags or ()), self.names.get(parent) if parent else None))

    def on_chain_start(self, s: Any, i: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       tags: list[str] | None = None, **kw: Any) -> None:
        self._start(kw.get("name") or "", run_id, parent_run_id, tags)

    def on_chat_model_start(self, s: Any, m: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                            tags: list[str] | None = None, **kw: Any) -> None:
        self._start("chat_model", run_id, parent_run_id, tags)


def test_a_retried_model_is_lowered_and_answers_as_stock(fake_server: Any) -> None:
    def chain() -> Any:
        return PROMPT | fake_chat(fake_server).with_retry(stop_after_attempt=2) | StrOutputParser()

    fast = ayo_langchain.optimize(chain())
    check_equivalent(chain(), fast, [{"question": "json"}, {"question": "paths"}])
    assert any(n.op.value == "decode" for n in fast.last_graph), "the model's call is a DECODE on Ayo's engine"
    assert "LLMCall[RunnableRetry]" in str(fast.explain())
    want, got = Runs(), Runs()
    chain().invoke({"question": "json"}, {"callbacks": [want]})
    fast.invoke({"question": "json"}, {"callbacks": [got]})
    assert got.runs == want.runs
    assert ("chat_model", (), "ChatOpenAI") in got.runs  # under the retry's run (named after the model)


def test_a_failed_attempt_is_retried_as_stock(fake_server: Any) -> None:
    # the server refuses the first request of each answer with a 400 (not an engine failure: the model's own
    # error), and RunnableRetry's second attempt gets the answer
    refused: list[int] = []
    handle = fake_server.handle

    def flaky(request: httpx.Request) -> httpx.Response:
        if not refused or refused[-1] == 0:
            refused.append(1)
            return httpx.Response(400, json={"error": {"message": "try again", "type": "BadRequestError"}})
        refused.append(0)
        return handle(request)

    fake_server.handle = flaky

    def chain() -> Any:
        return PROMPT | fake_chat(fake_server).with_retry(stop_after_attempt=2, wait_exponential_jitter=False) | (
            StrOutputParser())

    want_runs, got_runs = Runs(), Runs()
    want = chain().invoke({"question": "json"}, {"callbacks": [want_runs]})
    got = ayo_langchain.optimize(chain()).invoke({"question": "json"}, {"callbacks": [got_runs]})
    assert got == want and refused == [1, 0, 1, 0]
    assert got_runs.runs == want_runs.runs
    assert [r for r in got_runs.runs if r[0] == "chat_model"] == [  # two attempts under the retry's run
        ("chat_model", (), "ChatOpenAI"), ("chat_model", ("retry:attempt:2",), "ChatOpenAI")]


def test_a_model_with_fallbacks_is_lowered_and_falls_back_as_stock(fake_server: Any) -> None:
    def chain() -> Any:
        return PROMPT | fake_chat(fake_server, max_tokens=7).with_fallbacks([fake_chat(fake_server, max_tokens=5)]) | (
            StrOutputParser())

    fast = ayo_langchain.optimize(chain())
    check_equivalent(chain(), fast, [{"question": "json"}])
    assert any(n.op.value == "decode" for n in fast.last_graph)
    want, got = Runs(), Runs()
    chain().invoke({"question": "json"}, {"callbacks": [want]})
    fast.invoke({"question": "json"}, {"callbacks": [got]})
    assert got.runs == want.runs

    # the primary refused (a 400 for its requests): the fallback model answers, in stock and in Ayo
    handle, seen = fake_server.handle, []

    def refuse_primary(request: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(request.content)
        seen.append(body.get("max_completion_tokens") or body.get("max_tokens"))
        if seen[-1] == 7:
            return httpx.Response(400, json={"error": {"message": "no", "type": "BadRequestError"}})
        return handle(request)

    fake_server.handle = refuse_primary
    want_runs, got_runs = Runs(), Runs()
    want_answer = chain().invoke({"question": "json"}, {"callbacks": [want_runs]})
    # (built now: the fake models' transports are bound to the server's handler when they are made)
    got_answer = ayo_langchain.optimize(chain()).invoke({"question": "json"}, {"callbacks": [got_runs]})
    assert got_answer == want_answer and seen == [7, 5, 7, 5]
    assert got_runs.runs == want_runs.runs
