"""Where a results file's numbers come from: code, server, model, machine, date.

Every results file ``ayo compare`` writes (and the configuration benchmarks in a checkout)
carries a ``provenance`` object::

    {"schema": 1, "date": ..., "git": {"commit", "dirty", "source", ["changes"], ["imported_elsewhere"]},
     "ayo_version": ...,
     "machine": {...}, "server": {"url_given", "version", "model", "model_root", "dtype",
     "dtype_source", "max_model_len", "launch_flags", "cache_config"}}

The server part is asked of the server itself (``/version``, ``/v1/models``, and vLLM's
``vllm:cache_config_info`` on ``/metrics``); the launch flags are the ones Ayo's
``ayo_core.engines.llm_server.LLMServer`` passes when Ayo started the server, and
``None`` for a server given by URL (Ayo cannot know how someone else launched it).
``benchmarks/readme_table.py`` builds the README table's header from it and ``--check``
compares its commit with the README's. No machine path goes into a results file
(:func:`portable`): paths are relative to the checkout, ``$AYO_HOME/...`` or ``.../NAME``.
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
# Ayo's first-party packages: a run's code is the checkout's only when every one of them was imported from it
FIRST_PARTY = ("ayo_core", "ayo_llamaindex", "ayo_langchain", "ayo_shims", "ayo_examples", "ayo_bench")
_SHOWN_CHANGES = 20  # how many changed paths a results file lists (the count is always complete)


def git_state(folder: Path = _CHECKOUT, outputs: tuple[Path | str, ...] = ()) -> dict[str, Any]:
    """The checkout's commit and whether its files differ from it.

    Dirty means any of: a tracked file changed; an untracked file that ``.gitignore`` does not
    ignore (an untracked source is imported as readily as a tracked one). Not counted: ``benchmarks/results/`` (what a run writes, not what
    it runs: a sequence of benchmarks that writes there would otherwise call every later run
    dirty) and ``outputs``, the run's own output files or folders (``--out``). The paths that made
    it dirty are listed (relative to the checkout) so a reader can judge them.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout

    try:
        if not (folder / ".git").exists():  # installed into a venv: a repo around it is not Ayo's
            raise FileNotFoundError(f"{folder / '.git'} does not exist")
        commit = git("rev-parse", "HEAD").strip()
        excluded = [f":(exclude){p}" for p in (RESULTS_PATH, *_inside(folder, outputs))]
        changes = [line for line in git("status", "--porcelain", "--untracked-files=all", "--", ".",
                                        *excluded).splitlines() if line]
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("no git checkout at %s (%s): provenance names the installed version only", folder, exc)
        return {"commit": None, "dirty": None, "source": "installed package (no git checkout)"}
    out: dict[str, Any] = {"commit": commit, "dirty": bool(changes), "source": "git checkout"}
    if changes:
        out["changes"] = {"count": len(changes), "first": changes[:_SHOWN_CHANGES]}
    return out


def code_state(folder: Path = _CHECKOUT, outputs: tuple[Path | str, ...] = ()) -> dict[str, Any]:
    """:func:`git_state` of the checkout this process's code is from, dirty too when a first-party
    package was imported from elsewhere (a worktree whose ``ayo_shims`` came from another checkout's
    editable install ran that checkout's code, whatever its own ``git status`` says)."""
    state = git_state(folder, outputs)
    foreign = imported_elsewhere(folder)
    if foreign and state["commit"] is not None:
        state.update(dirty=True, imported_elsewhere=foreign)
    return state


def _inside(folder: Path, paths: tuple[Path | str, ...]) -> list[str]:
    """``paths`` that lie inside ``folder``, relative to it (git pathspecs); others cannot make it dirty."""
    root = folder.resolve()
    inside = []
    for path in paths:
        resolved = (folder / path).resolve()
        if resolved.is_relative_to(root) and resolved != root:
            inside.append(str(resolved.relative_to(root)))
    return inside


def imported_elsewhere(folder: Path = _CHECKOUT) -> list[str]:
    """The first-party packages this process imported from outside ``folder`` (symlinks resolved),
    as ``package`` names: their code is not the commit's, whatever ``git status`` says."""
    root = folder.resolve()
    foreign = []
    for name in FIRST_PARTY:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where and not Path(where).resolve().is_relative_to(root):
            foreign.append(name)
    return foreign


# An absolute path ("/v1/models" in a URL does not match: the lookbehind keeps a path that follows a
# host name or another path character out); it is a machine's when its first folder is a usual
# filesystem root or exists here ("/v1/completions" alone is an API path, no folder)
_ABSOLUTE = re.compile(r"(?<![\w.:/~$-])/[^\s\"',;=]+")
_FILESYSTEM_ROOTS = {"tmp", "work", "home", "root", "Users", "var", "opt", "mnt", "srv", "private", "data", "scratch",
                     "usr", "etc", "nix"}


def _is_machine_path(path: str) -> bool:
    top = path.split("/")[1]
    return bool(top) and (top in _FILESYSTEM_ROOTS or Path("/", top).is_dir())


def shown_path(path: Path | str, checkout: Path = _CHECKOUT) -> str:
    """A path as a results file may hold it: relative inside the checkout, ``$AYO_HOME/...`` or
    ``~/...`` inside those, else ``.../NAME``: no machine's folder layout (a worktree location)."""
    from ayo_core.models import ayo_home

    resolved = Path(path).expanduser().resolve()
    for base, shown in ((checkout.resolve(), ""), (ayo_home().resolve(), "$AYO_HOME/"), (Path.home().resolve(), "~/")):
        if resolved == base:
            return shown.rstrip("/") or "."
        if resolved.is_relative_to(base):
            return f"{shown}{resolved.relative_to(base)}"
    return f".../{resolved.name}"


def portable(value: Any, checkout: Path = _CHECKOUT) -> Any:
    """``value`` (a results file's JSON, or a part of it) with every machine path rewritten by
    :func:`shown_path`, in strings and command lines alike; everything else unchanged."""
    if isinstance(value, dict):
        return {k: portable(v, checkout) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v, checkout) for v in value]
    if not isinstance(value, str) or "/" not in value:
        return value

    def rewrite(match: re.Match[str]) -> str:
        path = match.group(0)
        return shown_path(path, checkout) if _is_machine_path(path) else path

    return _ABSOLUTE.sub(rewrite, value)


def machine_paths(value: Any) -> list[str]:
    """The machine paths in ``value``'s strings (what :func:`portable` rewrites), wherever it was written."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in machine_paths(v)]
    if isinstance(value, list | tuple):
        return [p for v in value for p in machine_paths(v)]
    if not isinstance(value, str) or "/" not in value:
        return []
    return [m.group(0) for m in _ABSOLUTE.finditer(value) if _is_machine_path(m.group(0))]


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


def collect(llm_url: str | None, started_by_ayo: bool, dtype: str,
            outputs: tuple[Path | str, ...] = ()) -> dict[str, Any]:
    """The ``provenance`` object of a results file (see the module docstring); ``llm_url=None``:
    no LLM server took part (a benchmark on fake engines), ``server`` is None. ``outputs``: the
    run's own output files or folders (they do not make the tree dirty, :func:`git_state`).
    Machine paths come out as :func:`portable` writes them."""
    return portable(_collect(llm_url, started_by_ayo, dtype, outputs))


def _collect(llm_url: str | None, started_by_ayo: bool, dtype: str,
             outputs: tuple[Path | str, ...]) -> dict[str, Any]:
    head = {"schema": SCHEMA, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git": code_state(outputs=outputs), "ayo_version": ayo_version(), "machine": machine()}
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
