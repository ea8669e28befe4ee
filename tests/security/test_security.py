"""Security properties of what Ayo runs and writes (issue 16, "Security").

- every server Ayo starts binds 127.0.0.1 unless told otherwise (the vLLM command line, the
  example search service; a live check of the listening socket is in tests/stress/test_faults.py);
- API keys and ``Authorization`` headers never appear in logs, traces, ``explain()``, errors or
  files Ayo writes: a secret key goes through both adapters on the real server, everything they
  produce is grepped for it;
- no pickled data crosses a socket: no module that talks to a server imports a pickler;
- files are written only under ``$AYO_HOME`` or paths the user gave.
"""

from __future__ import annotations

import ast
import io
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = [REPO / name for name in ("ayo_core", "ayo_llamaindex", "ayo_langchain", "shims", "ayo_bench")]
SECRET = "sk-ayo-test-SECRET-5f1c9e7a2b"  # noqa: S105 - the planted key the test greps for
ENV_SECRET = "sk-ayo-env-SECRET-0d4b61c8"  # noqa: S105 - OPENAI_API_KEY, read by the SDKs
PICKLERS = {"pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve", "joblib"}
NETWORK = {"httpx", "socket", "http", "urllib", "requests", "aiohttp", "chromadb", "openai", "websockets"}


