"""serve_llm: clear errors, and no process left behind.

Most tests run a fake ``vllm.entrypoints.openai.api_server`` (a tiny HTTP server
that also spawns a grandchild, like vLLM's engine core) through the real
launcher; one test starts the real vLLM server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from ayo_core.engines import llm_server
from ayo_core.engines.llm_server import LLMServer, LLMServerError, find_vllm_python, free_port, serve_llm

FAKE_SERVER = textwrap.dedent('''
    import http.server, os, subprocess, sys
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    pid_file = os.environ["FAKE_VLLM_PIDS"]
    if os.environ.get("FAKE_VLLM_FAIL"):
        print("fake vllm: cannot load model", flush=True)
        sys.exit(3)
    child = subprocess.Popen(["sleep", "600"])  # stands in for vLLM's engine-core process
    with open(pid_file, "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}")
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    print("fake vllm: serving", args, flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A fake vLLM environment: AYO_VLLM_PYTHON points at a wrapper that puts the fake module on the path."""
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={tmp_path / 'fake'}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("AYO_VLLM_PYTHON", str(wrapper))
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("AYO_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AYO_LLM_URL", raising=False)
    return {"model": model, "pids": tmp_path / "pids"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent's wait() is missing.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _gone(pids: list[int], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def test_serve_llm_stops_the_process_group_on_normal_exit(fake_vllm):
    with serve_llm(model=fake_vllm["model"], startup_timeout=60) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        with urllib.request.urlopen(url[:-3] + "/health", timeout=5) as resp:
            assert resp.status == 200
        pids = _pids(fake_vllm["pids"])
        assert all(_alive(p) for p in pids)
    assert _gone(pids), "server or its child outlived serve_llm"


def test_serve_llm_stops_the_process_group_on_exception(fake_vllm):
    with pytest.raises(KeyError), serve_llm(model=fake_vllm["model"], startup_timeout=60):
        pids = _pids(fake_vllm["pids"])
        raise KeyError("boom")
    assert _gone(pids)


def test_startup_failure_reports_the_log_tail(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    with pytest.raises(LLMServerError, match="exited with code 3") as info:
        with serve_llm(model=fake_vllm["model"], startup_timeout=60):
            pass
    assert "fake vllm: cannot load model" in str(info.value)


def test_server_dies_with_a_killed_parent(fake_vllm, tmp_path):
    """SIGKILL skips atexit; the launcher's parent-death signal still stops the server *and* its
    engine core (the fake's child: it ignores its parent's death, as a real engine core may)."""
    script = textwrap.dedent(f'''
        import time
        from ayo_core.engines.llm_server import serve_llm
        with serve_llm(model={str(fake_vllm["model"])!r}, startup_timeout=60) as url:
            print(url, flush=True)
            time.sleep(600)
    ''')
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[3])
    try:
        assert parent.stdout is not None and parent.stdout.readline().startswith("http://")
        server_pid, child_pid = _pids(fake_vllm["pids"])
        parent.kill()
        parent.wait()
        assert _gone([server_pid, child_pid]), "the engine core outlived the killed parent"
    finally:
        parent.kill()
        for pid in _pids(fake_vllm["pids"]):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_dead_api_process_takes_its_engine_core_with_it(fake_vllm):
    """The launcher stays above vLLM: when the API process dies (here SIGKILL, as an OOM kill would)
    the launcher ends the rest of the group and exits the way vLLM did."""
    server = LLMServer(fake_vllm["model"], free_port(), python=find_vllm_python(), max_restarts=0)
    server.start(timeout=60)
    try:
        api_pid, engine_core_pid = _pids(fake_vllm["pids"])
        assert server.vllm_pid() == api_pid != server.proc.pid  # the launcher is the group leader
        os.kill(api_pid, signal.SIGKILL)
        assert _gone([api_pid, engine_core_pid]), "the engine core outlived its API process"
        assert server.proc.wait(timeout=20) == -signal.SIGKILL
    finally:
        server.stop()


def test_a_killed_launcher_still_stops_vllm(fake_vllm):
    server = LLMServer(fake_vllm["model"], free_port(), python=find_vllm_python(), max_restarts=0)
    server.start(timeout=60)
    try:
        api_pid = _pids(fake_vllm["pids"])[0]
        os.kill(server.proc.pid, signal.SIGKILL)  # nothing left to run the launcher's own cleanup
        assert _gone([api_pid]), "vLLM outlived its killed launcher"
    finally:
        server.stop()


def test_busy_port_names_the_port_and_the_fix(monkeypatch):
    monkeypatch.delenv("AYO_LLM_URL", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LLMServerError, match=f"port {port} .*already in use") as info:
            with serve_llm(port=port):
                pass
    assert "port=None" in str(info.value)


def test_missing_model_folder_says_what_to_run(fake_vllm, tmp_path):
    with pytest.raises(LLMServerError, match="ayo models prepare") as info:
        with serve_llm(model=tmp_path / "no-such-model"):
            pass
    assert "make demo" in str(info.value)


def test_missing_vllm_environment_says_what_to_run(monkeypatch, tmp_path):
    monkeypatch.delenv("AYO_LLM_URL", raising=False)
    monkeypatch.delenv("AYO_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(llm_server, "_REPO_ROOT", tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LLMServerError, match="make demo"):
        with serve_llm():
            pass
    monkeypatch.setenv("AYO_VLLM_PYTHON", str(tmp_path / "nothing" / "python"))
    with pytest.raises(LLMServerError, match="AYO_VLLM_PYTHON"):
        with serve_llm():
            pass


def test_ayo_llm_url_is_reused_without_starting_anything(monkeypatch):
    monkeypatch.setenv("AYO_LLM_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("AYO_VLLM_PYTHON", "/definitely/not/here")
    with serve_llm() as url:
        assert url == "http://127.0.0.1:1/v1"


def test_command_has_the_flags_ayo_relies_on(tmp_path):
    server = llm_server.LLMServer(tmp_path, 1234, python=Path("/x/python"), log_dir=tmp_path)
    cmd = server.command()
    for flag in ("--enable-prefix-caching", "--enforce-eager", "--enable-prompt-tokens-details"):
        assert flag in cmd
    assert cmd[cmd.index("--scheduling-policy") + 1] == "priority"
    assert cmd[cmd.index("--block-size") + 1] == "32"
    assert cmd[cmd.index("--port") + 1] == "1234" and cmd[cmd.index("--host") + 1] == "127.0.0.1"


@pytest.mark.llm
@pytest.mark.slow
def test_real_vllm_server_starts_answers_and_leaves_nothing(monkeypatch):
    """The one test that starts a real vLLM server (~30 s and ~4.5 GiB on CPU)."""
    monkeypatch.delenv("AYO_LLM_URL", raising=False)
    import asyncio

    import psutil

    from ayo_core.engines.llm_client import LLMEngine

    group: list[psutil.Process] = []
    with pytest.raises(RuntimeError, match="after the answer"):
        with serve_llm(dtype="float32", startup_timeout=400) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            result = asyncio.run(LLMEngine(url).complete("The capital of France is", max_tokens=4))
            assert result.completion_tokens >= 1
            (leader,) = [c.pid for c in psutil.net_connections("tcp")
                         if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN]
            pgid = os.getpgid(leader)
            group = [p for p in psutil.process_iter() if _pgid(p.pid) == pgid]
            assert len(group) >= 2, "expected the API server and vLLM's engine core in one group"
            raise RuntimeError("after the answer")
    assert _gone([p.pid for p in group]), "vLLM processes outlived serve_llm"
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # nothing listens on the port any more
    llm_server.check_port_free(port)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ayo_serve_prints_the_url_and_stops_cleanly(fake_vllm, sig):
    cmd = [sys.executable, "-c", "import sys; from ayo_core.engines.llm_server import main_serve; "
           "sys.exit(main_serve(sys.argv[1:]))", "--model", str(fake_vllm["model"])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[3])
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        pids = _pids(fake_vllm["pids"])
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert _gone(pids)
    finally:
        proc.kill()


def test_kv_cache_size_reaches_the_server(fake_vllm, monkeypatch):
    seen: dict[str, str] = {}
    real_popen = subprocess.Popen

    def spy(cmd, **kw):
        seen["kv"] = kw["env"]["VLLM_CPU_KVCACHE_SPACE"]
        return real_popen(cmd, **kw)

    monkeypatch.setattr(llm_server.subprocess, "Popen", spy)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")
    with serve_llm(model=fake_vllm["model"], kv_cache_gib=1.5, startup_timeout=60):
        pass
    assert seen["kv"] == "1.5"
    with serve_llm(model=fake_vllm["model"], startup_timeout=60):
        pass
    assert seen["kv"] == "7"
