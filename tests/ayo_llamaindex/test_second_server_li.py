"""The LlamaIndex core pattern, stock vs Ayo, on a second server implementation: ``transformers serve
--continuous-batching`` (no priority, /metrics, /tokenize, prefix-cache reset or ``data: [DONE]``).

A ``RetrieverQueryEngine`` with the default synthesizer, through ``OpenAILike`` pointed at that
server, answers with the same text and source nodes in Ayo as in stock, streamed and not.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.query_engine import RetrieverQueryEngine

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, compare, node_ids
from tests.ayo_llamaindex.test_equivalence_llm import make_llm

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(600)]
MAX_TOKENS = 32


def query_engine(url: str, index: Any, streaming: bool = False) -> RetrieverQueryEngine:
    synthesizer = get_response_synthesizer(llm=make_llm(url, max_tokens=MAX_TOKENS), streaming=streaming)
    return RetrieverQueryEngine(index.as_retriever(similarity_top_k=2), response_synthesizer=synthesizer)


def test_retriever_query_engine(transformers_llm_url: str, index: Any) -> None:
    stock = query_engine(transformers_llm_url, index)
    fast = ayo_llamaindex.optimize(stock)
    compare(stock, fast, questions=QUESTIONS[:1])
    assert "(opaque)" not in fast.explain()


def test_retriever_query_engine_streamed(transformers_llm_url: str, index: Any) -> None:
    stock = query_engine(transformers_llm_url, index, streaming=True)
    fast = ayo_llamaindex.optimize(stock)
    want, got = stock.query(QUESTIONS[0]), fast.query(QUESTIONS[0])
    assert type(got) is type(want) and node_ids(got) == node_ids(want)
    want_deltas, got_deltas = list(want.response_gen), list(got.response_gen)
    assert "".join(want_deltas).strip() and got_deltas == want_deltas
