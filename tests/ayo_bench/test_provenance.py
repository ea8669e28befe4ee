"""Provenance of a results file: commit and dirty flag, server version, flags, dtype, model, machine, date.

The server is a loopback stub answering vLLM's ``/version``, ``/v1/models`` and ``/metrics``
(the real server's answers, trimmed), so the test needs no vLLM.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ayo_bench import provenance
from tests.stub_http import JSONHandler, LoopbackServer

REPO = Path(__file__).resolve().parents[2]
METRICS = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="32",cache_dtype="auto",'
           'enable_prefix_caching="True",engine="0",kv_cache_memory_bytes="2147483648",num_gpu_blocks="1456"} 1.0\n')


class FakeVLLM(LoopbackServer):
    def __init__(self) -> None:
        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/version":
                    self.reply(200, b'{"version": "0.32.0"}')
                elif self.path == "/v1/models":
                    self.reply(200, json.dumps({"data": [{"id": "SmolLM2-135M-Instruct", "max_model_len": 8192,
                                                          "root": "/cache/models/SmolLM2-135M-Instruct-float32"}]})
                               .encode())
                elif self.path == "/metrics":
                    self.reply(200, METRICS.encode(), kind="text/plain")
                else:
                    self.reply(404, b"{}")

        super().__init__(Handler)


@pytest.fixture
def server() -> Iterator[FakeVLLM]:
    s = FakeVLLM()
    yield s
    s.close()


def test_every_field_is_present_for_a_server_ayo_started(server: FakeVLLM) -> None:
    p = provenance.collect(server.url, started_by_ayo=True, dtype="float32")
    assert re.fullmatch(r"[0-9a-f]{40}", p["git"]["commit"]) and isinstance(p["git"]["dirty"], bool)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["date"])
    assert {"cpu", "cores", "python", "os"} <= set(p["machine"])
    srv = p["server"]
    assert (srv["version"], srv["model"], srv["dtype"], srv["max_model_len"]) == ("0.32.0", "SmolLM2-135M-Instruct",
                                                                                  "float32", 8192)
    assert srv["cache_config"] == {"block_size": "32", "cache_dtype": "auto", "enable_prefix_caching": "True",
                                   "kv_cache_memory_bytes": "2147483648", "num_gpu_blocks": "1456"}
    flags = srv["launch_flags"]
    # the flags of Ayo's own launcher, for this server
    assert flags[flags.index("--dtype") + 1] == "float32" and flags[flags.index("--port") + 1] == str(
        server.url.split(":")[-1].split("/")[0])
    assert "--enforce-eager" in flags and "--enable-prefix-caching" in flags and not srv["url_given"]
    assert flags[flags.index("--tool-call-parser") + 1] == "hermes"  # serve_llm's default for the default model
    json.dumps(p)  # it goes into a JSON file as is


def test_a_server_given_by_url_says_what_is_unknown(server: FakeVLLM) -> None:
    srv = provenance.collect(server.url, started_by_ayo=False, dtype="float32")["server"]
    assert srv["url_given"] and srv["launch_flags"] is None
    assert srv["dtype"] == "float32" and "inferred" in srv["dtype_source"]


def test_an_unreachable_server_leaves_blanks_not_an_error() -> None:
    srv = provenance.collect("http://127.0.0.1:9/v1", started_by_ayo=False, dtype="float32")["server"]
    assert srv["version"] is None and srv["dtype"] is None


def test_a_folder_outside_a_checkout_has_no_commit(tmp_path: Path) -> None:
    assert provenance.git_state(tmp_path)["commit"] is None
    assert provenance.git_state(REPO)["commit"] is not None


def test_compare_results_carry_provenance(server: FakeVLLM, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ayo_bench import compare

    cfg = SimpleNamespace(model="SmolLM2-135M-Instruct", max_tokens=64)
    args = compare.parse_args(["naive_rag", "-n", "2", "--out", str(tmp_path / "out-compare")])
    head = compare.header(cfg, args, 0.3, server.url, llm_given=False)  # type: ignore[arg-type]
    assert provenance.machine_paths(head) == [] and head["command"].endswith("--out .../out-compare")
    assert head["provenance"]["server"]["version"] == "0.32.0" and head["recorded_llm_requests"]
    assert head["date"] == head["provenance"]["date"] and head["machine"] == head["provenance"]["machine"]


def _repo(tmp_path: Path) -> Path:
    """A committed git repo with a source file, a results folder and a .gitignore for generated files."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "a.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text((REPO / ".gitignore").read_text())  # the project's own ignore list
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return tmp_path


