"""An Ayo-launched LLM server that dies on its own is restarted on its port (at most ``max_restarts``
times); ``stop()`` is never mistaken for a crash. Runs the fake vLLM of tests/ayo_core/engines through
the real launcher (fast); the real server's kill-and-retry is in test_faults_llm.py."""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ayo_core.engines.llm_server import LLMServer, find_vllm_python, free_port  # noqa: E402
from tests.ayo_core.engines import test_llm_server as server_tests  # noqa: E402 - its fake vLLM and helpers

fake_vllm = server_tests.fake_vllm  # the fixture, used here under its own name
_alive, _gone, _pids = server_tests._alive, server_tests._gone, server_tests._pids

pytestmark = pytest.mark.slow


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _wait(predicate, timeout: float = 30.0) -> bool:  # noqa: ANN001 - a test helper
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _server(fake: dict, max_restarts: int) -> LLMServer:
    server = LLMServer(fake["model"], free_port(), python=find_vllm_python(), max_restarts=max_restarts)
    server.start(timeout=60)
    return server


def test_killed_server_comes_back_on_its_port(fake_vllm: dict) -> None:
    server = _server(fake_vllm, max_restarts=2)
    old = _pids(fake_vllm["pids"])
    try:
        os.kill(old[0], signal.SIGKILL)  # the API server dies; its engine core is orphaned
        assert _wait(lambda: _pids(fake_vllm["pids"]) != old and _healthy(server.root_url)), "not restarted"
        assert server.restarts == 1 and server.serving()
        assert _gone(old), "the dead server's engine core was left running"
    finally:
        new = _pids(fake_vllm["pids"])
        server.stop()
    assert _gone(new)
    time.sleep(1.5)  # the watcher runs every 0.5 s: a stop() must not look like a crash to it
    assert not _healthy(server.root_url) and server.restarts == 1


def test_restarts_are_bounded(fake_vllm: dict) -> None:
    server = _server(fake_vllm, max_restarts=1)
    try:
        first = _pids(fake_vllm["pids"])
        os.kill(first[0], signal.SIGKILL)
        assert _wait(lambda: _pids(fake_vllm["pids"]) != first and _healthy(server.root_url))
        second = _pids(fake_vllm["pids"])
        os.kill(second[0], signal.SIGKILL)
        assert _wait(lambda: not server.serving(), timeout=10), "a server past max_restarts still counts as serving"
        time.sleep(1.5)
        assert _pids(fake_vllm["pids"]) == second and not _healthy(server.root_url)
    finally:
        server.stop()
    assert _gone(first + second)


def test_no_restart_when_disabled(fake_vllm: dict) -> None:
    server = _server(fake_vllm, max_restarts=0)
    try:
        pids = _pids(fake_vllm["pids"])
        os.kill(pids[0], signal.SIGKILL)
        time.sleep(1.5)
        assert _pids(fake_vllm["pids"]) == pids and not server.serving() and not _alive(pids[0])
    finally:
        server.stop()


_PARENT = """
import os, signal, sys, time
from pathlib import Path
from ayo_core.engines.llm_server import LLMServer, find_vllm_python, free_port
server = LLMServer(Path(sys.argv[1]), free_port(), python=find_vllm_python(), max_restarts=2)
server.start(timeout=60)
pids_file = Path(os.environ["FAKE_VLLM_PIDS"])
first = pids_file.read_text()
os.kill(int(first.split()[0]), signal.SIGKILL)
while pids_file.read_text() == first or not server.healthy():
    time.sleep(0.1)
print("RESTARTED", flush=True)
time.sleep(600)
"""


def test_a_restarted_server_dies_with_a_killed_parent(fake_vllm: dict, tmp_path: Path) -> None:
    """The watcher starts the new server through the parent-death launcher too: SIGKILL (no atexit) of
    the process that supervised it does not leave it running."""
    import subprocess

    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]))
    parent = subprocess.Popen([sys.executable, str(script), str(fake_vllm["model"])], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert parent.stdout is not None and parent.stdout.readline().startswith("RESTARTED")
        restarted = _pids(fake_vllm["pids"])
        assert all(_alive(p) for p in restarted)
    finally:
        parent.kill()
        parent.wait(timeout=30)
    assert _gone(restarted[:1]), "the restarted server outlived its killed parent"
    for pid in restarted:  # the fake engine core is not tied to the server: clean it up
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
