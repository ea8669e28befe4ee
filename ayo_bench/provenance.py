"""Where a results file's numbers come from: code, server, model, machine, date.

Every results file ``ayo compare`` writes (and the configuration benchmarks in a checkout)
carries a ``provenance`` object::

    {"schema": 1, "date": ..., "git": {"commit", "dirty", "source"}, "ayo_version": ...,
     "machine": {...}, "server": {"url_given", "version", "model", "model_root", "dtype",
     "dtype_source", "max_model_len", "launch_flags", "cache_config"}}

The server part is asked of the server itself (``/version``, ``/v1/models``, and vLLM's
``vllm:cache_config_info`` on ``/metrics``); the launch flags are the ones Ayo's
``ayo_core.engines.llm_server.LLMServer`` passes when Ayo started the server, and
``None`` for a server given by URL (Ayo cannot know how someone else launched it).
``benchmarks/readme_table.py`` builds the README table's header from it and ``--check``
compares its commit with the README's.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger("ayo.compare.provenance")
SCHEMA = 1
_CHECKOUT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """CPU model, core count, Python and OS of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "os": platform.platform(),
            "hostname": platform.node()}


RESULTS_PATH = "benchmarks/results"  # committed results, relative to the checkout


def git_state(folder: Path = _CHECKOUT) -> dict[str, Any]:
    """The checkout's commit and whether its files differ from it (tracked changes or untracked, not ignored,
    files), not counting ``benchmarks/results/``: results are what a run writes, not what it runs (a
    sequence of benchmarks that writes there would otherwise call every later run dirty)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        if not (folder / ".git").exists():  # installed into a venv: a repo around it is not Ayo's
            raise FileNotFoundError(f"{folder / '.git'} does not exist")
        commit = git("rev-parse", "HEAD")
        # untracked sources change results too
        dirty = bool(git("status", "--porcelain", "--", ".", f":(exclude){RESULTS_PATH}"))
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("no git checkout at %s (%s): provenance names the installed version only", folder, exc)
        return {"commit": None, "dirty": None, "source": "installed package (no git checkout)"}
    return {"commit": commit, "dirty": dirty, "source": str(folder)}


def ayo_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ayo")
    except PackageNotFoundError:
        return None


def _root(url: str) -> str:
    return url.rstrip("/").removesuffix("/v1")


def server_facts(llm_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """What the LLM server says about itself: version, served model, its folder, cache settings."""
    root = _root(llm_url)
    out: dict[str, Any] = {"version": None, "model": None, "model_root": None, "max_model_len": None,
                           "cache_config": None}
    with httpx.Client(timeout=timeout) as client:
        try:
            out["version"] = client.get(f"{root}/version").json().get("version")
            model = client.get(f"{root}/v1/models").json()["data"][0]
            out.update(model=model.get("id"), model_root=model.get("root"), max_model_len=model.get("max_model_len"))
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            log.warning("the LLM server at %s did not say its version/model: %s", root, exc)
        try:
            out["cache_config"] = cache_config(client.get(f"{root}/metrics").text)
        except httpx.HTTPError as exc:
            log.warning("the LLM server at %s has no /metrics: %s", root, exc)
    return out


_CACHE_KEYS = ("block_size", "enable_prefix_caching", "cache_dtype", "kv_cache_memory_bytes", "num_gpu_blocks")


def cache_config(metrics: str) -> dict[str, str] | None:
    """The few settings of vLLM's ``vllm:cache_config_info`` gauge that change results."""
    match = re.search(r"^vllm:cache_config_info\{(.*)\}", metrics, re.MULTILINE)
    if not match:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
    return {k: labels[k] for k in _CACHE_KEYS if k in labels}


def launch_flags(llm_url: str, model_root: str | None, dtype: str) -> list[str]:
    """The flags Ayo's ``serve_llm()`` starts vLLM with (default model), for the server at ``llm_url``."""
    from urllib.parse import urlsplit

    from ayo_core.engines.llm_server import LLMServer, tool_calling_args

    where = urlsplit(llm_url)
    # what serve_llm() adds for the default model (ayo compare starts that): tool calling
    extra = tool_calling_args("auto", None, default_model=True)
    # python given so no vLLM environment is looked up: only the flags are read
    server = LLMServer(Path(model_root or "MODEL"), port=where.port or 0, dtype=dtype, host=where.hostname or "",
                       extra_args=extra, python=Path(sys.executable))
    return server.command()[3:]  # after "<python> -m vllm.entrypoints.openai.api_server"


def dtype_of(model_root: str | None) -> str | None:
    """The dtype of a model folder prepared by ``ayo models prepare`` (its name ends with it)."""
    match = re.search(r"-(float32|bfloat16|float16)$", (model_root or "").rstrip("/"))
    return match.group(1) if match else None


def collect(llm_url: str | None, started_by_ayo: bool, dtype: str) -> dict[str, Any]:
    """The ``provenance`` object of a results file (see the module docstring); ``llm_url=None``:
    no LLM server took part (a benchmark on fake engines), ``server`` is None."""
    head = {"schema": SCHEMA, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git": git_state(), "ayo_version": ayo_version(), "machine": machine()}
    if llm_url is None:
        return {**head, "server": None}
    server = server_facts(llm_url)
    if started_by_ayo:
        server.update(url_given=False, dtype=dtype, dtype_source="the dtype Ayo launched the server with",
                      launch_flags=launch_flags(llm_url, server["model_root"], dtype))
    else:
        server.update(url_given=True, dtype=dtype_of(server["model_root"]),
                      dtype_source="inferred from the served model's folder name (server given by AYO_LLM_URL)",
                      launch_flags=None)
    return {**head, "server": server}
