"""Prefill splitting for ``{...} | prompt | model``: warm what is known of the prompt early.

In ``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt |
llm`` the question (and the template text around it) is known when the query starts,
the context only after retrieval. The DECODE node gets a :class:`PrefixSpec`: as soon
as the early values exist, the prompt is formatted by the user's own template twice,
with two different stand-ins for the late values; both are rendered to token ids by
the server (``/tokenize`` renders the chat template exactly as the chat request
will), and their common token prefix (minus a safety margin for tokens that merge
across the boundary) is prefilled. That is exactly a token prefix of the final
request, so vLLM's prefix cache serves it when the full request comes.

Progressive prefill goes further when the late value comes from a
``MultiQueryRetriever`` whose queries are decode-pipelined: each time the documents
of the next generated query arrive, the union so far (the retriever's own
``unique_union``, a prefix of the final union) is passed through the same functions
the chain applies (``format_docs``...) and the prompt is warmed up to the end of that
partial context. A partial context that turns out not to be a prefix of the next one
stops the warming for that query. None of this changes a result: if anything fails
here, the query just does not get the warm cache.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from ayo_core.engines.prefix_warming import STAND_INS, WarmBudget, engine_busy, token_prefix, warm_budget, warm_ids
from ayo_core.graph import PrefixSpec
from ayo_core.passes.prefill import PROGRESSIVE
from ayo_core.templates import Warmup
from ayo_langchain import capture as cap
from ayo_shims import langchain as shims

log = logging.getLogger(__name__)

EARLY_S = 0.05  # a value estimated to exist this soon after the start counts as early


@dataclass
class Early:
    inputs: dict[str, str]  # DECODE kwarg -> producer node
    spec: PrefixSpec


@dataclass
class Progress:
    """A node whose value can be approximated from a pipelined retrieval's parts (see module doc)."""

    per_node: str  # the per-query retrieval node: parts are (query, docs)
    retriever: Any  # the MultiQueryRetriever (its unique_union)
    funcs: list[Any] = field(default_factory=list)  # RunnableLambdas applied after the union
    # set when the query generation finished: the full request is then moments away, and a
    # warm-up started now would only compete with it
    generated: asyncio.Event = field(default_factory=asyncio.Event)

    def then(self, lam: Any) -> Progress | None:
        """This progress followed by ``lam``, or None when ``lam`` cannot be replayed (needs config, streams)."""
        from langchain_core.runnables.utils import accepts_config, accepts_run_manager

        func = getattr(lam, "afunc", None) or lam.func
        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            return None
        if accepts_config(func) or accepts_run_manager(func):
            return None
        return Progress(self.per_node, self.retriever, [*self.funcs, lam], self.generated)


def early_inputs(lowerer: Any, prompt_step: cap.Module, model_step: cap.Model,
                 sources: dict[str, str] | None) -> Early | None:
    """The early inputs + PrefixSpec for ``dict -> prompt -> model``, or None if nothing is early."""
    if sources is None or not isinstance(prompt_step, cap.Prompt) or prompt_step.wrappers:
        return None
    if lowerer.plan.routed.get(id(model_step)) is None:
        return None
    ready = lowerer.ready
    early_keys = [k for k, node in sources.items() if ready.get(node, 0.0) <= EARLY_S]
    late_keys = [k for k in sources if k not in early_keys and k != "__base__"]
    if not early_keys or not late_keys:
        return None
    # Worth it only when the late values come well after the early ones: a prefill still
    # running when the full request arrives shares nothing with it and only competes.
    lead = max(ready.get(sources[k], 0.0) for k in late_keys) - max(ready.get(sources[k], 0.0) for k in early_keys)
    if lead < lowerer.plan.options.prefill_lead:
        return None
    kwargs = {f"early_{i}": k for i, k in enumerate(early_keys)}
    inputs = {kw: sources[k] for kw, k in kwargs.items()}
    warm = Warmer(lowerer.plan, prompt_step.runnable, model_step, kwargs, late_keys)
    if (lowerer.plan.options.progressive_prefill and len(late_keys) == 1
            and sources[late_keys[0]] in lowerer.progress):
        progress = lowerer.progress[sources[late_keys[0]]]
        node = lowerer.build(Warmup(warm.progressive(progress), model_step.label(), takes_ctx=True,
                                    per_part="part"), {"part": progress.per_node, **inputs}, "progressive_prefill")
        # flagged for prefill_splitting, which lists it in explain()'s optimizations
        lowerer.graph.replace(lowerer.graph.nodes[node].with_meta(**{PROGRESSIVE: True}))
    return Early(inputs=inputs, spec=PrefixSpec(early_inputs=tuple(kwargs), build=warm.static))


