"""The dispatcher's spans of an optimized chat engine against stock's, per mode and call style: the same
span tree (names, parents, the instrumentation events inside each), as ``test_spans.py`` checks for
query engines. Each call is the first turn of a fresh conversation. Offline: the fake OpenAI server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import QUESTIONS
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_llm
from tests.ayo_llamaindex.test_spans import server, span_tree, traced  # noqa: F401 - fixtures

MODES = ["context", "condense_plus_context", "condense_question"]


def turn(engine: Any, style: str) -> Any:
    def run() -> None:
        engine.reset()
        if style == "chat":
            engine.chat(QUESTIONS[0])
        elif style == "achat":
            asyncio.run(engine.achat(QUESTIONS[0]))
        else:
            list(engine.stream_chat(QUESTIONS[0]).response_gen)
    return run


@pytest.mark.parametrize("style", ["chat", "achat", "stream_chat"])
@pytest.mark.parametrize("mode", MODES)
def test_chat_span_tree_is_stocks(server: Any, traced: Any, mode: str, style: str) -> None:  # noqa: F811
    def build() -> Any:
        return traced.as_chat_engine(chat_mode=mode, llm=make_llm(server.url), similarity_top_k=2)

    want = span_tree(turn(build(), style))
    got = span_tree(turn(ayo_llamaindex.optimize(build()), style))
    assert any(key.split("/")[0].endswith(f".{style}") or f".{style} " in key for key in want)  # stock's spans seen
    assert got == want
