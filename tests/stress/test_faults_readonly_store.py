"""Chroma's folder made read-only under a running app: optimized pipelines fail as stock does,
never hang, lose nothing.

Root's capabilities override file modes, so the app runs in a child process without them
(``setpriv --bounding-set=-all``: still uid 0, the owner of everything here, but held to the owner's
permission bits) over a persistent Chroma folder filled beforehand. The child opens its client (Chroma
cannot even open a folder that is read-only from the start: stock fails before any pipeline runs),
then the parent takes the folder's write permission away, as a disk remounted read-only would. The
child then runs, stock and optimized alike: a query engine over the existing collection (reads
only), and a doc-QA function that indexes new documents into the store and asks (writes). Fake
LLM and embedder (said here): the store is what is under test. Afterwards the folder still holds
exactly what it held.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FILL = textwrap.dedent('''
    import sys
    import chromadb
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore
    client = chromadb.PersistentClient(path=sys.argv[1])
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("docs", embedding_function=None))
    VectorStoreIndex.from_documents([Document(text=f"Module {i} explains feature {i * 7}.", id_=f"d{i}")
                                     for i in range(12)], embed_model=MockEmbedding(embed_dim=8),
                                    storage_context=StorageContext.from_defaults(vector_store=store))
    print(client.get_collection("docs").count())
''')

COUNT = textwrap.dedent('''
    import sys
    import chromadb
    print(chromadb.PersistentClient(path=sys.argv[1]).get_collection("docs").count())
''')

CHILD = textwrap.dedent('''
    import json, sys, time
    import chromadb
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore
    import ayo_llamaindex
    from tests.ayo_llamaindex.li_helpers import FakeLLM

    embed = MockEmbedding(embed_dim=8)
    client = chromadb.PersistentClient(path=sys.argv[1])

    def store(name):
        return ChromaVectorStore(chroma_collection=client.get_or_create_collection(name, embedding_function=None))

    def ask_existing(question):
        index = VectorStoreIndex.from_vector_store(store("docs"), embed_model=embed)
        return index.as_query_engine(llm=FakeLLM(), similarity_top_k=2).query(question)

    def index_and_ask(question):
        docs = [Document(text=f"New note {i} on feature {i}.", id_=f"n{i}") for i in range(5)]
        index = VectorStoreIndex.from_documents(docs, embed_model=embed,
                                                storage_context=StorageContext.from_defaults(vector_store=store("docs")))
        return index.as_query_engine(llm=FakeLLM(), similarity_top_k=2).query(question)

    def outcome(fn):
        start = time.monotonic()
        try:
            value = {"answer": str(fn("Which module explains feature 14?"))}
        except Exception as exc:
            value = {"error": type(exc).__name__, "message": str(exc)[:300],
                     "notes": getattr(exc, "__notes__", [])}
        value["seconds"] = time.monotonic() - start
        return value

    ask_existing("warm-up")  # the client and collection open while the folder is writable
    print("OPENED", flush=True)
    sys.stdin.readline()  # the parent makes the folder read-only now
    out = {}
    for name, fn in (("read", ask_existing), ("write", index_and_ask)):
        out[name] = {"stock": outcome(fn), "ayo": outcome(ayo_llamaindex.optimize(fn))}
    print("RESULT " + json.dumps(out), flush=True)
''')


def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]), AYO_HOME=str(home),
                ANONYMIZED_TELEMETRY="False")


def _unprivileged(args: list[str]) -> list[str]:
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *args]


def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        path.chmod(mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
                   | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if path.is_dir() else 0))


def _count(folder: Path, home: Path) -> int:
    out = subprocess.run([sys.executable, "-c", COUNT, str(folder)], capture_output=True, text=True, check=True,
                         env=_env(home), timeout=300)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def ayo_home(tmp_path: Path) -> Path:
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run a child without root's capabilities")
    return tmp_path / "ayo"


def test_read_only_store_fails_as_stock_and_keeps_its_data(tmp_path: Path, ayo_home: Path) -> None:
    folder = tmp_path / "chroma"
    filled = subprocess.run([sys.executable, "-c", FILL, str(folder)], capture_output=True, text=True, check=True,
                            env=_env(ayo_home), timeout=300)
    before = int(filled.stdout.strip().splitlines()[-1])
    assert before == 12

    errors = tmp_path / "child.err"  # a file, not a pipe: a chatty child cannot block on it
    child = subprocess.Popen(_unprivileged([sys.executable, "-c", CHILD, str(folder)]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=errors.open("w"), text=True, env=_env(ayo_home),
                             cwd=str(REPO))
    assert child.stdout is not None and child.stdin is not None
    try:
        opened = child.stdout.readline()
        assert opened.startswith("OPENED"), (opened, errors.read_text()[-2000:])
        _read_only(folder)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=500)
    finally:
        if child.poll() is None:
            child.kill()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, f"child failed (code {child.returncode}): {errors.read_text()[-2000:]}"
    result = json.loads(lines[-1][len("RESULT "):])

    for case in ("read", "write"):
        stock, ayo = result[case]["stock"], result[case]["ayo"]
        assert ayo.get("answer") == stock.get("answer") and ayo.get("error") == stock.get("error"), (case, result)
        assert ayo["seconds"] < stock["seconds"] + 30, (case, result)  # no hang beyond stock's own
    assert "answer" in result["read"]["stock"], result  # reading a read-only store works
    assert "error" in result["write"]["stock"], result  # the store refused the write, in stock as in Ayo
    assert _count(folder, ayo_home) == before  # nothing lost, nothing half-written
