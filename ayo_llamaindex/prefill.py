"""Prefill splitting: prefill the parts of later prompts that are known before retrieval ends.

A prompt's prefix up to its first late variable (``context_str``, ``existing_answer``)
is fixed once the question is known. We render that prefix with the LLM's own code
(``LLMBinding.predict_request`` with a sentinel in the late variables, cut at the
sentinel), tokenize it on the server exactly as the final request will be rendered
(``continue_final_message`` for chat), drop the last tokens (the boundary may merge
differently once the rest follows) and send a prefill-only request of those token ids.
vLLM's prefix cache then holds the blocks when the real request arrives. The real
request is unchanged, so this can never change an answer; at worst the cache misses.

Static prefixes (system prompt + template head) are the same for every query: tokenized
once, warmed per query (free when still cached); refine's prefix holds the question and
is warmed per query while retrieval runs (every refine call after the first uses it).
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.schema import QueryBundle

from ayo_core.engines.device import early_prefill_pays
from ayo_core.graph import PrefixSpec
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.runtime import EngineAssignment
from ayo_shims import llamaindex as shim

log = logging.getLogger(__name__)

SENTINEL = "\u2063ayo-late\u2063"
BOUNDARY_TOKENS = 2  # tokens dropped at the cut: they may merge with what follows
MIN_TOKENS = 16  # below this nothing fills a cache block worth the request
_static_ids: dict[tuple[str, str], list[int]] = {}  # tokenized static heads, per engine kind


def prefix_of(binding: LLMBinding, template: Any, late_vars: tuple[str, ...]) -> dict[str, Any] | None:
    """``{"prompt": text}`` or ``{"messages": [...]}``: the final request's head before any late var."""
    request = binding.predict_request(template, **dict.fromkeys(late_vars, SENTINEL))
    if request.kind == "completion":
        text = str(request.body["prompt"])
        cut = text.find(SENTINEL)
        return {"prompt": text[:cut]} if cut > 0 else None
    messages = request.body["messages"]
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str) and SENTINEL in content:
            head = {**m, "content": content[: content.find(SENTINEL)]}
            return {"messages": [*messages[:i], head]}
    return None


async def prefix_ids(ctx: Any, kind: str, prefix: dict[str, Any]) -> list[int]:
    """Token ids of ``prefix`` as the server renders the final request, minus the boundary tokens."""
    llm = ctx.engine(kind)
    if "messages" in prefix:
        ids = await llm.tokenize(messages=prefix["messages"], add_generation_prompt=False,
                                 continue_final_message=True)
    else:
        ids = await llm.tokenize(prompt=prefix["prompt"])
    return list(ids)[:-BOUNDARY_TOKENS]


async def warm_ids(ctx: Any, kind: str, ids: list[int]) -> int:
    """A prefill-only request (cheap when the blocks are already cached); returns the tokens sent."""
    if len(ids) < MIN_TOKENS:
        return 0
    await ctx.engine(kind).prefill(prompt=ids)
    return len(ids)


def prefix_spec(synth_plan: Any, assign: EngineAssignment) -> PrefixSpec | None:
    """The synthesize node's ``PrefixSpec`` (the core's prefill-splitting pass adds the node)."""
    if synth_plan is None or synth_plan.mode is None:
        return None
    binding = synth_plan.llm
    kind = assign.llm_kind(binding)
    if kind is None:
        return None
    synth, mode = synth_plan.obj, synth_plan.mode
    first = shim.summary_template(synth) if mode == "tree_summarize" else shim.text_qa_template(synth)
    server = str(getattr(assign.engines.get(kind), "base_url", "") or binding.endpoint[0])

    async def build(ctx: Any, query: QueryBundle) -> int:
        try:
            if not await early_prefill_pays(server):  # a CPU server: early prefill only moves work
                return 0
            return await warm(ctx, query)
        except Exception:  # noqa: BLE001 - best effort: a failed warm-up must never fail the query
            log.debug("prefix prefill failed", exc_info=True)
            return 0

    async def warm(ctx: Any, query: QueryBundle) -> int:
        sent = 0
        # the head before {context_str} does not depend on the query: tokenized once, warmed
        # every query (evicted blocks come back; cached ones cost the server next to nothing)
        prefix = prefix_of(binding, first.partial_format(query_str=SENTINEL), ("context_str",))
        if prefix is not None:
            key = (kind, repr(prefix))
            if key not in _static_ids:
                _static_ids[key] = await prefix_ids(ctx, kind, prefix)
            sent += await warm_ids(ctx, kind, _static_ids[key])
        if mode == "refine":  # every refine call after the first starts with template + question
            template = shim.refine_template(synth).partial_format(query_str=query.query_str)
            prefix = prefix_of(binding, template, ("existing_answer", "context_msg"))
            if prefix is not None:
                sent += await warm_ids(ctx, kind, await prefix_ids(ctx, kind, prefix))
        return sent

    return PrefixSpec(early_inputs=("query",), build=build)
