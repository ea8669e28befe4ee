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
stops the warming for that query. The rendering and the parts are LangChain's; the
rest is :mod:`ayo_core.engines.prompt_warmer`. A failure only costs the warm cache.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from ayo_core.engines.prompt_warmer import PromptWarmer, early_late_split
from ayo_core.graph import PrefixSpec
from ayo_core.passes.prefill import PROGRESSIVE
from ayo_core.templates import Warmup
from ayo_langchain import capture as cap
from ayo_shims import langchain as shims

log = logging.getLogger(__name__)


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

    async def partial(self, parts: list[list[Any]]) -> Any:
        """The value from the documents of the first parts: their union, through the chain's functions."""
        value: Any = self.retriever.unique_union([d for docs in parts for d in docs])
        for lam in self.funcs:
            value = await _replay(lam, value)
        return value


def early_inputs(lowerer: Any, prompt_step: cap.Module, model_step: cap.Model,
                 sources: dict[str, str] | None) -> Early | None:
    """The early inputs + PrefixSpec for ``dict -> prompt -> model``, or None if nothing is early."""
    if sources is None or not isinstance(prompt_step, cap.Prompt) or prompt_step.wrappers:
        return None
    if lowerer.plan.routed.get(id(model_step)) is None:
        return None
    plan = lowerer.plan
    split = early_late_split(sources, lowerer.ready, plan.options.prefill_lead, skip=("__base__",))
    if split is None:
        return None
    early_keys, late_keys = split
    kwargs = {f"early_{i}": k for i, k in enumerate(early_keys)}
    inputs = {kw: sources[k] for kw, k in kwargs.items()}
    root = getattr(plan.llm, "root_url", None) or getattr(getattr(plan.llm, "engine", None), "root_url", None)
    warm = PromptWarmer(lambda values: render_request(prompt_step.runnable, model_step.chat, model_step.model, values),
                        kwargs, late_keys, server=root, min_tokens=plan.min_prefill_tokens,
                        max_busy=plan.options.warmup_max_busy, request=cache_kwargs(model_step.model))
    if plan.options.progressive_prefill and len(late_keys) == 1 and sources[late_keys[0]] in lowerer.progress:
        progress = lowerer.progress[sources[late_keys[0]]]
        # parts are (query, docs); docs not a list: a failed retrieval, the query is failing anyway
        fn = warm.progressive(lambda part: part[1] if isinstance(part[1], list) else None, progress.partial,
                              progress.generated)
        node = lowerer.build(Warmup(fn, model_step.label(), takes_ctx=True, per_part="part"),
                             {"part": progress.per_node, **inputs}, "progressive_prefill")
        # flagged for prefill_splitting, which lists it in explain()'s optimizations
        lowerer.graph.replace(lowerer.graph.nodes[node].with_meta(**{PROGRESSIVE: True}))
    return Early(inputs=inputs, spec=PrefixSpec(early_inputs=tuple(kwargs), build=warm.static))


async def _replay(lam: Any, value: Any) -> Any:
    """Call a RunnableLambda's function on a partial value, without a run (this is not the user's call)."""
    afunc = getattr(lam, "afunc", None)
    if afunc is not None:
        return await afunc(value)
    return await asyncio.to_thread(lam.func, value)


def cache_kwargs(model: Any) -> dict[str, Any]:
    """Request fields that scope vLLM's prefix cache (``cache_salt``): a warm-up only helps under the same."""
    try:
        params = shims.model_default_params(model)
    except Exception:  # noqa: BLE001
        return {}
    salt = (params.get("extra_body") or {}).get("cache_salt", params.get("cache_salt"))
    return {"cache_salt": salt} if salt else {}


def render_request(prompt: Any, chat: bool, model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Tokenize arguments for the request ``model`` would send for ``prompt`` filled with ``values``."""
    pv = prompt.invoke(values)  # no config: these stand-in renders are not the user's runs
    if chat:
        return {"messages": shims.chat_request_payload(model, pv)["messages"]}
    return {"prompt": pv.to_string()}