def library_files() -> list[Path]:
    return sorted(p for root in LIBRARY for p in root.rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


# ---- binding ---------------------------------------------------------------------------
def test_vllm_server_binds_loopback_unless_told(tmp_path: Path) -> None:
    from ayo_core.engines.llm_server import DEFAULT_HOST, LLMServer, serve_llm, start_server

    assert DEFAULT_HOST == "127.0.0.1"
    server = LLMServer(tmp_path, port=12345, python=Path("/bin/false"), log_dir=tmp_path)
    cmd = server.command()
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert server.base_url.startswith("http://127.0.0.1:")
    import inspect

    for fn in (start_server, serve_llm):
        assert inspect.signature(fn).parameters["host"].default == "127.0.0.1", fn
    # Told otherwise: the caller's host is what vLLM gets.
    other = LLMServer(tmp_path, port=12345, python=Path("/bin/false"), host="10.1.2.3", log_dir=tmp_path).command()
    assert other[other.index("--host") + 1] == "10.1.2.3"


def test_search_service_binds_loopback() -> None:
    from ayo_examples.search_service import SearchService

    with SearchService() as search:
        assert search.url.startswith("http://127.0.0.1:"), search.url


def test_no_wildcard_bind_in_library() -> None:
    offenders = [f"{p.relative_to(REPO)}:{i}" for p in library_files()
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if ("0.0.0.0" in line or '"::"' in line) and not line.lstrip().startswith("#")]  # noqa: S104
    assert not offenders, f"a wildcard bind address in library code: {offenders}"


# ---- no pickles over sockets -----------------------------------------------------------
def test_no_pickler_in_modules_that_talk_to_servers() -> None:
    talking = {p: imported_roots(p) for p in library_files()}
    offenders = {str(p.relative_to(REPO)): sorted(r & PICKLERS) for p, r in talking.items() if r & NETWORK and r & PICKLERS}
    assert not offenders, f"modules that talk to servers import a pickler: {offenders}"
    # And nothing of the library unpickles at all (a pickle read from a file is a socket away).
    loads = [str(p.relative_to(REPO)) for p in library_files()
             if any(s in p.read_text(encoding="utf-8") for s in ("pickle.loads", "pickle.load(", "cloudpickle.loads"))]
    assert not loads, f"unpickling in library code: {loads}"
    assert sum(1 for r in talking.values() if r & NETWORK) >= 5  # the scan really saw the network modules


# ---- secrets ---------------------------------------------------------------------------
def _all_text_under(folder: Path) -> str:
    out = []
    for path in folder.rglob("*"):
        if path.is_file():
            out.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.fixture
def debug_logs() -> Any:
    """Every log record of every logger, at DEBUG, formatted with its arguments."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _assert_no_secret(where: str, text: str) -> None:
    for secret in (SECRET, ENV_SECRET):
        assert secret not in text, f"the API key leaked into {where}"
        assert secret[3:15] not in text, f"a part of the API key leaked into {where}"


@pytest.mark.llm
def test_api_key_never_in_logs_traces_explain_or_files(llm_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       debug_logs: io.StringIO, capfd: pytest.CaptureFixture[str]) -> None:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.openai_like import OpenAILike

    import ayo_langchain
    import ayo_llamaindex
    from ayo_core.models import embedding_model_path

    home, cwd = tmp_path / "ayo_home", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("AYO_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    monkeypatch.chdir(cwd)
    produced: list[tuple[str, str]] = []
    git_before = _git_status()

    llm = OpenAILike(model="SmolLM2-135M-Instruct", api_base=llm_url, api_key=SECRET, is_chat_model=True,
                     temperature=0.0, max_tokens=6)
    embed = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    index = VectorStoreIndex.from_documents([Document(text="json.dumps turns objects into JSON text.")],
                                            embed_model=embed)
    stock_qe = index.as_query_engine(llm=llm, similarity_top_k=1)
    fast_qe = ayo_llamaindex.optimize(stock_qe)
    answer = fast_qe.query("How do I write JSON?")
    assert str(answer) == str(stock_qe.query("How do I write JSON?"))
    produced += [("LlamaIndex explain()", str(fast_qe.explain())), ("LlamaIndex repr", repr(fast_qe)),
                 ("LlamaIndex trace", json.dumps(fast_qe.last_trace.to_dict(), default=str))]
    fast_qe.last_trace.save_chrome(home / "traces" / "li.json")

    chain = (ChatPromptTemplate.from_messages([("human", "Say {word}.")])
             | ChatOpenAI(model="SmolLM2-135M-Instruct", base_url=llm_url, api_key=SECRET, temperature=0, max_tokens=6)
             | StrOutputParser())
    fast_chain = ayo_langchain.optimize(chain)
    assert fast_chain.invoke({"word": "hello"}) == chain.invoke({"word": "hello"})
    produced += [("LangChain explain()", str(fast_chain.explain())), ("LangChain repr", repr(fast_chain))]
    trace = getattr(fast_chain, "last_trace", None)
    if trace is not None:
        produced.append(("LangChain trace", json.dumps(trace.to_dict(), default=str)))
        trace.save_chrome(home / "traces" / "lc.json")

    # An error path: the server rejects an unknown model; the error names the engine, not the key.
    bad = ayo_langchain.optimize(chain.first | ChatOpenAI(model="no-such-model", base_url=llm_url, api_key=SECRET,
                                                          max_tokens=4, max_retries=0))
    with pytest.raises(Exception) as err:  # noqa: PT011 - whatever stock raises; only its text matters here
        bad.invoke({"word": "hi"})
    produced.append(("error message", f"{err.value!r} {err.value} {getattr(err.value, '__notes__', '')}"))

    assert list(cwd.iterdir()) == [], "a run wrote into the working directory"
    assert _git_status() == git_before, "a run left files in the checkout"
    out, errout = capfd.readouterr()
    produced += [("logs", debug_logs.getvalue()), ("stdout", out), ("stderr", errout),
                 ("files under AYO_HOME and cwd", _all_text_under(tmp_path))]
    assert "HTTP Request: POST" in debug_logs.getvalue()  # the DEBUG capture really saw the requests
    for where, text in produced:
        _assert_no_secret(where, text)


# ---- where files go --------------------------------------------------------------------
def test_files_written_only_where_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every library write goes to a path derived from ``$AYO_HOME`` or a path argument (static scan), and
    a run of both adapters with a trace saved leaves nothing in the working directory or the checkout."""
    for path in library_files():
        text = path.read_text(encoding="utf-8")
        if "/tmp" in text.replace("/tmp_", ""):
            pytest.fail(f"{path.relative_to(REPO)} hard-codes /tmp")
        if 'Path.home()' in text and "AYO_HOME" not in text:
            pytest.fail(f"{path.relative_to(REPO)} writes under the home folder without $AYO_HOME")
    before = _git_status()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("AYO_HOME", str(tmp_path / "home"))
    from ayo_core.engines.registry import get_vector_store, reset_engines

    store = get_vector_store()  # the default Chroma folder: under $AYO_HOME
    try:
        assert Path(store.path).is_relative_to(tmp_path / "home"), store.path
    finally:
        reset_engines()
    assert list(cwd.iterdir()) == []
    assert _git_status() == before, "a run left files in the checkout"


def _git_status() -> str:
    return subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout
