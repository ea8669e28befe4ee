"""Each example app builds, answers on the real LLM, and its optimized form answers the same.

Needs the vLLM server (``llm_url`` fixture). Nothing here skips on an import error: the adapters
are imported at the top (a broken one fails this file's collection, with or without a server), and
``build_optimized`` raising ``ImportError`` fails the test. Every package the apps import is a
required dependency (pyproject.toml); should an app ever need an optional one, skip on that
module's name alone (``ModuleNotFoundError.name``), never on any ``ImportError``.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import ayo_langchain  # noqa: F401 - a broken adapter import must fail here, loudly
import ayo_llamaindex  # noqa: F401
from ayo_examples.common import APPS, EnginesConfig, load_questions
from ayo_examples.search_service import SearchService

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def cfg(tools_llm_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnginesConfig]:
    # the agent app needs tool calls; the tool-calling server renders every tool-less request as the
    # default one does, so all apps share it
    chroma_dir: Path = tmp_path_factory.mktemp("chroma")
    with SearchService(latency_s=0.05) as search:
        yield EnginesConfig(llm_url=tools_llm_url, max_tokens=32, chroma_dir=str(chroma_dir), search_url=search.url)


@pytest.mark.parametrize("app", APPS)
def test_optimized_app_gives_the_stock_answer(app: str, cfg: EnginesConfig) -> None:
    module = importlib.import_module(f"ayo_examples.{app}")
    stock = module.build_stock(cfg)
    optimized = module.build_optimized(cfg)
    item = load_questions(app, 2)[1]

    async def both() -> tuple[str, str]:
        return await module.arun(stock, item), await module.arun(optimized, item)

    stock_answer, ayo_answer = asyncio.run(both())
    assert isinstance(stock_answer, str) and stock_answer.strip()  # the stock app answers
    assert ayo_answer == stock_answer
