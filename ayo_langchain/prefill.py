"""Prefill splitting for ``{...} | prompt | model``: warm the prompt's early part.

In ``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt |
llm`` the question (and the template text around it) is known when the query starts,
the context only after retrieval. The DECODE node gets a :class:`PrefixSpec`: as soon
as the early values exist, the prompt is formatted by the user's own template twice,
with two different stand-ins for the late values; both are rendered to token ids by
the server (``/tokenize`` renders the chat template exactly as the chat request
will), and their common token prefix (minus a safety margin for tokens that merge
across the boundary) is prefilled. That is exactly a token prefix of the final
request, so vLLM's prefix cache serves it when the full request comes. The result is
never used: if anything fails here, the query just does not get the warm cache.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ayo_core.graph import PrefixSpec
from ayo_langchain import capture as cap

log = logging.getLogger(__name__)

_STAND_INS = ("Zqxj", "Wvkp")  # two late-value stand-ins that share no first token
SAFETY_TOKENS = 2  # tokens that may merge across the early/late boundary


@dataclass
class Early:
    inputs: dict[str, str]  # DECODE kwarg -> producer node
    spec: PrefixSpec


def early_inputs(lowerer: Any, prompt_step: cap.Module, model_step: cap.Model,
                 sources: dict[str, str] | None) -> Early | None:
    """The early inputs + PrefixSpec for ``dict -> prompt -> model``, or None if nothing is early."""
    if sources is None or not isinstance(prompt_step, cap.Prompt) or prompt_step.wrappers:
        return None
    if lowerer.plan.routed.get(id(model_step)) is None:
        return None
    early_keys = [k for k, node in sources.items() if node in lowerer.early]
    late_keys = [k for k in sources if k not in early_keys and k != "__base__"]
    if not early_keys or not late_keys:
        return None
    # Worth it only when the late values come well after the early ones: a prefill still
    # running when the full request arrives shares nothing with it and only competes.
    lead = max(lowerer.ready.get(sources[k], 0.0) for k in late_keys) - max(
        lowerer.ready.get(sources[k], 0.0) for k in early_keys)
    if lead < lowerer.plan.options.prefill_lead:
        return None
    kwargs = {f"early_{i}": k for i, k in enumerate(early_keys)}
    inputs = {kw: sources[k] for kw, k in kwargs.items()}
    build = _builder(lowerer.plan, prompt_step.runnable, model_step, kwargs, late_keys)
    return Early(inputs=inputs, spec=PrefixSpec(early_inputs=tuple(kwargs), build=build))


def _builder(plan: Any, prompt: Any, model_step: cap.Model, kwargs: dict[str, str], late: list[str]) -> Any:
    model = model_step.model

    async def build(ctx: Any, **early: Any) -> Any:
        try:
            values: dict[str, Any] = {}
            for kw, key in kwargs.items():
                if key == "__base__":
                    values.update(early[kw] if isinstance(early[kw], dict) else {})
                else:
                    values[key] = early[kw]
            renders = [_render(prompt, model_step.chat, model, {**values, **dict.fromkeys(late, s)})
                       for s in _STAND_INS]
            toks = await asyncio.gather(*(ctx.llm.tokenize(**r) for r in renders))
            n = _common_prefix(toks[0], toks[1]) - SAFETY_TOKENS
            if n < plan.min_prefill_tokens:
                return None
            return await ctx.llm.prefill(prompt=toks[0][:n])
        except Exception as exc:  # noqa: BLE001 - a warm cache is an optimization, never a failure
            log.debug("prefill split skipped: %s: %s", type(exc).__name__, exc)
            return None

    return build


def _render(prompt: Any, chat: bool, model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Tokenize arguments for the request ``model`` would send for ``prompt`` filled with ``values``."""
    pv = prompt.invoke(values)  # no config: these stand-in renders are not the user's runs
    if chat:
        return {"messages": model._get_request_payload(pv)["messages"]}
    return {"prompt": pv.to_string()}


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
