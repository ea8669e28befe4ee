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
from launching it (``vllm-cpu`` environment); else the server's ``/server_info`` (vLLM in
dev mode reports its ``device_config``); else unknown (treated as an accelerator).
Prefix warming reads it through :mod:`ayo_core.engines.capabilities` (with the server's
prefix-cache settings) and decides in :mod:`ayo_core.engines.prefix_warming`.
"""

from __future__ import annotations

import logging
import os
import re
import threading

import httpx

log = logging.getLogger(__name__)

_launched: dict[str, str] = {}
_probed: dict[str, str | None] = {}
_lock = threading.Lock()


def _root(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def note_launched(url: str, device: str) -> None:
    """Record the device of a server Ayo started (``url``: its base or root URL)."""
    with _lock:
        _launched[_root(url)] = device


def known_device(url: str) -> str | None:
    """The device without asking the server: ``$AYO_LLM_DEVICE``, then what Ayo launched."""
    forced = os.environ.get("AYO_LLM_DEVICE", "").strip().lower()
    if forced:
        return forced
    with _lock:
        return _launched.get(_root(url))


async def llm_device(url: str) -> str | None:
    """``"cpu"``, ``"cuda"``, ... or None when nothing says (asked once per server)."""
    device = known_device(url)
    if device is not None:
        return device
    root = _root(url)
    if root not in _probed:
        _probed[root] = await _probe(root)
    return _probed[root]


async def _probe(root: str) -> str | None:
    try:
        async with httpx.AsyncClient(timeout=2.0) as client:
            resp = await client.get(f"{root}/server_info")
        match = re.search(r"device_config=(\w+)", resp.text) if resp.status_code == 200 else None
        return match.group(1).lower() if match else None
    except Exception:  # noqa: BLE001 - no such endpoint (production mode): nothing learned
        return None


async def early_prefill_pays(url: str) -> bool:
    """Whether prefilling prompt prefixes ahead of their requests can overlap real work."""
    return (await llm_device(url)) != "cpu"


def vllm_environment_device(python: os.PathLike[str] | str) -> str:
    """``"cpu"`` when the vLLM environment of ``python`` holds the ``vllm-cpu`` build, else ``"cuda"``."""
    from pathlib import Path

    env = Path(python).absolute().parent.parent  # the venv (not resolved: its python links elsewhere)
    return "cpu" if any(env.glob("lib/python*/site-packages/vllm_cpu-*.dist-info")) else "cuda"
