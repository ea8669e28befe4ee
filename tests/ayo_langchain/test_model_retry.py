"""``model.with_retry(...)`` inside a chain: lowered (the model's calls on Ayo's engine), LangChain's own
``RunnableRetry`` kept around them (its runs, its attempts, its exception filter)."""

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
