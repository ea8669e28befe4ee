"""Chroma's folder made read-only under a running app: optimized pipelines fail as stock does,
never hang, lose nothing.

Root ignores file modes, so the app runs in a child process as an unprivileged user (``setpriv``,
uid 65534) that owns a persistent Chroma folder root filled. The child opens its client (Chroma
cannot even open a folder that is read-only from the start: stock fails before any pipeline runs),
then the parent takes the folder's write permission away, as a disk remounted read-only would. The
child then runs, stock and optimized alike: a query engine over the existing collection (reads
only), and a doc-QA function that indexes new documents into the store and asks (writes). Fake
LLM and embedder (said here): the store is what is under test. Afterwards the folder still holds
exactly what it held, or that plus the new documents complete.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = "65534"
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
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]), HOME=str(home),
                AYO_HOME=str(home / "ayo"), ANONYMIZED_TELEMETRY="False")


def _nobody(args: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *args]


def _as_nobody(args: list[str], home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_nobody(args), capture_output=True, text=True, env=_env(home), cwd=str(REPO),
                          timeout=timeout)


def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        path.chmod(mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
                   | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if path.is_dir() else 0))


def _count(folder: Path, home: Path) -> int:
    out = subprocess.run([sys.executable, "-c", FILL.split("client = ")[0] + textwrap.dedent('''
        client = chromadb.PersistentClient(path=sys.argv[1])
        print(client.get_collection("docs").count())
    '''), str(folder)], capture_output=True, text=True, check=True, env=_env(home), timeout=300)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's own tmp folders are root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="ayo-readonly-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def nobody_home(shared_dir: Path) -> Path:
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run a child as an unprivileged user")
    home = shared_dir / "home"
    home.mkdir()
    os.chown(home, int(NOBODY), int(NOBODY))
    probe = _as_nobody([sys.executable, "-c", "import chromadb, ayo_llamaindex"], home, 300)
    if probe.returncode != 0:
        pytest.skip(f"an unprivileged user cannot run this checkout's Python here: {probe.stderr[-300:]}")
    return home


def test_read_only_store_fails_as_stock_and_keeps_its_data(shared_dir: Path, nobody_home: Path) -> None:
    folder = shared_dir / "chroma"
    filled = subprocess.run([sys.executable, "-c", FILL, str(folder)], capture_output=True, text=True, check=True,
                            env=_env(nobody_home), timeout=300)
    before = int(filled.stdout.strip().splitlines()[-1])
    assert before == 12
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, int(NOBODY), int(NOBODY))

    child = subprocess.Popen(_nobody([sys.executable, "-c", CHILD, str(folder)]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(nobody_home),
                             cwd=str(REPO))
    assert child.stdout is not None and child.stdin is not None
    try:
        opened = child.stdout.readline()
        assert opened.startswith("OPENED"), (opened, child.stderr.read()[-2000:] if child.poll() is not None else "")
        _read_only(folder)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=500)
    finally:
        if child.poll() is None:
            child.kill()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, f"child failed (code {child.returncode}): {err[-2000:]}"
    result = json.loads(lines[-1][len("RESULT "):])

    for case in ("read", "write"):
        stock, ayo = result[case]["stock"], result[case]["ayo"]
        assert ayo.get("answer") == stock.get("answer") and ayo.get("error") == stock.get("error"), (case, result)
        assert ayo["seconds"] < stock["seconds"] + 30, (case, result)  # no hang beyond stock's own
    assert "answer" in result["read"]["stock"], result  # reading a read-only store works
    after = _count(folder, nobody_home)
    # nothing lost; the new documents are there complete or not at all (stock's write may succeed
    # through the database handle opened before the change: then Ayo's must too, checked above)
    assert after in (before, before + 5), (before, after, result)
