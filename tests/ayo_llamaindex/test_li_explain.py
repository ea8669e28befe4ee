"""explain() of a LlamaIndex query engine and of a doc-QA function is the core's structured Explanation."""

from __future__ import annotations

from llama_index.core import VectorStoreIndex

import ayo_llamaindex
from ayo_core.explain import Explanation
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM


def test_query_engine_explanation_lists_modules_opaque_passes_and_graph(index) -> None:
    fast = ayo_llamaindex.optimize(index.as_query_engine(llm=FakeLLM(), similarity_top_k=2))
    before = fast.explain()
    assert isinstance(before, Explanation) and before.trace is None
    fast.query(QUESTIONS[0])
    ex = fast.explain()
    templates = dict((m.name, m.template) for m in ex.modules)
    assert templates["VectorIndexRetriever"] == "Retrieval"
    assert templates["RetrieverQueryEngine"] == "QueryEngine"
    assert any(o.name == "FakeLLM" and o.reason for o in ex.opaque)  # not an OpenAI-compatible class
    assert [p.name for p in ex.passes][:2] == ["dependency_pruning", "stage_decomposition"]
    assert "search" in ex.ops and ex.node("retrieve.search").op == "search"
    assert all(a in {n.name for n in ex.nodes} and b in {n.name for n in ex.nodes} for a, b in ex.edges)
    assert ex.trace is not None and ex.trace["status"] == "done"
    assert ex.fired("prefill_splitting") == []  # an opaque LLM: Ayo sends no request it could warm


def test_docqa_explanation_lists_indexing_as_lowered(embed_model, documents) -> None:
    llm = FakeLLM()

    def answer(question: str, docs: list) -> object:
        index = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
        return index.as_query_engine(llm=llm, similarity_top_k=2).query(question)

    fast = ayo_llamaindex.optimize(answer)
    assert isinstance(fast.explain(), Explanation)  # before any call: says so, same type
    fast(QUESTIONS[0], documents)
    ex = fast.explain()
    assert ("VectorStoreIndex.build", "Indexing") in [(m.name, m.template) for m in ex.modules]
    assert {"ingest0.embed", "ingest0.add"} <= {n.name for n in ex.nodes}
    assert ex.trace is not None and ex.trace["status"] == "done"
