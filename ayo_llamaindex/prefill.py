"""Prefill splitting for LlamaIndex synthesis: warm the parts of later prompts known before retrieval ends.

What to warm and whether is decided by the core (:mod:`ayo_core.engines.prefix_warming`: the
device rule, the server's prefix cache and block size, checked once per server; the token
prefix every final request shares). This module only says what the final requests are: the
LLM's own code renders them (``LLMBinding.predict_request``) with stand-ins for the values
retrieval produces.

Static prefixes (system prompt + template head) are the same for every query: tokenized
once per server, warmed per query (free when still cached); refine's prefix holds the
question and is warmed per query while retrieval runs (every refine call after the first
uses it). The real request is unchanged, so this can never change an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from llama_index.core.schema import QueryBundle

from ayo_core.engines.openai_request import LLMRequest, request_prefix, stand_in_renders
from ayo_core.engines.prefix_warming import least_tokens, warm_prefix
from ayo_core.graph import PrefixSpec
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.runtime import EngineAssignment
from ayo_llamaindex.synthesis import NODE_FREE_MODES
from ayo_shims import llamaindex as shim

log = logging.getLogger(__name__)

MIN_TOKENS = 16  # below this nothing fills a cache block worth the request (the server's block size wins)


def _renderer(binding: LLMBinding, template: Any, late_vars: tuple[str, ...]) -> Callable[[str], LLMRequest]:
    """``render(value)``: the final request with ``value`` in every late variable."""
    return lambda value: binding.predict_request(template, **dict.fromkeys(late_vars, value))


def prefix_of(binding: LLMBinding, template: Any, late_vars: tuple[str, ...]) -> dict[str, Any] | None:
    """``{"prompt": text}`` or ``{"messages": [...]}``: the final request's head before any late var."""
    return request_prefix(_renderer(binding, template, late_vars))


def renders(binding: LLMBinding, template: Any, late_vars: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """``tokenize`` arguments of the final request with each core stand-in in the late variables;
    None when no late variable is in the request (nothing is known early)."""
    return stand_in_renders(_renderer(binding, template, late_vars))


def prefix_spec(synth_plan: Any, assign: EngineAssignment) -> PrefixSpec | None:
    """The synthesize node's ``PrefixSpec`` (the core's prefill-splitting pass adds the node)."""
    if synth_plan is None or synth_plan.mode in (None, *NODE_FREE_MODES):  # no prompt over the retrieved chunks
        return None
    binding = synth_plan.llm
    kind = assign.llm_kind(binding)
    if kind is None:
        return None
    synth, mode = synth_plan.obj, synth_plan.mode
    first = shim.summary_template(synth) if mode == "tree_summarize" else shim.text_qa_template(synth)
    server = str(getattr(assign.engines.get(kind), "base_url", "") or binding.endpoint[0])

    static: list[list[dict[str, Any]] | None] = []  # the query-independent head's renders, made once

    async def build(ctx: Any, query: QueryBundle) -> int:
        try:
            if await least_tokens(server, MIN_TOKENS) is None:  # a CPU server, or no prefix cache
                return 0
            return await warm(ctx.engine(kind), query)
        except Exception:  # noqa: BLE001 - best effort: a failed warm-up must never fail the query
            log.debug("prefix prefill failed", exc_info=True)
            return 0

    async def warm(llm: Any, query: QueryBundle) -> int:
        # the head before {context_str} does not depend on the query: tokenized once per server,
        # warmed every query (evicted blocks come back; cached ones cost the server next to nothing)
        if not static:
            static.append(renders(binding, first, ("context_str", "query_str")))
        sent = 0
        if static[0] is not None:
            sent += await warm_prefix(llm, server, static[0], MIN_TOKENS, static=True)
        if mode == "refine":  # every refine call after the first starts with template + question
            template = shim.refine_template(synth).partial_format(query_str=query.query_str)
            per_query = renders(binding, template, ("existing_answer", "context_msg"))
            if per_query is not None:
                sent += await warm_prefix(llm, server, per_query, MIN_TOKENS)
        return sent

    return PrefixSpec(early_inputs=("query",), build=build)
