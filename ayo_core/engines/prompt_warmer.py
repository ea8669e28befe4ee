"""Warming one prompt whose values come in two waves: early ones (known at the start) and late ones.

The framework-independent half of prefill splitting inside a query graph (an adapter says
*what*: how its own code renders the request, where the late values come from; this module
does *how*, on :mod:`ayo_core.engines.prefix_warming`):

* :func:`early_late_split` decides from the lowerer's ready-time estimates which inputs of a
  prompt are early and whether the late ones come late enough for a warm-up to pay.
* :class:`PromptWarmer` renders token prefixes of the final request with stand-ins for the
  late values and prefills them: once when the early values exist (:meth:`PromptWarmer.static`)
  and, progressively, each time a late value grows by one more part of a pipelined producer
  (:meth:`PromptWarmer.progressive`): the partial value is rebuilt from the parts so far and
  the prompt is warmed up to its end, as long as each partial value is a prefix of the next.

None of this changes a result: if anything fails here, the query just does not get the warm cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ayo_core.engines.prefix_warming import STAND_INS, WarmBudget, engine_busy, token_prefix, warm_budget, warm_ids

log = logging.getLogger(__name__)

EARLY_S = 0.05  # a value estimated to exist this soon after the start counts as early


def early_late_split(sources: Mapping[str, str], ready: Mapping[str, float], min_lead: float,
                     skip: Sequence[str] = ()) -> tuple[list[str], list[str]] | None:
    """``(early keys, late keys)`` of a prompt whose values come from ``sources`` (key -> producer
    node, ``ready``: node -> estimated seconds after the start), or None when nothing is early,
    nothing is late, or the late values are expected less than ``min_lead`` seconds after the
    early ones. ``skip`` keys may be early but are never late (a base dict merged into the values)."""
    early = [k for k, node in sources.items() if ready.get(node, 0.0) <= EARLY_S]
    late = [k for k in sources if k not in early and k not in skip]
    if not early or not late:
        return None
    # Worth it only when the late values come well after the early ones: a prefill still
    # running when the full request arrives shares nothing with it and only competes.
    lead = max(ready.get(sources[k], 0.0) for k in late) - max(ready.get(sources[k], 0.0) for k in early)
    return (early, late) if lead >= min_lead else None


class PromptWarmer:
    """Renders token prefixes of one prompt's final request and prefills them.

    ``render(values)`` is the framework's own rendering of the request as ``tokenize``
    arguments (``{"messages": ...}`` or ``{"prompt": ...}``); ``kwargs`` maps the warm-up
    node's inputs to prompt keys (``base_key``: a dict whose items are all values); ``late``
    are the keys not known yet; ``server`` the LLM server's root URL (None: unknown, warm
    ``min_tokens``); ``request`` extra request fields scoping the prefix cache (``cache_salt``).
    """

    def __init__(self, render: Callable[[dict[str, Any]], dict[str, Any]], kwargs: dict[str, str], late: list[str], *,
                 server: str | None, min_tokens: int, max_busy: int, request: dict[str, Any] | None = None,
                 base_key: str = "__base__") -> None:
        self.render, self.kwargs, self.late = render, kwargs, late
        self.server, self.min_tokens, self.max_busy = server, min_tokens, max_busy
        self.request, self.base_key = request or {}, base_key

    def values(self, early: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for kw, key in self.kwargs.items():
            if key == self.base_key:
                values.update(early[kw] if isinstance(early[kw], dict) else {})
            else:
                values[key] = early[kw]
        return values

    async def prefix(self, ctx: Any, values: dict[str, Any], late_prefix: str = "") -> list[int]:
        """Token ids every final request with these values (and late values starting with ``late_prefix``) starts with."""
        renders = [self.render({**values, **dict.fromkeys(self.late, late_prefix + s)}) for s in STAND_INS]
        return await token_prefix(ctx.llm, renders)

    async def worthwhile(self, ctx: Any) -> WarmBudget | None:
        """What a warm-up must hold (the core's rule: device, prefix cache, block size), or None
        when it does not pay there or the engine is already busy with real work."""
        if engine_busy(ctx.llm, self.max_busy):
            return None
        if not self.server:
            return WarmBudget(self.min_tokens)
        return await warm_budget(self.server, self.min_tokens)

    async def static(self, ctx: Any, **early: Any) -> Any:
        """Warm the prefix the early values fix (a graph node's fn: ``early`` are its inputs)."""
        try:
            budget = await self.worthwhile(ctx)
            if budget is None:
                return None
            ids = await self.prefix(ctx, self.values(early))
            return await warm_ids(ctx.llm, ids, budget.least, budget.block_size, **self.request) or None
        except Exception as exc:  # noqa: BLE001 - a warm cache is an optimization, never a failure
            log.debug("prefill split skipped: %s: %s", type(exc).__name__, exc)
            return None

    def progressive(self, part_value: Callable[[Any], Any], partial: Callable[[list[Any]], Awaitable[Any]],
                    done: asyncio.Event) -> Callable[..., Awaitable[None]]:
        """The per-part fn warming the prompt as the one late value grows (one closure per query).

        ``part_value(part)`` is what one part adds (None: a failed part, stop warming);
        ``partial(values)`` the late value from the first parts' values, in order; ``done`` is
        set when the producer finished: the full request is then moments away, and a warm-up
        started now would only compete with it.
        """
        parts: dict[int, Any] = {}
        state = {"done": -1, "context": None, "warm": 0, "off": False}
        lock = asyncio.Lock()

        async def fn(ctx: Any, part: Any, **early: Any) -> None:
            try:
                index = getattr(ctx.span, "part", None)
                if index is None or state["off"]:
                    return
                value = part_value(part)
                if value is None:  # a failed part: the query is failing anyway
                    state["off"] = True
                    return
                parts[index] = value
                async with lock:  # one prefill at a time, each for the longest prefix known then
                    budget = None if done.is_set() else await self.worthwhile(ctx)
                    if budget is not None:
                        await self._advance(ctx, partial, parts, state, early, budget)
            except Exception as exc:  # noqa: BLE001 - never fail the query over a warm cache
                state["off"] = True
                log.debug("progressive prefill stopped: %s: %s", type(exc).__name__, exc)

        return fn

    async def _advance(self, ctx: Any, partial: Callable[[list[Any]], Awaitable[Any]], parts: dict[int, Any],
                       state: dict, early: dict[str, Any], budget: WarmBudget) -> None:
        j = state["done"]
        while j + 1 in parts:
            j += 1
        if j == state["done"]:
            return
        state["done"] = j
        value = await partial([parts[i] for i in range(j + 1)])
        previous = state["context"]
        if not isinstance(value, str) or (previous is not None and not value.startswith(previous)):
            log.debug("progressive prefill off: the partial context does not grow as a prefix")
            state["off"] = True  # not a growing string: the final context may not start with it
            return
        state["context"] = value
        ids = await self.prefix(ctx, self.values(early), value)
        sent = await warm_ids(ctx.llm, ids, budget.least, budget.block_size, already=state["warm"], **self.request)
        if sent:
            state["warm"] = sent
            log.debug("progressive prefill of %d tokens (parts 0..%d)", sent, j)
