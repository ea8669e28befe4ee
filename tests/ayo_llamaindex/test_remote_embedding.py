"""LlamaIndex ``OpenAILikeEmbedding`` / ``OpenAIEmbedding`` at a real embedding server (all-MiniLM-L6-v2
on loopback): Ayo routes them through its remote embedding engine with stock's vectors, nodes and
answers, in fewer requests when queries run together."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.embeddings.openai import OpenAIEmbedding
from llama_index.embeddings.openai_like import OpenAILikeEmbedding
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex
from ayo_core.engines.remote_embedding import RemoteEmbeddingError
from ayo_llamaindex.embedding import EmbedBinding
from ayo_llamaindex.runtime import LOOP, direct_embed_send
from tests.ayo_core.engines.embedding_server import MODEL_NAME, serve_embeddings
from tests.ayo_llamaindex.li_helpers import QUESTIONS, TEXTS, assert_same

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def server():
    with serve_embeddings() as srv:
        yield srv


def remote(server: Any, **kw: Any) -> OpenAILikeEmbedding:
    return OpenAILikeEmbedding(model_name=MODEL_NAME, api_base=server.url, api_key="unused", **kw)


def _ayo_vectors(model: Any, texts: list[str], queries: list[str]) -> tuple[list[list[float]], list[float]]:
    binding = EmbedBinding(model)
    assert binding.recognized and binding.remote, binding.reason
    send = direct_embed_send(binding)
    return (LOOP.run_sync(binding.text_embeddings(send, texts)),
            LOOP.run_sync(binding.agg_query_embedding(send, queries)))


@pytest.mark.parametrize("kw", [{}, {"embed_batch_size": 3, "dimensions": 384},
                                {"additional_kwargs": {"encoding_format": "float"}}])
def test_vectors_and_requests_are_stocks(server, kw) -> None:
    model = remote(server, **kw)
    texts = [*TEXTS[:5], "a text\nwith a newline"]
    server.clear()
    stock = (model.get_text_embedding_batch(texts), model.get_agg_embedding_from_queries(QUESTIONS[:2]))
    stock_sent = sorted(server.texts_sent())
    server.clear()
    assert _ayo_vectors(model, texts, QUESTIONS[:2]) == stock  # exact
    assert sorted(server.texts_sent()) == stock_sent  # each text sent as stock sends it (newlines replaced)
    assert max(len(b["input"]) for b in server.requests) <= model.embed_batch_size


def test_openai_embedding_with_model_name_is_routed_too(server) -> None:
    model = OpenAIEmbedding(model_name=MODEL_NAME, api_base=server.url, api_key="unused")
    stock = model.get_text_embedding_batch(TEXTS[:3]), model.get_query_embedding(QUESTIONS[0])
    assert _ayo_vectors(model, TEXTS[:3], QUESTIONS[:1]) == stock


class OwnQuery(OpenAILikeEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return super()._get_query_embedding(query.upper())


@pytest.mark.parametrize(("make", "why"), [
    (lambda s: remote(s, additional_kwargs={"extra_body": {"truncate": True}}), "additional_kwargs ['extra_body']"),
    (lambda s: OwnQuery(model_name=MODEL_NAME, api_base=s.url), "OwnQuery overrides _get_query_embedding"),
    (lambda s: remote(s, additional_kwargs={"encoding_format": "base64"}), "encoding_format='base64'"),
])
def test_what_ayo_cannot_reproduce_runs_stock_with_the_reason(server, make, why) -> None:
    binding = EmbedBinding(make(server))
    assert not binding.recognized and why in binding.reason


# ---- whole pipelines on the real vLLM server -------------------------------------------------------------

def _engine(server: Any, url: str) -> Any:
    llm = OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="unused", is_chat_model=True,
                     temperature=0.0, max_tokens=MAX_TOKENS, context_window=8192)
    documents = [Document(text=t, id_=f"doc{i}") for i, t in enumerate(TEXTS)]
    index = VectorStoreIndex.from_documents(documents, embed_model=remote(server))
    return index.as_query_engine(llm=llm, similarity_top_k=2, response_mode="compact")


@pytest.mark.llm
def test_query_nodes_and_answer_are_stocks(server, llm_url) -> None:
    stock = _engine(server, llm_url)
    fast = ayo_llamaindex.optimize(stock)
    for q in QUESTIONS[:2]:
        assert_same(stock.query(q), fast.query(q))
    assert f"on the remote embedding engine at {server.url}" in fast.explain()


@pytest.mark.llm
def test_concurrent_queries_share_embedding_requests(server, llm_url) -> None:
    stock = _engine(server, llm_url)
    fast = ayo_llamaindex.optimize(stock)
    questions = [f"{q} ({i})" for i in range(3) for q in QUESTIONS[:3]]

    async def together(engine: Any) -> tuple[list[Any], int]:
        server.clear()
        out = await asyncio.gather(*(engine.aquery(q) for q in questions))
        return out, len(server.requests)

    stock_out, stock_requests = asyncio.run(together(stock))
    fast_out, fast_requests = asyncio.run(together(fast))
    for a, b in zip(stock_out, fast_out, strict=True):
        assert_same(a, b)
    assert stock_requests == len(questions)  # stock: one request per query
    assert fast_requests < stock_requests, (fast_requests, stock_requests)


@pytest.mark.llm
def test_a_server_error_fails_the_query_naming_the_server(server, llm_url) -> None:
    stock = _engine(server, llm_url)
    fast = ayo_llamaindex.optimize(stock)
    server.fail_with[:] = [400]
    with pytest.raises(openai.BadRequestError):
        stock.query(QUESTIONS[0])
    server.fail_with[:] = [400]
    with pytest.raises(RemoteEmbeddingError, match=rf"{server.url}/embeddings rejected.*HTTP 400.*injected"):
        fast.query(QUESTIONS[0])
    server.fail_with.clear()


@pytest.mark.llm
@pytest.mark.parametrize("app", ["naive_rag", "advanced_rag"])
def test_example_app_on_an_embedding_server_answers_as_stock(server, llm_url, app, tmp_path) -> None:
    import importlib

    from ayo_examples.common import EnginesConfig, load_questions

    module = importlib.import_module(f"ayo_examples.{app}")
    cfg = EnginesConfig(llm_url=llm_url, max_tokens=MAX_TOKENS, chroma_dir=str(tmp_path), embed_url=server.url)
    item = load_questions(app, 1)[0]
    server.clear()
    stock_answer = module.run(module.build_stock(cfg), item)
    assert server.requests, "the app did not embed on the server"
    stock_requests = len(server.requests)
    server.clear()
    fast = module.build_optimized(cfg)
    assert module.run(fast, item) == stock_answer
    assert 0 < len(server.requests) <= stock_requests
    assert "remote embedding engine" in fast.explain()
