"""Capture yields the core module graph (``ayo_core.modules.ModuleGraph``); lowering builds every node
through the core templates (the adapter creates no primitive ``Node`` itself)."""

from __future__ import annotations

import pathlib
import re

from llama_index.core import Document, VectorStoreIndex, get_response_synthesizer
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.postprocessor import LLMRerank, SentenceTransformerRerank, SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever

import ayo_llamaindex
from ayo_llamaindex.capture import capture_query_engine, describe
from ayo_llamaindex.postprocess import LOCAL_TEMPLATES
from tests.ayo_llamaindex.li_helpers import TEXTS, FakeLLM


def test_plan_exposes_the_module_graph_with_template_kinds() -> None:
    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS], embed_model=MockEmbedding(embed_dim=8))
    fusion = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=FakeLLM(), num_queries=3)
    qe = RetrieverQueryEngine(fusion, node_postprocessors=[SimilarityPostprocessor(), LLMRerank(llm=FakeLLM())],
                              response_synthesizer=get_response_synthesizer(llm=FakeLLM(), streaming=True))
    plan = capture_query_engine(qe)
    mg = plan.modules()
    assert [(m.name, m.kind) for m in mg.modules()] == [
        ("query_engine", "RetrieverQueryEngine"), ("retriever", "QueryExpansion+Retrieval"), ("retriever", "Retrieval"),
        ("postprocessor[0]", "Transform"), ("postprocessor[1]", "Rerank"), ("synthesizer", "Opaque")]
    assert mg.modules()[1].obj is fusion and [m.name for m in mg.opaque()] == ["synthesizer"]
    assert describe(plan)[1:] == mg.lines()[1:]


def test_local_postprocessors_are_recognised_by_type() -> None:
    class Renamed(SimilarityPostprocessor):  # a subclass keeps its base's recognition (by type, not name)
        pass

    assert LOCAL_TEMPLATES.find(Renamed()) is LOCAL_TEMPLATES.find(SimilarityPostprocessor())
    assert LOCAL_TEMPLATES.find(SentenceTransformerRerank.__new__(SentenceTransformerRerank)).kind == "rerank"
    assert LOCAL_TEMPLATES.find(object()) is None


def test_the_adapter_builds_no_primitive_node_itself() -> None:
    package = pathlib.Path(ayo_llamaindex.__file__).parent
    offenders = [f"{path.name}:{n}" for path in sorted(package.glob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\bNode\(|\bg\.add\(", line)]
    assert offenders == []
