"""A process killed during doc-QA ingestion leaves no half-written collection a later query can see.

A child process runs an optimized doc-QA function that indexes documents into a persistent Chroma
collection (vectors deferred by ``ayo_llamaindex/ingest.py``, added while the query side runs) and
answers; the parent SIGKILLs it at several moments of the ingestion. A later process opening the
same folder sees the collection empty or complete, never part of it; what a call acknowledged
(it returned) is all there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CHILD = textwrap.dedent('''
    import sys, time
    import chromadb
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore
    import ayo_llamaindex
    from ayo_core.models import embedding_model_path
    from tests.ayo_llamaindex.li_helpers import FakeLLM

    folder = sys.argv[1]
    embed = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    client = chromadb.PersistentClient(path=folder)

    def answer(question, documents):
        store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("docs", embedding_function=None))
        index = VectorStoreIndex.from_documents(documents, embed_model=embed,
                                                storage_context=StorageContext.from_defaults(vector_store=store),
                                                transformations=[SentenceSplitter(chunk_size=64, chunk_overlap=0)])
        return index.as_query_engine(llm=FakeLLM(), similarity_top_k=2).query(question)

    docs = [Document(text=" ".join(f"Module {i} sentence {j} explains feature {i * j}." for j in range(40)),
                     id_=f"doc{i}") for i in range(30)]
    fast = ayo_llamaindex.optimize(answer)
    embed.get_text_embedding("warm")  # load the model before the marker: the kill lands in the ingestion
    print("START", flush=True)
    print("ANSWER", str(fast("Which module explains feature 12?", docs)), flush=True)
    print("DONE", flush=True)
    time.sleep(600)  # acknowledged; the parent kills us now
''')


def _spawn(folder: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]))
    return subprocess.Popen([sys.executable, "-c", CHILD, str(folder)], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=str(REPO))


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout: float = 300.0) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"child exited (code {proc.wait()}) before {marker}")
        if line.startswith(marker):
            return
    pytest.fail(f"no {marker} from the child within {timeout} s")


def _count(folder: Path) -> int | None:
    """Vectors a later process sees in the collection (None: no collection)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f'''
        import chromadb
        client = chromadb.PersistentClient(path={str(folder)!r})
        names = [c if isinstance(c, str) else c.name for c in client.list_collections()]
        print(client.get_collection("docs").count() if "docs" in names else "none")
    ''')], capture_output=True, text=True, check=True, timeout=300)
    value = out.stdout.strip().splitlines()[-1]
    return None if value == "none" else int(value)


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def test_killed_ingestion_is_all_or_nothing(tmp_path: Path) -> None:
    complete = _spawn(tmp_path / "complete")
    _wait_for(complete, "DONE")
    _kill(complete)
    full = _count(tmp_path / "complete")
    assert full and full > 30, full  # acknowledged: every chunk is there after the kill
    for delay in (0.0, 0.5, 1.5):
        folder = tmp_path / f"killed-{delay}"
        proc = _spawn(folder)
        _wait_for(proc, "START")
        time.sleep(delay)
        finished = proc.poll() is not None
        _kill(proc)
        seen = _count(folder)
        assert seen in (None, 0, full), f"a later query sees {seen} of {full} vectors after a kill at +{delay} s"
        assert not finished