def test_a_clean_commit_is_clean_and_a_tracked_edit_is_dirty(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert provenance.git_state(repo)["dirty"] is False
    (repo / "code.py").write_text("x = 2\n")
    state = provenance.git_state(repo)
    assert state["dirty"] is True and state["changes"] == {"count": 1, "first": [" M code.py"]}


def test_the_runs_own_outputs_do_not_make_the_tree_dirty(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    # an earlier benchmark of the same sequence rewrote a results file: the code is still the commit's
    (repo / "benchmarks" / "results" / "a.json").write_text('{"new": 1}')
    (repo / "benchmarks" / "results" / "b.json").write_text("{}")
    # the run's own --out folder, inside the tree, and a generated artifact the project ignores
    (repo / "out-run").mkdir()
    (repo / "out-run" / "naive_rag.json").write_text("{}")
    (repo / "benchmarks" / "results" / "naive_rag.trace.json").write_text("{}")
    (repo / ".pyshim").mkdir()  # a benchmark worktree's import links (.gitignore)
    (repo / ".pyshim" / "ayo_shims").symlink_to(repo / "benchmarks")
    (repo / "code.cpython-311.pyc").write_bytes(b"")
    assert provenance.git_state(repo, outputs=(repo / "out-run",))["dirty"] is False
    assert provenance.git_state(repo, outputs=("out-run",))["dirty"] is False
    # the same folder not named as the run's output is an untracked folder like any other
    assert provenance.git_state(repo)["dirty"] is True


def test_a_stray_untracked_source_makes_the_tree_dirty(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "helper.py").write_text("y = 1\n")  # imported as readily as a tracked file
    state = provenance.git_state(repo, outputs=(repo / "out-run",))
    assert state["dirty"] is True and state["changes"]["first"] == ["?? pkg/helper.py"]


def test_code_imported_from_another_checkout_is_dirty(tmp_path: Path) -> None:
    """A worktree whose ``ayo_shims`` came from the main checkout's editable install ran that code."""
    repo = _repo(tmp_path)
    assert provenance.git_state(repo)["dirty"] is False
    state = provenance.code_state(repo)  # this process imported ayo_bench from REPO, not from tmp_path
    assert state["dirty"] is True and "ayo_bench" in state["imported_elsewhere"]
    assert provenance.imported_elsewhere(REPO) == []


def test_no_machine_path_in_provenance(server: FakeVLLM) -> None:
    p = provenance.collect(server.url, started_by_ayo=True, dtype="float32")
    assert provenance.machine_paths(p) == [], provenance.machine_paths(p)
    flags = p["server"]["launch_flags"]
    assert flags[flags.index("--chat-template") + 1] == "ayo_core/engines/chat_templates/smollm2_tools.jinja"
    assert p["git"]["source"] == "git checkout"


def test_paths_are_shown_relative_to_the_checkout_or_not_at_all(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("AYO_HOME", str(tmp_path / "ayo-home"))
    shown = provenance.portable({"cmd": f"ayo compare all --out {tmp_path}/out-compare", "n": 3,
                                 "model": [str(tmp_path / "ayo-home" / "models" / "m-float32")],
                                 "template": str(REPO / "ayo_core" / "x.jinja"),
                                 "url": "http://127.0.0.1:8000/v1/models", "endpoint": "/v1/completions"})
    assert shown == {"cmd": "ayo compare all --out .../out-compare", "n": 3, "model": ["$AYO_HOME/models/m-float32"],
                     "template": "ayo_core/x.jinja", "url": "http://127.0.0.1:8000/v1/models",
                     "endpoint": "/v1/completions"}  # an API path is no machine's folder
    assert provenance.machine_paths(shown) == []
