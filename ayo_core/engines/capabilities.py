"""What an LLM server can do for prefix warming: prefix caching, its KV block size, its device, /tokenize.

Prefix warming (the paper's prefill splitting) pays only where the server caches prompt
prefixes, and only whole KV blocks of them; and only on an accelerator (the device rule,
:mod:`ayo_core.engines.device`). vLLM states its cache settings on ``/metrics``
(``vllm:cache_config_info{enable_prefix_caching="True",block_size="32",...}``); they are
read once per server. A server without ``/metrics`` (``transformers serve``, other
OpenAI-compatible servers) says nothing, and the defaults apply; one whose ``/tokenize``
answered 404 is noted (:func:`note_no_tokenize`) and never warmed, since warming needs its
token ids. The device is asked of :mod:`~ayo_core.engines.device` each time
(``$AYO_LLM_DEVICE`` may change between runs; the server probe itself is cached there).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from ayo_core.engines.device import llm_device, prefill_pays_on

log = logging.getLogger(__name__)

_cache_info: dict[str, tuple[bool | None, int | None]] = {}
_without_tokenize: set[str] = set()  # roots whose /tokenize answered 404 (not vLLM: transformers serve, ...)
_lock = threading.Lock()


def root_url(url: str) -> str:
    """The server root of a base URL (``http://h:p/v1`` -> ``http://h:p``)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


@dataclass(frozen=True)
class ServerCapabilities:
    """What one LLM server says about itself; None where it does not say."""

    root_url: str
    device: str | None = None  # "cpu", "cuda", ...
    prefix_caching: bool | None = None
    block_size: int | None = None
    # False once the server answered /tokenize with 404: prefix warming cannot know a token prefix there
    tokenizes: bool | None = None

    @property
    def early_prefill_pays(self) -> bool:
        """The device rule (:func:`ayo_core.engines.device.prefill_pays_on`)."""
        return prefill_pays_on(self.device)

    @property
    def caches_prefixes(self) -> bool:
        """False only when the server says its prefix cache is off (unknown counts as on)."""
        return self.prefix_caching is not False


async def server_capabilities(url: str) -> ServerCapabilities:
    """The capabilities of the server at ``url`` (base or root URL); its cache settings are fetched once."""
    root = root_url(url)
    with _lock:
        known = _cache_info.get(root)
    if known is None:
        answered, known = await _fetch_cache_info(root)
        if answered:  # no answer this time (a busy machine): ask again next time
            with _lock:
                _cache_info.setdefault(root, known)
    with _lock:
        tokenizes = False if root in _without_tokenize else None
    return ServerCapabilities(root, await llm_device(root), *known, tokenizes=tokenizes)


def note_no_tokenize(url: str) -> None:
    """The server at ``url`` has no ``/tokenize`` (it answered 404): Ayo stops asking it for token prefixes."""
    root = root_url(url)
    with _lock:
        known = root in _without_tokenize
        _without_tokenize.add(root)
    if not known:
        log.info("LLM server at %s has no /tokenize: prefix warming is off there (answers are unchanged)", root)


async def _fetch_cache_info(root: str) -> tuple[bool, tuple[bool | None, int | None]]:
    """(whether the server answered, its (prefix caching, block size) where ``/metrics`` says them)."""
    try:
        async with httpx.AsyncClient(timeout=2.0) as client:
            resp = await client.get(f"{root}/metrics")
    except (httpx.HTTPError, OSError):  # no answer: nothing learned this time (defaults apply)
        log.debug("no answer from /metrics at %s", root, exc_info=True)
        return False, (None, None)
    line = next((ln for ln in resp.text.splitlines() if ln.startswith("vllm:cache_config_info{")), "")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    if not labels:
        return resp.status_code < 500, (None, None)
    return True, (labels.get("enable_prefix_caching") == "True", int(labels.get("block_size") or 0) or None)


async def prefix_cache_info(url: str | None) -> dict[str, Any] | None:
    """``{"prefix_caching": bool, "block_size": int | None}`` of the server at ``url``, or None when
    it does not say (no ``/metrics``, or no URL)."""
    if not url:
        return None
    caps = await server_capabilities(url)
    if caps.prefix_caching is None:
        return None
    return {"prefix_caching": caps.prefix_caching, "block_size": caps.block_size}


def forget(url: str | None = None) -> None:
    """Drop the cached settings of one server (all when None), e.g. after it restarted with other flags."""
    with _lock:
        if url is None:
            _cache_info.clear()
            _without_tokenize.clear()
        else:
            _cache_info.pop(root_url(url), None)
            _without_tokenize.discard(root_url(url))
