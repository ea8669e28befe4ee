"""RemoteEmbeddingEngine against a real OpenAI-compatible embedding server (all-MiniLM-L6-v2 on loopback)."""

from __future__ import annotations

import asyncio
import socket

import openai
import pytest

from ayo_core.engines.remote_embedding import RemoteEmbeddingEngine, RemoteEmbeddingError
from tests.ayo_core.engines.embedding_server import MODEL_NAME, serve_embeddings

TEXTS = ["The cat sat on the mat.", "Line one\nline two", "Rivers flow to the sea.", "Paris is in France.",
         "Python has a json module.", "Tokyo is large."]


@pytest.fixture(scope="module")
def server():
    with serve_embeddings() as srv:
        yield srv


@pytest.fixture
def sdk(server):
    server.clear()
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def test_vectors_and_request_equal_the_openai_sdks(server, sdk) -> None:
    stock = [d.embedding for d in sdk.embeddings.create(input=TEXTS, model=MODEL_NAME).data]
    stock_body = server.requests[-1]
    engine = RemoteEmbeddingEngine(server.url, MODEL_NAME, api_key="unused")
    assert engine.embed(TEXTS) == stock  # exact: same floats, decoded from base64 as the SDK does
    body = server.requests[-1]
    assert body == stock_body  # same fields, same values (encoding_format base64, as the SDK defaults it)


def test_float_format_and_dimensions_are_sent_as_given(server, sdk) -> None:
    stock = sdk.embeddings.create(input=TEXTS[:2], model=MODEL_NAME, encoding_format="float", dimensions=384)
    engine = RemoteEmbeddingEngine(server.url, MODEL_NAME, params={"encoding_format": "float", "dimensions": 384})
    assert engine.embed(TEXTS[:2]) == [d.embedding for d in stock.data]
    assert server.requests[-1] == server.requests[-2]


def test_texts_go_in_requests_of_at_most_max_batch(server) -> None:
    engine = RemoteEmbeddingEngine(server.url, MODEL_NAME, max_batch=4)
    server.clear()
    vectors = engine.embed(TEXTS)
    assert [len(b["input"]) for b in server.requests] == [4, 2]
    assert len(vectors) == 6 and engine.statistics().batches == 2
    server.clear()
    engine.embed(TEXTS, batch_size=3)  # a caller's smaller limit wins
    assert [len(b["input"]) for b in server.requests] == [3, 3]
    # the order of the results is the order of the texts, whatever order the requests finish in
    assert vectors == [engine.embed([t])[0] for t in TEXTS]


def test_query_and_text_models_and_newline_replacement(server) -> None:
    engine = RemoteEmbeddingEngine(server.url, "text-model-missing", query_model=MODEL_NAME, replace_newlines=True)
    server.clear()
    engine.embed(["a\nb"], kind="query")
    assert server.requests[-1]["input"] == ["a b"] and server.requests[-1]["model"] == MODEL_NAME
    with pytest.raises(RemoteEmbeddingError, match=r"(?s)127\.0\.0\.1.*HTTP 404.*does not exist"):
        engine.embed(["a"], kind="text")


def test_a_refused_request_names_the_server_and_its_message(server) -> None:
    engine = RemoteEmbeddingEngine(server.url, MODEL_NAME, params={"dimensions": 10})
    with pytest.raises(RemoteEmbeddingError) as err:
        engine.embed(["x"])
    assert server.url in str(err.value) and "HTTP 400" in str(err.value) and "matryoshka" in str(err.value)
    assert err.value.status_code == 400


def test_server_errors_are_retried_then_reported(server) -> None:
    engine = RemoteEmbeddingEngine(server.url, MODEL_NAME, max_retries=1)
    server.fail_with[:] = [503]
    assert len(engine.embed(["recovers"])) == 1  # one failure, one retry
    server.fail_with[:] = [500, 500]
    with pytest.raises(RemoteEmbeddingError, match="HTTP 500"):
        engine.embed(["gives up"])
    server.fail_with.clear()


def test_an_unreachable_server_fails_naming_its_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = RemoteEmbeddingEngine(f"http://127.0.0.1:{port}/v1", MODEL_NAME, max_retries=0)
    with pytest.raises(RemoteEmbeddingError, match=rf"127\.0\.0\.1:{port}/v1/embeddings could not be reached"):
        engine.embed(["x"])


def test_bad_arguments_are_named() -> None:
    engine = RemoteEmbeddingEngine("http://127.0.0.1:9/v1", MODEL_NAME)
    with pytest.raises(TypeError, match="list"):
        engine.embed("one str")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="normalize"):
        engine.embed(["x"], normalize=True)
    with pytest.raises(ValueError, match="extra_body"):
        RemoteEmbeddingEngine("http://127.0.0.1:9/v1", MODEL_NAME, params={"extra_body": {}})
    assert engine.embed([]) == [] and asyncio.run(engine.aembed([])) == []
