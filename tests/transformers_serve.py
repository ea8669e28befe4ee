"""A second OpenAI-compatible server for the tests: ``transformers serve --continuous-batching``.

It serves the prepared SmolLM2 folder (float32, greedy at temperature 0) on loopback under the
name vLLM serves it by (``SmolLM2-135M-Instruct``: a pinned server answers only for the name it
was given, so the folder is linked under that name), with a small paged KV cache: by default
it reserves most of the machine's memory for it (13.7 GiB seen here). What it lacks next to
vLLM (no ``priority``: 422; no ``/metrics``, ``/tokenize``, ``/reset_prefix_cache``; no
``cached_tokens``; no structured outputs; no ``data: [DONE]``) is what the tests run into.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

SERVED_NAME = "SmolLM2-135M-Instruct"
KV_BLOCKS, KV_BLOCK_SIZE = 384, 32  # 12k tokens of KV cache, ~0.55 GiB in float32


class ServeUnavailable(RuntimeError):
    """The serve command cannot run in this environment (the reason says what is missing)."""


def missing_requirements() -> str | None:
    """Why ``transformers serve`` cannot start here, or None."""
    for module, pip in (("transformers.cli.serve", "transformers>=5"), ("fastapi", "fastapi"),
                        ("uvicorn", "uvicorn")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"transformers serve needs {module} (pip install {pip}); it is not installed"
    return None


def _command(port: int) -> list[str]:
    code = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; main()"
    return [sys.executable, "-c", code, "serve", "--continuous-batching", "--dtype", "float32", "--device", "cpu",
            "--cb-num-blocks", str(KV_BLOCKS), "--cb-block-size", str(KV_BLOCK_SIZE),
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "info", SERVED_NAME]


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _warm_up(base_url: str) -> None:
    """One tiny request: the first one sets up the continuous-batching manager (10-30 s on 2 busy cores),
    which would otherwise land in the first test's client timeout."""
    body = json.dumps({"model": SERVED_NAME, "messages": [{"role": "user", "content": "Hi"}],
                       "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(base_url + "/chat/completions", body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as resp:
        resp.read()


@contextlib.contextmanager
def serve_transformers(model_folder: Path, startup_timeout: float = 300.0) -> Iterator[str]:
    """Run the server until the block exits; yields its base URL (``.../v1``)."""
    reason = missing_requirements()
    if reason:
        raise ServeUnavailable(reason)
    from ayo_core.engines.llm_server import free_port

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ayo-transformers-serve-") as tmp:
        (Path(tmp) / SERVED_NAME).symlink_to(model_folder.resolve(), target_is_directory=True)
        log = Path(tmp) / "serve.log"
        # One compute thread: on 2 cores shared with other processes torch's thread pool spins
        # (48 greedy tokens took 143 s with the default threads, 7.6 s with one).
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        with open(log, "wb") as out:
            proc = subprocess.Popen(_command(port), cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            root = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + startup_timeout
            while _get(root + "/health") != 200:
                if proc.poll() is not None:
                    raise RuntimeError(f"transformers serve exited with {proc.returncode} while starting:\n"
                                       f"{_tail(log)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"transformers serve was not healthy after {startup_timeout:.0f} s:\n"
                                       f"{_tail(log)}")
                time.sleep(0.5)
            _warm_up(root + "/v1")
            yield root + "/v1"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
