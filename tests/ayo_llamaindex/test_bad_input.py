"""Bad input: the optimized engine behaves like stock or fails with a clearer error, never hangs."""

from __future__ import annotations

import socket
import time

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import FakeLLM, assert_same


def _outcome(engine, q):
    try:
        return engine.query(q), None
    except Exception as exc:  # noqa: BLE001 - compared by the caller
        return None, exc


@pytest.mark.parametrize("mode", ["compact", "refine", "tree_summarize"])
def test_empty_question(index, mode) -> None:
    """Stock embeds nothing for "" and the vector store then fails: the same error, same type."""
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, response_mode=mode)
    (s, s_err), (f, f_err) = _outcome(stock, ""), _outcome(ayo_llamaindex.optimize(stock), "")
    if s_err is None:
        assert f_err is None
        assert_same(s, f)
    else:
        assert type(f_err) is type(s_err) and str(f_err) == str(s_err)


def test_index_with_no_documents(embed_model) -> None:
    empty = VectorStoreIndex.from_documents([], embed_model=embed_model)
    stock = empty.as_query_engine(llm=FakeLLM())
    s, f = stock.query("what?"), ayo_llamaindex.optimize(stock).query("what?")
    assert str(f) == str(s) == "Empty Response" and f.source_nodes == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llm_server_down_fails_fast_and_clearly(index) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    llm = OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                     max_tokens=8, max_retries=0)
    stock = index.as_query_engine(llm=llm, similarity_top_k=2)
    with pytest.raises(Exception):  # noqa: B017 - stock raises the openai SDK's connection error
        stock.query("what?")
    fast = ayo_llamaindex.optimize(stock)
    t0 = time.perf_counter()
    with pytest.raises(Exception) as info:  # noqa: B017
        fast.query("what?")
    assert time.perf_counter() - t0 < 30
    message = "".join([str(info.value), *getattr(info.value, "__notes__", [])])
    assert url.rstrip("/v1") in message or "127.0.0.1" in message
    assert "synthesize" in message  # which Ayo node/module failed


def test_failure_in_a_user_module_keeps_its_type(index) -> None:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    class Exploding(BaseNodePostprocessor):
        def _postprocess_nodes(self, nodes, query_bundle=None):
            raise ValueError("postprocessor bug")

    stock = index.as_query_engine(llm=FakeLLM(), node_postprocessors=[Exploding()])
    with pytest.raises(ValueError, match="postprocessor bug"):
        stock.query("x")
    with pytest.raises(ValueError, match="postprocessor bug"):
        ayo_llamaindex.optimize(stock).query("x")


def test_optimize_rejects_non_pipelines_clearly() -> None:
    with pytest.raises(TypeError, match="query engine or a function"):
        ayo_llamaindex.optimize(42)


def test_tree_summarize_that_cannot_converge_stops_with_a_reason(index) -> None:
    """Stock recurses until RecursionError; Ayo stops after a few stalled levels, same error type."""
    from llama_index.core import get_response_synthesizer
    from llama_index.core.query_engine import RetrieverQueryEngine

    class Verbose(FakeLLM):
        @staticmethod
        def answer(prompt: str) -> str:
            return "a long summary " * 40

    llm = Verbose(context_window=140, num_output=16)
    engine = RetrieverQueryEngine(index.as_retriever(similarity_top_k=5),
                                  response_synthesizer=get_response_synthesizer(llm=llm, response_mode="tree_summarize"))
    with pytest.raises(RecursionError, match="does not converge"):
        ayo_llamaindex.optimize(engine).query("x")


def test_unsupported_objects_are_recognized_by_type_with_the_fix() -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    import ayo_llamaindex

    index = VectorStoreIndex.from_documents([Document(text="a")], embed_model=MockEmbedding(embed_dim=4))
    assert ayo_llamaindex.unsupported_message(index).endswith("an index: pass index.as_query_engine(...) to optimize()")
    retriever = index.as_retriever()
    assert "it is a retriever: pass RetrieverQueryEngine.from_args" in ayo_llamaindex.unsupported_message(retriever)

    class RenamedRetriever(type(retriever)):  # a user's subclass under any name is still a retriever
        pass

    renamed = RenamedRetriever(index=index, embed_model=MockEmbedding(embed_dim=4))
    assert "it is a retriever" in ayo_llamaindex.unsupported_message(renamed)
    assert ayo_llamaindex.optimize(retriever) is retriever
