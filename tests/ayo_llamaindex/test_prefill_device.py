"""Early prefill of the synthesis prompt's head runs on accelerator servers only; answers never change."""

from __future__ import annotations

import pytest

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, assert_same
from tests.ayo_llamaindex.test_equivalence_llm import make_llm

pytestmark = pytest.mark.llm


@pytest.mark.parametrize(("device", "prefills"), [("cuda", True), ("cpu", False)])
def test_early_prefill_follows_the_server_device(llm_url, index, monkeypatch, device, prefills) -> None:
    monkeypatch.setenv("AYO_LLM_DEVICE", device)
    stock = index.as_query_engine(llm=make_llm(llm_url), similarity_top_k=2, response_mode="refine")
    fast = ayo_llamaindex.optimize(stock)
    assert_same(stock.query(QUESTIONS[0]), fast.query(QUESTIONS[0]))
    warm = [c for c in fast.last_trace.engine_calls if c.node == "synthesize.prefill" and c.method == "prefill"]
    assert bool(warm) is prefills
