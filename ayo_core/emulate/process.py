"""The emulated deployment as a child process: ``with EmulatorProcess(...) as em: em.base_url``.

It runs in a process of its own, as a real server does, so its event loop's work competes with the
client's for the CPU as vLLM's API server would, and never blocks the client's loop.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ayo_core.engines.llm_server import free_port

log = logging.getLogger(__name__)


class EmulatorProcess:
    """``ayo emulate serve`` on a free loopback port, stopped on exit."""

    def __init__(self, profile: str, store: str | Path, mode: str = "record", upstream: str | None = None,
                 embed_model: str | None = None, served_model: str | None = None) -> None:
        self.port = free_port()
        self.root_url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.root_url + "/v1"
        cmd = [sys.executable, "-m", "ayo_core.emulate.cli", "serve", "--profile", str(profile), "--store", str(store),
               "--mode", mode, "--port", str(self.port)]
        for flag, value in (("--upstream", upstream), ("--embed-model", embed_model), ("--served-model", served_model)):
            if value:
                cmd += [flag, value]
        self.command = cmd
        self._proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="ayo-emulate-", suffix=".log", delete=False)  # noqa: SIM115

    def __enter__(self) -> EmulatorProcess:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        self._proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"ayo emulate exited with {self._proc.returncode}: {self._tail()}")
            try:
                with urllib.request.urlopen(self.root_url + "/health", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"ayo emulate did not answer /health on {self.root_url} within 120 s: {self._tail()}")

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._log.close()

    def _tail(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-2000:]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.root_url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def set_mode(self, mode: str) -> dict[str, Any]:
        """``record`` (the real engines, real time, answers stored) or ``replay`` (the profile's time)."""
        return self._call("POST", "/emulate/mode", {"mode": mode})

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/emulate/stats")
