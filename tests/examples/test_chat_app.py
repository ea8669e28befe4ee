"""The ``chat`` app: every turn of the optimized conversations equals stock's, the follow-ups really condense.

Needs the vLLM server (``llm_url`` fixture).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ayo_examples import chat
from ayo_examples.common import EnginesConfig, load_questions

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def cfg(llm_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnginesConfig]:
    chroma_dir: Path = tmp_path_factory.mktemp("chroma")
    yield EnginesConfig(llm_url=llm_url, max_tokens=32, chroma_dir=str(chroma_dir))


def test_questions_are_three_turn_conversations() -> None:
    items = load_questions("chat")
    assert len(items) == 30 and all(len(item["turns"]) == 3 and item["turns"][0] == item["question"] for item in items)
    assert all(item["documents"] for item in items)


def test_optimized_conversations_equal_stock_turn_by_turn(cfg: EnginesConfig) -> None:
    index = chat.build_index(cfg)
    new_stock, new_fast = chat.build_stock(cfg, index), chat.build_optimized(cfg, index)
    for item in load_questions("chat", 2)[1:]:  # the second conversation here, the first one sync below
        stock, fast = new_stock(), new_fast()
        assert type(fast).__name__ == "OptimizedChatEngine"

        async def converse(engine, turns=item["turns"]) -> list[str]:
            return [str(await engine.achat(turn)) for turn in turns]

        assert asyncio.run(converse(fast)) == asyncio.run(converse(stock))
        assert [(m.role, m.content) for m in fast.chat_history] == [(m.role, m.content) for m in stock.chat_history]
        condense = fast.explain().node("condense")
        assert condense is not None  # the last turn's follow-up was condensed with the history
        assert fast.last_trace is not None and any(c.node == "condense" for c in fast.last_trace.engine_calls)
    assert chat.run(new_fast, load_questions("chat", 1)[0]) == chat.run(new_stock, load_questions("chat", 1)[0])
