"""The runtime on the real engines (vLLM, sentence-transformers, Chroma): same answers as the reference."""

from __future__ import annotations

import pytest

from ayo_core.passes import optimize_graph
from ayo_core.runtime import Engines, Runtime, reference_run
from ayo_core.templates.examples import example_inputs, naive_rag_graph

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def embedder():
    from ayo_core.engines import EmbeddingEngine

    engine = EmbeddingEngine()
    yield engine
    close = getattr(engine, "close", None)
    if callable(close):
        close()


async def test_naive_rag_on_real_engines_matches_reference(llm_url, embedder, tmp_path):
    from ayo_core.engines import LLMEngine, VectorStoreEngine

    graph = naive_rag_graph("real", n_chunks=8, k=2, max_tokens=8)
    inputs = example_inputs("what does the prefix cache hold", n_chunks=8)
    llm = LLMEngine(llm_url, model="SmolLM2-135M-Instruct")
    try:
        ref_engines = Engines(llm=llm, embed=embedder, vector=VectorStoreEngine(path=tmp_path / "ref"))
        expected, ref_trace = await reference_run(graph, inputs, ref_engines)
        rt = Runtime(Engines(llm=llm, embed=embedder, vector=VectorStoreEngine(path=tmp_path / "opt")))
        value, trace = await rt.run(optimize_graph(graph), inputs, timeout=120)
    finally:
        await llm.aclose()
    assert isinstance(expected, str) and value == expected
    assert {c.engine for c in trace.engine_calls} == {"llm", "embed", "vector"}
    assert any(c.method == "prefill" for c in trace.engine_calls)  # prefill splitting ran on vLLM
    stats = rt.statistics()
    assert stats["llm"].failed == 0 and stats["embed"].finished >= 2
