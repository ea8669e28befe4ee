"""Prefix warming: whether to prefill part of a prompt ahead of its request, and exactly what.

One algorithm for every adapter (the paper's prefill splitting, as vLLM's prefix cache
allows it):

1. **Whether** (:func:`warm_budget`): not on a CPU server (the device rule, see
   :mod:`ayo_core.engines.device`), not when the server's prefix cache is off, and only for
   at least ``max(min_tokens, block_size)`` tokens; the server's capabilities are read once
   (:mod:`ayo_core.engines.capabilities`). Optionally not while the engine already runs
   ``max_busy`` requests of real work (:func:`engine_busy`): a warm-up would take compute
   from them.
2. **What** (:func:`token_prefix`): the final request is rendered by the framework's own
   code twice, with two different stand-ins for the values not known yet; the server
   tokenizes both exactly as it will the final request (``/tokenize`` renders the chat
   template as the chat endpoint does); their common token prefix, minus
   ``SAFETY_TOKENS`` that may merge with what follows, is a token prefix of every final
   request. :func:`block_aligned` cuts it to whole KV blocks (the cache holds nothing else).
3. **Warm** (:func:`warm_ids`): one prefill-only request of those token ids.

The real request is never changed, so none of this can change an answer; at worst the
cache misses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ayo_core.engines.capabilities import server_capabilities

log = logging.getLogger(__name__)

STAND_INS = ("Zqxj", "Wvkp")  # two late-value stand-ins that share no first token
SAFETY_TOKENS = 2  # tokens at the early/late boundary that may merge with what follows
MIN_PREFILL_TOKENS = 32  # below one KV block (vLLM CPU: --block-size 32) a prefill warms nothing

_prefixes: dict[tuple[str, str], list[int]] = {}  # query-independent prefixes, per server and render


@dataclass(frozen=True)
class WarmBudget:
    """What a warm-up at one server must hold: ``least`` new tokens, in whole ``block_size`` blocks."""

    least: int
    block_size: int | None = None


async def warm_budget(url: str, min_tokens: int = MIN_PREFILL_TOKENS) -> WarmBudget | None:
    """The :class:`WarmBudget` at the server ``url``; None: do not warm there (a CPU server, or
    its prefix cache is off)."""
    caps = await server_capabilities(url)
    if not caps.early_prefill_pays or not caps.caches_prefixes or caps.tokenizes is False:
        return None
    return WarmBudget(max(min_tokens, caps.block_size or 0), caps.block_size)


async def least_tokens(url: str, min_tokens: int = MIN_PREFILL_TOKENS) -> int | None:
    """The fewest new tokens worth a warm-up at the server ``url``; None: do not warm there."""
    budget = await warm_budget(url, min_tokens)
    return None if budget is None else budget.least


def engine_busy(engine: Any, max_busy: int) -> bool:
    """The engine (a node's ``ctx.engine(kind)``) already runs ``max_busy`` requests of real work."""
    try:
        running = engine.running_requests
    except Exception:  # noqa: BLE001 - no statistics: assume idle
        return False
    return isinstance(running, int) and running >= max_busy


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def block_aligned(ids: Sequence[int], block_size: int | None) -> list[int]:
    """``ids`` cut to whole KV blocks (all of them when the block size is unknown)."""
    if not block_size:
        return list(ids)
    return list(ids[: len(ids) - len(ids) % block_size])


async def token_prefix(llm: Any, renders: Sequence[Mapping[str, Any]], safety: int = SAFETY_TOKENS) -> list[int]:
    """Token ids every final request starts with, from two ``tokenize`` argument sets (``{"messages":
    ...}`` or ``{"prompt": ...}``) rendering it with the two :data:`STAND_INS` for the late values."""
    first, second = await asyncio.gather(*(llm.tokenize(**r) for r in renders))
    return list(first)[: max(0, common_prefix(first, second) - safety)]


async def static_token_prefix(llm: Any, server: str, renders: Sequence[Mapping[str, Any]]) -> list[int]:
    """:func:`token_prefix` of a query-independent prefix (system prompt + template head): once per server."""
    key = (server, repr(renders))
    if key not in _prefixes:
        _prefixes[key] = await token_prefix(llm, renders)
    return _prefixes[key]


async def warm_ids(llm: Any, ids: Sequence[int], least: int, block_size: int | None = None, already: int = 0,
                   **request: Any) -> int:
    """Prefill the whole-block part of ``ids`` when it holds ``least`` tokens more than the ``already``
    warmed; ``request`` goes into the request (``cache_salt``). Returns the tokens sent (0: none)."""
    ids = block_aligned(ids, block_size)
    if len(ids) - already < least:
        return 0
    result = await llm.prefill(prompt=ids, **request)
    log.debug("warmed %d prompt tokens (%s cached)", len(ids), getattr(result, "cached_tokens", "?"))
    return len(ids)


async def warm_prefix(llm: Any, server: str, renders: Sequence[Mapping[str, Any]], min_tokens: int = MIN_PREFILL_TOKENS,
                      static: bool = False, **request: Any) -> int:
    """Steps 1-3 for one prompt: warm the token prefix the ``renders`` share, if it pays at ``server``."""
    budget = await warm_budget(server, min_tokens)
    if budget is None:
        return 0
    ids = await (static_token_prefix(llm, server, renders) if static else token_prefix(llm, renders))
    return await warm_ids(llm, ids, budget.least, budget.block_size, **request)
