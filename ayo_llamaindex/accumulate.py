"""``accumulate`` and ``compact_accumulate`` synthesis: one LLM call per chunk, all in flight at once.

Stock ``Accumulate.get_response`` asks the LLM once per (repacked) chunk, one call after
another unless ``use_async=True``; the calls are independent, so Ayo always issues them
together (the engine batches their decodes). Everything else is LlamaIndex's own code:
``CompactAndAccumulate``'s packing and ``Accumulate``'s per-chunk ``repack`` through the
synthesizer's ``PromptHelper``, the prompt kwargs ``_give_responses`` passes to
``llm.predict`` (``_make_prompt_kwargs``), and the joined answer (``_format_response``
with the default separator). A failing call fails the synthesis with the error of the
first chunk in order, the one a sequential stock run would have raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from llama_index.core.response_synthesizers import Accumulate
from llama_index.core.response_synthesizers.compact_and_accumulate import CompactAndAccumulate

from ayo_core.runtime import bridge
from ayo_shims import llamaindex as shim

PredictFn = Callable[..., Awaitable[str]]
SEPARATOR = "\n---------------------\n"  # Accumulate.get_response's default, the one synthesize() uses
MODE_OF = {CompactAndAccumulate: "compact_accumulate", Accumulate: "accumulate"}  # most specific first
MODES = tuple(MODE_OF.values())
MIRRORED = {cls: shim.SYNTHESIZER_MIRRORED[cls.__name__] for cls in MODE_OF}


def compact_chunks(synth: CompactAndAccumulate, query_str: str, chunks: Sequence[str]) -> list[str]:
    """``CompactAndAccumulate.get_response``'s first step: the chunks packed against the QA template."""
    template = shim.text_qa_template(synth).partial_format(query_str=query_str)
    return list(shim.synth_prompt_helper(synth).repack(template, list(chunks), llm=shim.synth_llm(synth)))


def planned_calls(synth: Accumulate, query_str: str, chunks: Sequence[str]) -> list[tuple[Any, dict[str, Any]]]:
    """``(template, predict kwargs)`` of every call ``_give_responses`` makes, in stock's order."""
    template = shim.text_qa_template(synth).partial_format(query_str=query_str)
    helper, llm = shim.synth_prompt_helper(synth), shim.synth_llm(synth)
    calls = []
    for chunk in chunks:
        for piece in helper.repack(template, [chunk], llm=llm):
            calls.append((template, shim.accumulate_prompt_kwargs(synth, piece)))
    return calls


async def accumulate(synth: Accumulate, mode: str, query_str: str, chunks: Sequence[str],
                     predict: PredictFn) -> str:
    """``synth.get_response(query_str, chunks)`` (``Accumulate`` or ``CompactAndAccumulate``), calls concurrent."""
    if mode == "compact_accumulate":
        chunks = await bridge.off_loop(compact_chunks, synth, query_str, chunks)
    calls = await bridge.off_loop(planned_calls, synth, query_str, chunks)
    outcomes = await asyncio.gather(*(predict(template, **kwargs) for template, kwargs in calls),
                                    return_exceptions=True)
    for outcome in outcomes:  # the first chunk's error in order: the one stock's sequential loop meets
        if isinstance(outcome, BaseException):
            raise outcome
    return shim.accumulate_format(synth, list(outcomes), SEPARATOR)


def explain_lines(plan: Any, trace: Any) -> list[str]:
    """``explain()``'s note for a lowered accumulate synthesizer: its calls, and how many ran in the last query."""
    synth = getattr(plan, "synthesizer", None)
    if synth is None or synth.mode not in MODES:
        return []
    calls = [c for c in getattr(trace, "engine_calls", ()) if c.node == "synthesize"] if trace is not None else []
    last = f": {len(calls)} in the last query" if calls else ""
    return [f"{synth.mode}: one LLM call per chunk, all in flight at once (stock: one after another unless "
            f"use_async=True){last}"]
