"""``CitationQueryEngine``: stock vs optimized on the real vLLM server (fp32, eager, greedy), 64-token answers.

Built as LlamaIndex's citation guide builds it: ``CitationQueryEngine.from_args(index, similarity_top_k=...,
citation_chunk_size=...)``. Citation nodes get fresh ids on every query (stock's own), so sources are
compared by their text and score.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.query_engine import CitationQueryEngine

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import TEXTS
from tests.ayo_llamaindex.test_sub_question import make_llm

pytestmark = pytest.mark.llm
QUESTIONS = ["How do I turn Python objects into JSON?", "Which module keeps a list sorted, and how?"]


def outcome(response: Any) -> tuple:
    return str(response), [(n.node.get_content(), round(n.score, 5)) for n in response.source_nodes]


@pytest.mark.parametrize("use_aquery", [False, True])
def test_citation_engine_answers_as_stock(llm_url: str, embed_model: Any, use_aquery: bool) -> None:
    index = VectorStoreIndex.from_documents([Document(text=t, id_=f"doc{i}") for i, t in enumerate(TEXTS)],
                                            embed_model=embed_model)
    stock = CitationQueryEngine.from_args(index, llm=make_llm(llm_url, 64), similarity_top_k=3,
                                          citation_chunk_size=64)
    fast = ayo_llamaindex.optimize(stock)
    assert fast.not_lowered_reason is None and not fast.explain().opaque

    def ask(engine: Any, q: str) -> tuple:
        return outcome(asyncio.run(engine.aquery(q)) if use_aquery else engine.query(q))

    for q in QUESTIONS:
        expected = ask(stock, q)
        assert expected[1][0][0].startswith("Source 1:")
        assert ask(fast, q) == expected, q