class Warmer:
    """Renders token prefixes of the final request and prefills them."""

    def __init__(self, plan: Any, prompt: Any, model_step: cap.Model, kwargs: dict[str, str], late: list[str]):
        self.plan, self.prompt, self.model_step = plan, prompt, model_step
        self.kwargs, self.late = kwargs, late
        self.cache_kwargs = _cache_kwargs(model_step.model)

    def values(self, early: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for kw, key in self.kwargs.items():
            if key == "__base__":
                values.update(early[kw] if isinstance(early[kw], dict) else {})
            else:
                values[key] = early[kw]
        return values

    async def prefix(self, ctx: Any, values: dict[str, Any], late_prefix: str = "") -> list[int]:
        """Token ids every final request with these values (and late values starting with ``late_prefix``) starts with."""
        renders = [_render(self.prompt, self.model_step.chat, self.model_step.model,
                           {**values, **dict.fromkeys(self.late, late_prefix + s)}) for s in STAND_INS]
        return await token_prefix(ctx.llm, renders)

    async def worthwhile(self, ctx: Any) -> WarmBudget | None:
        """What a warm-up must hold (the core's rule: device, prefix cache, block size), or None
        when it does not pay there or the engine is already busy with real work."""
        if engine_busy(ctx.llm, self.plan.options.warmup_max_busy):
            return None
        root = getattr(self.plan.llm, "root_url", None) or getattr(getattr(self.plan.llm, "engine", None), "root_url", None)
        if not root:
            return WarmBudget(self.plan.min_prefill_tokens)
        return await warm_budget(root, self.plan.min_prefill_tokens)

    async def static(self, ctx: Any, **early: Any) -> Any:
        try:
            budget = await self.worthwhile(ctx)
            if budget is None:
                return None
            ids = await self.prefix(ctx, self.values(early))
            return await warm_ids(ctx.llm, ids, budget.least, budget.block_size, **self.cache_kwargs) or None
        except Exception as exc:  # noqa: BLE001 - a warm cache is an optimization, never a failure
            log.debug("prefill split skipped: %s: %s", type(exc).__name__, exc)
            return None

    def progressive(self, progress: Progress) -> Any:
        """The per-part fn warming the prompt as the retrieved context grows (one closure per query)."""
        parts: dict[int, list] = {}
        state = {"done": -1, "context": None, "warm": 0, "off": False}
        lock = asyncio.Lock()

        async def fn(ctx: Any, part: Any, **early: Any) -> None:
            try:
                index = getattr(ctx.span, "part", None)
                if index is None or state["off"]:
                    return
                if not isinstance(part[1], list):  # a failed retrieval: the query is failing anyway
                    state["off"] = True
                    return
                parts[index] = part[1]
                async with lock:  # one prefill at a time, each for the longest prefix known then
                    budget = None if progress.generated.is_set() else await self.worthwhile(ctx)
                    if budget is not None:
                        await self._advance(ctx, progress, parts, state, early, budget)
            except Exception as exc:  # noqa: BLE001 - never fail the query over a warm cache
                state["off"] = True
                log.debug("progressive prefill stopped: %s: %s", type(exc).__name__, exc)

        return fn

    async def _advance(self, ctx: Any, progress: Progress, parts: dict[int, list], state: dict,
                       early: dict[str, Any], budget: WarmBudget) -> None:
        j = state["done"]
        while j + 1 in parts:
            j += 1
        if j == state["done"]:
            return
        state["done"] = j
        docs = progress.retriever.unique_union([d for i in range(j + 1) for d in parts[i]])
        value: Any = docs
        for lam in progress.funcs:
            value = await _replay(lam, value)
        previous = state["context"]
        if not isinstance(value, str) or (previous is not None and not value.startswith(previous)):
            log.debug("progressive prefill off: the partial context does not grow as a prefix")
            state["off"] = True  # not a growing string: the final context may not start with it
            return
        state["context"] = value
        ids = await self.prefix(ctx, self.values(early), value)
        sent = await warm_ids(ctx.llm, ids, budget.least, budget.block_size, already=state["warm"], **self.cache_kwargs)
        if sent:
            state["warm"] = sent
            log.debug("progressive prefill of %d tokens (parts 0..%d)", sent, j)


async def _replay(lam: Any, value: Any) -> Any:
    """Call a RunnableLambda's function on a partial value, without a run (this is not the user's call)."""
    afunc = getattr(lam, "afunc", None)
    if afunc is not None:
        return await afunc(value)
    return await asyncio.to_thread(lam.func, value)


def _cache_kwargs(model: Any) -> dict[str, Any]:
    """Request fields that scope vLLM's prefix cache (``cache_salt``): a warm-up only helps under the same."""
    try:
        params = shims.model_default_params(model)
    except Exception:  # noqa: BLE001
        return {}
    salt = (params.get("extra_body") or {}).get("cache_salt", params.get("cache_salt"))
    return {"cache_salt": salt} if salt else {}


def _render(prompt: Any, chat: bool, model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Tokenize arguments for the request ``model`` would send for ``prompt`` filled with ``values``."""
    pv = prompt.invoke(values)  # no config: these stand-in renders are not the user's runs
    if chat:
        return {"messages": shims.chat_request_payload(model, pv)["messages"]}
    return {"prompt": pv.to_string()}
