"""Response synthesis lowered to LLM calls, mirroring LlamaIndex's synthesizers step by step.

Every prompt is built by LlamaIndex itself: the synthesizer's templates, their
``partial_format``, ``get_biggest_prompt`` and the synthesizer's ``PromptHelper``
(``repack`` / ``truncate``). What changes is only how the calls are issued: tree
summarize's leaf calls always run concurrently (stock: only with ``use_async``),
and each call goes to Ayo's LLM engine with the query's priority.

``predict(template, **prompt_args) -> str`` stands for ``llm.predict``; the lowering
passes one bound to the synthesizer's LLM (engine request or opaque call).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from llama_index.core.llms.structured_llm import StructuredLLM
from llama_index.core.prompts.prompt_utils import get_biggest_prompt
from llama_index.core.response_synthesizers import (
    CompactAndRefine,
    Generation,
    Refine,
    SimpleSummarize,
    TreeSummarize,
)
from llama_index.core.response_synthesizers.base import BaseSynthesizer
from llama_index.core.response_synthesizers.context_only import ContextOnly
from llama_index.core.response_synthesizers.no_text import NoText

from ayo_core.introspect import overrides_reason
from ayo_core.runtime import bridge
from ayo_core.runtime.caller import in_async_call
from ayo_llamaindex import accumulate, events, spans
from ayo_shims import llamaindex as shim

PredictFn = Callable[..., Awaitable[str]]
MAX_STALLED_LEVELS = 3

# Methods whose stock control flow is mirrored below; a subclass overriding one of
# them does something else, so it stays opaque.
_MIRRORED = {cls: shim.SYNTHESIZER_MIRRORED[cls.__name__]
             for cls in (SimpleSummarize, TreeSummarize, Refine, CompactAndRefine, Generation, NoText, ContextOnly)}
MODE_OF = {CompactAndRefine: "compact", Refine: "refine", TreeSummarize: "tree_summarize",
           SimpleSummarize: "simple_summarize", Generation: "generation", NoText: "no_text",
           ContextOnly: "context_only"}
# modes whose answer is not an LLM call over the chunks: no prefix to warm, nothing to speculate on
NODE_FREE_MODES = ("generation", "no_text", "context_only")
LOCAL_MODES = ("no_text", "context_only")  # no LLM call at all: a local node, not a decode


def synthesis_mode(synth: Any) -> tuple[str | None, str]:
    """``(mode, "")`` when Ayo mirrors this synthesizer, else ``(None, reason)``."""
    if not isinstance(synth, BaseSynthesizer):
        return None, f"{type(synth).__name__} is not a LlamaIndex synthesizer"
    # most specific first: CompactAndRefine is a Refine, CompactAndAccumulate an Accumulate
    for cls in (CompactAndRefine, Refine, TreeSummarize, SimpleSummarize, Generation, NoText, ContextOnly,
                *accumulate.MODE_OF):
        if isinstance(synth, cls):
            if over := overrides_reason(synth, cls, _MIRRORED.get(cls) or accumulate.MIRRORED[cls]):
                return None, over
            break
    else:
        return None, f"{type(synth).__name__} (a response mode Ayo does not lower)"
    if shim.synth_streaming(synth):
        return None, "streaming=True (the stock synthesizer streams the answer)"
    if shim.synth_output_cls(synth) is not None:
        return None, "output_cls is set (structured output)"
    if shim.synth_multimodal(synth):
        return None, "multimodal=True"
    if isinstance(shim.synth_llm(synth), StructuredLLM):
        return None, "its LLM is a StructuredLLM"
    if isinstance(synth, Refine):
        if shim.structured_answer_filtering(synth):
            return None, "structured_answer_filtering=True"
        if not shim.has_default_program_factory(synth):
            return None, "a custom program_factory"
    return MODE_OF.get(cls) or accumulate.MODE_OF[cls], ""


def source_texts(nodes: Sequence[Any]) -> list[str]:
    """The text chunks ``BaseSynthesizer.synthesize`` hands to ``get_response``."""
    from llama_index.core.schema import MetadataMode

    return [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]


async def run_synthesis(synth: Any, mode: str, query_str: str, chunks: list[str], predict: PredictFn) -> Any:
    """``synth.get_response(query_str, chunks)`` for a mirrored ``mode``, in its span."""
    with events.get_response_span(synth, query_str, chunks) as box:
        return box.set(await _get_response(synth, mode, query_str, chunks, predict))


async def _get_response(synth: Any, mode: str, query_str: str, chunks: list[str], predict: PredictFn) -> Any:
    if mode == "compact":
        # called, not copied; off Ayo's loop, where LlamaIndex's token counting would start a thread per call
        chunks = await bridge.off_loop(shim.make_compact_text_chunks, synth, query_str, chunks)
        # CompactAndRefine.get_response calls Refine.get_response: a second span of the same name
        with events.get_response_span(synth, query_str, chunks) as box, events.get_response(query_str, chunks):
            return box.set(await refine_loop(synth, query_str, chunks, predict))
    if mode == "refine":
        with events.get_response(query_str, chunks):  # Refine.get_response's events
            return await refine_loop(synth, query_str, chunks, predict)
    if mode == "tree_summarize":
        return await tree_summarize(synth, query_str, chunks, predict)
    if mode == "simple_summarize":
        return await simple_summarize(synth, query_str, chunks, predict)
    if mode in accumulate.MODES:
        return await accumulate.accumulate(synth, mode, query_str, chunks, predict)
    if mode == "generation":  # Generation.get_response: the chunks are ignored, one call on the question
        return await predict(shim.generation_template(synth), query_str=query_str)
    if mode == "no_text":  # NoText.get_response
        return ""
    if mode == "context_only":  # ContextOnly.get_response
        return "\n\n".join(chunks)
    raise ValueError(f"unknown synthesis mode {mode!r}: use compact, refine, tree_summarize, simple_summarize, "
                     "accumulate, compact_accumulate, generation, no_text or context_only")


def repack(synth: BaseSynthesizer, prompt: Any, chunks: Sequence[str]) -> list[str]:
    """``synth``'s prompt helper packing ``chunks`` against ``prompt``, as the stock loops call it."""
    return shim.synth_prompt_helper(synth).repack(prompt, chunks, llm=shim.synth_llm(synth))


