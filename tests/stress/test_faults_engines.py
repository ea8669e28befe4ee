"""Faults in the local engines (real components; the failure itself is injected into the real worker).

- The embedding worker raising: the failing request's query fails promptly with an error naming the
  engine; requests merged into the same batch from other queries still get their vectors; the engine
  keeps serving; a doc-QA call afterwards answers exactly as stock.
- The Chroma server stopped: stock and optimized fail with the same exception, none hangs; nothing
  acknowledged before is lost once it is back.
"""

from __future__ import annotations

import concurrent.futures
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.ayo_llamaindex.li_helpers import TEXTS, FakeLLM  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
POISON = "POISON"
SLOW_BATCHES: dict[str, float] = {"seconds": 0.0}  # seconds every forward pass sleeps: lets requests queue and merge


class _Poisoned:
    """The sentence-transformers model, except that a forward pass over a POISON text raises."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, texts: list[str], **kwargs: Any) -> Any:
        if any(POISON in t for t in texts):
            raise RuntimeError(f"worker crashed on {len(texts)} texts")
        return self.model.encode(texts, **kwargs)


@pytest.fixture
def poisoned_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every EmbeddingEngine's forward pass raises when a text in its batch contains POISON."""
    from ayo_core.engines.embedding import EmbeddingEngine

    real = EmbeddingEngine._encode

    def encode(self: Any, batch: list) -> None:
        texts = [t for req, a, b in batch for t in req.texts[a:b]]
        if any("hold" == t for t in texts):
            time.sleep(1.0)  # a slow batch: the next requests queue up and merge into one batch
        time.sleep(SLOW_BATCHES["seconds"])
        model, self._model = self._model, _Poisoned(self._model)
        try:
            return real(self, batch)
        finally:
            self._model = model

    monkeypatch.setattr(EmbeddingEngine, "_encode", encode)


def test_one_bad_request_does_not_fail_the_requests_merged_with_it(poisoned_worker: None) -> None:
    from ayo_core.engines.embedding import EmbeddingEngine, EmbeddingEngineError

    engine = EmbeddingEngine()
    try:
        engine.start(wait=True)
        clean_alone = engine.embed(["a clean text"])
        hold = engine.submit_nowait(["hold"])
        time.sleep(0.2)
        bad = engine.submit_nowait([f"{POISON} text"])
        good = engine.submit_nowait(["a clean text"])
        hold.result(timeout=60)
        with pytest.raises(EmbeddingEngineError, match="EmbeddingEngine") as err:
            bad.result(timeout=60)
        assert "worker crashed" in str(err.value)
        assert good.result(timeout=60)[0] == pytest.approx(clean_alone[0], abs=1e-5)
        assert engine.statistics().max_batch_seen >= 2 or engine.statistics().batches >= 3
        assert engine.embed(["a clean text"])[0] == pytest.approx(clean_alone[0], abs=1e-5)  # still serving
    finally:
        engine.close()


def _doc_qa(embed_model: Any) -> Any:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter

    llm = FakeLLM()

    def answer(question: str, texts: list[str]) -> Any:
        docs = [Document(text=t, id_=f"d{i}") for i, t in enumerate(texts)]
        index = VectorStoreIndex.from_documents(docs, embed_model=embed_model,
                                                transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=16)])
        return index.as_query_engine(llm=llm, similarity_top_k=2).query(question)

    return answer


def test_embedding_worker_raising_fails_only_its_query(poisoned_worker: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    import ayo_llamaindex
    from ayo_core.models import embedding_model_path

    embed = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    stock = _doc_qa(embed)
    fast = ayo_llamaindex.optimize(stock)
    question = "How do I turn Python objects into JSON?"
    expected = str(stock(question, TEXTS))
    assert str(fast(question, TEXTS)) == expected  # warm: the engine is loaded
    monkeypatch.setitem(SLOW_BATCHES, "seconds", 0.5)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        start = time.monotonic()
        # A good query first: while its ingest runs (slowly) the bad and the other good one queue up
        # behind it (LlamaIndex's embeds ask for stock's shape: one engine call each); the poison fails
        # the bad one's call only.
        good = [pool.submit(fast, question, TEXTS)]
        time.sleep(0.1)
        bad = pool.submit(fast, question, [*TEXTS, f"{POISON} in this document."])
        good.append(pool.submit(fast, question, TEXTS))
        with pytest.raises(Exception) as err:  # noqa: PT011 - checked below: it names the engine
            bad.result(timeout=120)
        assert time.monotonic() - start < 60
        assert [str(g.result(timeout=120)) for g in good] == [expected, expected]
    text = f"{err.value} {' '.join(getattr(err.value, '__notes__', []))}"
    assert "EmbeddingEngine" in text and "worker crashed" in text, text
    assert str(fast(question, TEXTS)) == expected  # nothing stuck: the next call answers as stock


# ---- Chroma server stopped ----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChromaServer:
    """``chroma run`` on loopback in a subprocess (the venv's own CLI)."""

    def __init__(self, path: Path) -> None:
        self.path, self.port = path, _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> None:
        cli = Path(sys.executable).parent / "chroma"
        self.proc = subprocess.Popen([str(cli), "run", "--path", str(self.path), "--host", "127.0.0.1",
                                      "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("chroma server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None


@pytest.fixture
def chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path / "chroma")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_chroma_server_stopped(chroma_server: ChromaServer) -> None:
    import chromadb
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore

    import ayo_llamaindex
    from ayo_core.models import embedding_model_path

    embed = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma_server.port)
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("docs", embedding_function=None))
    index = VectorStoreIndex.from_documents([Document(text=t, id_=f"d{i}") for i, t in enumerate(TEXTS)],
                                            storage_context=StorageContext.from_defaults(vector_store=store),
                                            embed_model=embed)
    stock = index.as_query_engine(llm=FakeLLM(), similarity_top_k=2)
    fast = ayo_llamaindex.optimize(stock)
    question = "How can a list stay sorted?"
    expected = str(stock.query(question))
    assert str(fast.query(question)) == expected
    chroma_server.stop()
    outcomes = {}
    for name, engine in (("stock", stock), ("ayo", fast)):
        start = time.monotonic()
        with pytest.raises(Exception) as err:  # noqa: PT011 - compared with stock's below
            engine.query(question)
        outcomes[name] = (type(err.value), time.monotonic() - start)
    assert outcomes["ayo"][0] is outcomes["stock"][0], outcomes
    assert outcomes["ayo"][1] < outcomes["stock"][1] + 30, outcomes  # no hang beyond stock's own timeout
    chroma_server.start()  # the same folder: what was acknowledged is still there
    assert str(fast.query(question)) == expected == str(stock.query(question))
