"""Speculative synthesis: start answering while ``LLMRerank`` is still decoding its choices.

The core's speculation (``ayo_core.templates.speculation``) across the rerank -> synthesis
edge, with LlamaIndex's parts as hooks. The guess is the reranker's own parser
(``_parse_raw_response``, i.e. the user's ``parse_choice_select_answer_fn``) and its own
sorting over the finished lines of each batch's streamed answer; the key is the exact
text chunks synthesis reads (``get_content(MetadataMode.LLM)``, in order), so equal keys
give the stock answer (same prompts, greedy decoding). The speculative synthesis's
callback events are recorded and replayed only when its answer is used (a discarded one
never happened).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.schema import MetadataMode

from ayo_core.runtime.recording import replay
from ayo_core.templates.speculation import Speculation, SpeculationHooks
from ayo_llamaindex import events
from ayo_shims import llamaindex as shim


def chunk_key(nodes: list[Any]) -> tuple[str, ...]:
    """What synthesis reads from the nodes (so equal keys give equal answers)."""
    return tuple(n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes)


def partial_selection(pp: Any, batches: list[list[Any]], finished: list[str]) -> list[Any] | None:
    """The reranker's own parse + sort of the finished lines so far (None: not enough yet)."""
    initial: list[Any] = []
    for text, batch in zip(finished, batches, strict=True):
        try:
            initial.extend(shim.rerank_parse(pp, text, batch))
        except Exception:  # noqa: BLE001 - a partial answer the parser rejects: not ready
            return None
    selection = sorted(initial, key=lambda x: x.score or 0.0, reverse=True)[: pp.top_n]
    total = sum(len(b) for b in batches)
    return selection if len(selection) >= min(pp.top_n, total) and selection else None


class RerankSpeculation(Speculation):
    """One query's speculation over ``LLMRerank``'s ``batches``; ``start(ctx, selection)`` synthesizes."""

    def __init__(self, pp: Any, batches: list[list[Any]], start: Callable[[Any, list[Any]], Awaitable[Any]]) -> None:
        super().__init__(batches, lambda finished: partial_selection(pp, batches, finished), chunk_key, start)


def rerank_hooks(synthesize_text: Callable[..., Awaitable[str]]) -> SpeculationHooks:
    """Hooks for a board whose state is ``(reranker, batches, query_str)``."""

    async def run(ctx: Any, state: tuple, selection: list[Any]) -> tuple[str, list]:
        with events.recording() as records:  # emitted only if the answer is used
            text = await synthesize_text(ctx, state[2], selection)
        return text, records

    async def keep(value: tuple[str, list]) -> str:
        text, records = value
        await replay(records)  # the used speculation's LLM events, as if run now
        return text

    return SpeculationHooks(guess=lambda state, finished: partial_selection(state[0], state[1], finished),
                            key=chunk_key, run=run, keep=keep)
