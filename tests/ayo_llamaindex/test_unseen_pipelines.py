"""Pipelines written the way users write them, found by a stock-vs-optimized sweep.

Each test compares with stock LlamaIndex (the same objects, or a twin built the same way):
``aquery`` with streaming or opaque modules, the stock engine's API beyond ``query``,
``verbose`` output, the openai SDK's exceptions, ``@optimize`` on methods and async
callables, and what ``optimize`` does with objects it does not optimize.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex, get_response_synthesizer
from llama_index.core.base.response.schema import AsyncStreamingResponse
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever, QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from tests.ayo_llamaindex.conftest import QUESTIONS, FakeLLM, assert_same, node_ids


async def _stream_text(response: Any) -> tuple[str, str, list[str]]:
    text = "".join([t async for t in response.async_response_gen()])
    return type(response).__name__, text, node_ids(response)


# -- aquery: opaque modules take stock's async path, on the caller's loop --------------------------

def test_aquery_streaming_gives_an_async_streaming_response(index) -> None:
    """Stock ``aquery`` with ``streaming=True`` returns an ``AsyncStreamingResponse``."""
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2, streaming=True)
    fast = ayo_llamaindex.optimize(stock)

    async def both() -> tuple[Any, Any]:
        s = await _stream_text(await stock.aquery(QUESTIONS[0]))
        response = await fast.aquery(QUESTIONS[0])
        assert isinstance(response, AsyncStreamingResponse)
        return s, await _stream_text(response)

    s, f = asyncio.run(both())
    assert f == s


class LoopRecordingRetriever(BaseRetriever):
    """Stock ``aquery`` awaits ``aretrieve``: it records the loop it ran on."""

    def __init__(self, inner: BaseRetriever) -> None:
        super().__init__()
        self.inner, self.loops = inner, []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.inner.retrieve(query_bundle)[:2]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.loops.append(asyncio.get_running_loop())
        return self._retrieve(query_bundle)


class LoopRecordingPostprocessor(BaseNodePostprocessor):
    loops: list = []

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list:
        return nodes[::-1]

    async def _apostprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list:
        self.loops.append(asyncio.get_running_loop())
        return self._postprocess_nodes(nodes, query_bundle)


def test_aquery_awaits_opaque_modules_on_the_callers_loop(index) -> None:
    retriever = LoopRecordingRetriever(index.as_retriever(similarity_top_k=4))
    post = LoopRecordingPostprocessor(loops=[])
    stock = RetrieverQueryEngine.from_args(retriever, llm=FakeLLM(), node_postprocessors=[post])
    fast = ayo_llamaindex.optimize(stock)

    async def both() -> tuple[Any, Any, asyncio.AbstractEventLoop]:
        return await stock.aquery(QUESTIONS[0]), await fast.aquery(QUESTIONS[0]), asyncio.get_running_loop()

    s, f, loop = asyncio.run(both())
    assert_same(s, f)
    assert retriever.loops == [loop, loop] and post.loops == [loop, loop]
    assert_same(stock.query(QUESTIONS[1]), fast.query(QUESTIONS[1]))  # sync query: sync methods
    assert len(retriever.loops) == 2


def test_aquery_leaves_the_callers_bundle_alone(index) -> None:
    """Stock ``aretrieve`` embeds into a new bundle (sync ``retrieve`` writes the caller's)."""
    fast = ayo_llamaindex.optimize(index.as_query_engine(llm=FakeLLM(), similarity_top_k=2))
    stock_bundle, fast_bundle = QueryBundle(QUESTIONS[0]), QueryBundle(QUESTIONS[0])
    asyncio.run(index.as_query_engine(llm=FakeLLM(), similarity_top_k=2).aquery(stock_bundle))
    asyncio.run(fast.aquery(fast_bundle))
    assert stock_bundle.embedding is None and fast_bundle.embedding is None


def test_async_docqa_with_streaming_aquery(embed_model, documents) -> None:
    async def answer(question: str, docs: list) -> tuple[str, str, list[str]]:
        idx = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
        response = await idx.as_query_engine(llm=FakeLLM(), similarity_top_k=2, streaming=True).aquery(question)
        name, text, _ = await _stream_text(response)
        return name, text, [n.node.get_content() for n in response.source_nodes]

    fast = ayo_llamaindex.optimize(answer)
    assert asyncio.run(fast(QUESTIONS[0], documents)) == asyncio.run(answer(QUESTIONS[0], documents))


def test_aquery_coroutine_made_before_the_loop_runs(embed_model, documents) -> None:
    """``asyncio.run(qe.aquery(q))`` inside a traced function: the coroutine exists before any loop."""
    def answer(question: str, docs: list) -> Any:
        idx = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
        return asyncio.run(idx.as_query_engine(llm=FakeLLM(), similarity_top_k=2).aquery(question))

    fast = ayo_llamaindex.optimize(answer)
    assert_same(answer(QUESTIONS[0], documents), fast(QUESTIONS[0], documents), by="content")
    assert "VectorIndexRetriever" in fast.explain()  # traced, not run stock


# -- the rest of the stock engine's API -------------------------------------------------------------

def test_engine_api_beyond_query_is_the_stock_engines(index) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(stock)
    bundle = QueryBundle(QUESTIONS[0])
    assert node_ids(fast.query(bundle)) == [n.node.node_id for n in fast.retrieve(bundle)]
    assert [n.node.node_id for n in fast.retrieve(bundle)] == [n.node.node_id for n in stock.retrieve(bundle)]
    assert [n.node.node_id for n in asyncio.run(fast.aretrieve(bundle))] == \
        [n.node.node_id for n in stock.retrieve(bundle)]
    assert fast.retriever is stock.retriever
    nodes = stock.retrieve(bundle)
    assert str(fast.synthesize(bundle, nodes)) == str(stock.synthesize(bundle, nodes))
    assert sorted(fast.get_prompts()) == sorted(stock.get_prompts())
    with pytest.raises(AttributeError):
        fast.no_such_attribute  # noqa: B018


# -- verbose output ---------------------------------------------------------------------------------

def _stdout_of(engine: Any, capsys: Any) -> tuple[str, str]:
    capsys.readouterr()
    text = str(engine.query(QUESTIONS[0]))
    return text, capsys.readouterr().out


def test_fusion_verbose_prints_every_generated_query(index, capsys) -> None:
    def build() -> Any:
        retriever = QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=FakeLLM(), num_queries=2,
                                         similarity_top_k=2, verbose=True)
        return RetrieverQueryEngine.from_args(retriever, llm=FakeLLM())

    stock_out = _stdout_of(build(), capsys)
    assert "Generated queries:" in stock_out[1]
    assert _stdout_of(ayo_llamaindex.optimize(build()), capsys) == stock_out