def initial_refine_chunks(synth: Refine, chunks: Sequence[str]) -> deque:
    """The first packing of ``Refine._arun_refine_loop``: each chunk repacked on its own."""
    max_prompt = get_biggest_prompt([shim.text_qa_template(synth), shim.refine_template(synth)])
    return deque(
        tc
        for chunk in chunks
        for tc in shim.synth_prompt_helper(synth).repack(max_prompt, [chunk], llm=shim.synth_llm(synth),
                                                         padding=shim.response_padding_size(synth))
    )


async def refine_loop(synth: Refine, query_str: str, chunks: Sequence[str], predict: PredictFn) -> str:
    """``Refine._arun_refine_loop`` with ``DefaultRefineProgram`` (no streaming, no output_cls)."""
    chunks_deque = await bridge.off_loop(initial_refine_chunks, synth, chunks)
    response: str | None = None
    while chunks_deque:
        chunk = chunks_deque.popleft()
        if response is None:
            prompt_template = shim.text_qa_template(synth).partial_format(query_str=query_str)
            prompt_kwargs = {"context_str": chunk}
        else:
            prompt_template = shim.refine_template(synth).partial_format(query_str=query_str, existing_answer=response)
            # the stock loop repacks against the partially formatted template (the
            # existing answer grows) and pushes any overflow back to the front
            repacked = await bridge.off_loop(repack, synth, prompt_template, [chunk])
            if len(repacked) > 1:
                chunks_deque.extendleft(repacked)
                continue
            prompt_kwargs = {"context_msg": repacked[0]}
        answer = await _program_call(synth, prompt_template, prompt_kwargs, predict)
        # DefaultRefineProgram always says query_satisfied=True; an empty answer keeps the old one
        if answer:
            response = answer
    return response or "Empty Response"


async def _program_call(synth: Refine, template: Any, kwargs: dict[str, Any], predict: PredictFn) -> str:
    """One refine step: stock calls its ``DefaultRefineProgram`` (``program(**kwargs)``, a span, under
    ``query()``; ``await program.acall(**kwargs)``, none, under ``aquery()``), which calls ``llm.predict``."""
    if in_async_call():
        return await predict(template, **kwargs)
    program = shim.refine_program(synth, template)
    with spans.opened(program, ["__call__"], **kwargs) as box:
        answer = await predict(template, **kwargs)
        box.set(answer)  # stock's result is a StructuredRefineResponse; handlers read its answer
    return answer


async def tree_summarize(synth: TreeSummarize, query_str: str, chunks: Sequence[str], predict: PredictFn) -> str:
    """``TreeSummarize.aget_response``: leaf summaries concurrently, then recurse."""
    summary_template = shim.summary_template(synth).partial_format(query_str=query_str)
    stalled, previous = 0, None
    while True:
        chunks = await bridge.off_loop(repack, synth, summary_template, chunks)
        if shim.synth_verbose(synth):
            print(f"{len(chunks)} text chunks after repacking")  # stock's verbose output, on stdout as in stock
        if len(chunks) == 1:
            return await predict(summary_template, context_str=chunks[0])
        # stock recurses until RecursionError (minutes of LLM calls) when summaries never fit
        # in fewer chunks; stop early with the reason instead of hanging
        stalled = stalled + 1 if previous is not None and len(chunks) >= previous else 0
        if stalled >= MAX_STALLED_LEVELS or not chunks:
            raise RecursionError(
                f"tree_summarize does not converge: {len(chunks)} summaries still need {len(chunks)} LLM calls "
                f"after {MAX_STALLED_LEVELS} levels; the LLM's context_window is too small for its num_output "
                "(raise context_window or lower max_tokens)")
        previous = len(chunks)
        chunks = list(await asyncio.gather(*(predict(summary_template, context_str=c) for c in chunks)))


async def simple_summarize(synth: SimpleSummarize, query_str: str, chunks: Sequence[str], predict: PredictFn) -> str:
    """``SimpleSummarize.aget_response``: one call over the truncated, joined chunks."""
    text_qa_template = shim.text_qa_template(synth).partial_format(query_str=query_str)
    truncated = shim.synth_prompt_helper(synth).truncate(prompt=text_qa_template, text_chunks=["\n".join(chunks)],
                                                         llm=shim.synth_llm(synth))
    response = await predict(text_qa_template, context_str=truncated)
    return response or "Empty Response"


def empty_response(synth: BaseSynthesizer) -> Any:
    """What ``synthesize`` returns for zero nodes (no LLM call)."""
    from llama_index.core.base.response.schema import Response

    return Response(shim.synth_empty_response(synth))