def test_tree_summarize_verbose_prints_like_stock(index, capsys) -> None:
    def build() -> Any:
        synth = get_response_synthesizer(llm=FakeLLM(), response_mode="tree_summarize", verbose=True)
        return RetrieverQueryEngine(index.as_retriever(similarity_top_k=3), response_synthesizer=synth)

    stock_out = _stdout_of(build(), capsys)
    assert "text chunks after repacking" in stock_out[1]
    assert _stdout_of(ayo_llamaindex.optimize(build()), capsys) == stock_out


# -- exceptions: the openai SDK's own ---------------------------------------------------------------

def _outcome(engine: Any, question: str) -> tuple[type, str]:
    try:
        engine.query(question)
    except Exception as exc:  # noqa: BLE001 - compared by the caller
        return type(exc), str(exc)
    raise AssertionError("expected the query to fail")


def test_server_down_raises_the_sdks_connection_error(index) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = OpenAILike(model="m", api_base=f"http://127.0.0.1:{port}/v1", api_key="none", is_chat_model=True,
                     max_tokens=8, max_retries=0)
    stock = index.as_query_engine(llm=llm, similarity_top_k=2)
    assert _outcome(ayo_llamaindex.optimize(stock), "q") == _outcome(stock, "q")


@pytest.mark.llm
@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("bad", [{"model": "no-such-model"}, {"max_tokens": 9000, "context_window": 20000}])
def test_server_rejections_raise_the_sdks_error(llm_url, index, chat, bad) -> None:
    """Unknown model (404), too many tokens (400): ``openai.NotFoundError`` / ``BadRequestError``."""
    kw = {"model": "SmolLM2-135M-Instruct", "max_tokens": 8, **bad}
    llm = OpenAILike(api_base=llm_url, api_key="none", is_chat_model=chat, max_retries=0, **kw)
    stock = index.as_query_engine(llm=llm, similarity_top_k=2)
    expected = _outcome(stock, QUESTIONS[0])
    assert expected[0].__module__.startswith("openai")
    assert _outcome(ayo_llamaindex.optimize(stock), QUESTIONS[0]) == expected


# -- what optimize takes ----------------------------------------------------------------------------

class App:
    def __init__(self, embed_model: Any, top_k: int) -> None:
        self.embed_model, self.top_k = embed_model, top_k

    @ayo_llamaindex.optimize
    def answer(self, question: str, docs: list) -> Any:
        idx = VectorStoreIndex.from_documents(docs, embed_model=self.embed_model)
        return idx.as_query_engine(llm=FakeLLM(), similarity_top_k=self.top_k).query(question)


def test_optimize_as_a_method_decorator(embed_model, documents) -> None:
    app = App(embed_model, top_k=2)
    stock = App.answer.stock(app, QUESTIONS[0], documents)
    assert_same(stock, app.answer(QUESTIONS[0], documents), by="content")
    assert_same(stock, asyncio.run(app.answer.acall(QUESTIONS[0], documents)), by="content")
    assert "VectorIndexRetriever" in app.answer.explain()


class AsyncApp:
    def __init__(self, embed_model: Any) -> None:
        self.embed_model = embed_model

    async def __call__(self, question: str, docs: list) -> Any:
        idx = VectorStoreIndex.from_documents(docs, embed_model=self.embed_model)
        return await idx.as_query_engine(llm=FakeLLM(), similarity_top_k=2).aquery(question)


def test_callable_object_with_async_call_is_traced(embed_model, documents) -> None:
    fast = ayo_llamaindex.optimize(AsyncApp(embed_model))
    stock = asyncio.run(AsyncApp(embed_model)(QUESTIONS[0], documents))
    assert_same(stock, asyncio.run(fast(QUESTIONS[0], documents)), by="content")
    assert "VectorIndexRetriever" in fast.explain()


def test_optimize_twice_returns_the_same_stand_in(index) -> None:
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(stock)
    assert ayo_llamaindex.optimize(fast) is fast
    other = ayo_llamaindex.optimize(fast, policy="fifo")
    assert other is not fast and other.stock is stock
    assert_same(stock.query(QUESTIONS[0]), other.query(QUESTIONS[0]))

    def answer(question: str) -> str:
        return question

    f = ayo_llamaindex.optimize(answer)
    assert ayo_llamaindex.optimize(f) is f


def test_objects_optimize_does_not_take_run_unchanged_with_a_clear_warning(index, caplog) -> None:
    class MyRetriever(BaseRetriever):  # a user's subclass is still a LlamaIndex object
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return []

    cases = [(index.as_retriever(), "RetrieverQueryEngine.from_args"), (MyRetriever(), "RetrieverQueryEngine"),
             (index, "index.as_query_engine"),
             (index.as_chat_engine(llm=FakeLLM(), chat_mode="simple"), "chat engine"),
             (FakeLLM(), "index.as_query_engine")]
    for obj, fix in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
            assert ayo_llamaindex.optimize(obj) is obj
        assert type(obj).__name__ in caplog.text and fix in caplog.text
