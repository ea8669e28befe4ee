"""LlamaIndex selectors (``LLMSingleSelector`` / ``LLMMultiSelector``) as Ayo calls them, for the Router
engine and the Router retriever alike: the selector's own prompt, choices text and output parser, its
decode sent through Ayo's engine, in the selector's ``_select`` (``_aselect``) span as stock's runs.
Selectors Ayo does not reproduce (``Pydantic*``, which need tool calling; a subclass; another class) are
called as the user's object, the way stock calls them.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import QueryBundle
from llama_index.core.selectors import LLMMultiSelector, LLMSingleSelector

from ayo_core.introspect import overrides_reason
from ayo_core.runtime.caller import call_stock
from ayo_llamaindex import spans
from ayo_llamaindex.llm import LLMBinding
from ayo_shims import llamaindex_engines as eng


def selector_binding(selector: Any) -> tuple[LLMBinding | None, str]:
    """The selector's LLM as Ayo calls it; ``(None, why)`` when the selector runs as the user's object."""
    for cls, mirrored in ((LLMSingleSelector, eng.SELECTOR_MIRRORED), (LLMMultiSelector, eng.MULTI_SELECTOR_MIRRORED)):
        if type(selector) is cls or (isinstance(selector, cls) and not overrides_reason(selector, cls, mirrored)):
            return LLMBinding(eng.selector_llm(selector)), ""
        if isinstance(selector, cls):
            return None, str(overrides_reason(selector, cls, mirrored))
    name = type(selector).__name__
    if name.startswith("Pydantic"):
        return None, (f"{name} asks the LLM for a function call (tool calling): it runs as the user's object; "
                      "LLMSingleSelector / LLMMultiSelector are lowered")
    return None, f"{name} is a selector Ayo does not reproduce"


async def select(binding: LLMBinding | None, selector: Any, metadatas: list[Any], query: QueryBundle,
                 send: Any) -> Any:
    """``selector.select(metadatas, query)``'s ``SelectorResult``: through ``binding`` (``send``: Ayo's
    engine for it), or the user's selector itself when ``binding`` is None."""
    if binding is None:
        return await call_stock(selector.select, selector.aselect, metadatas, query)
    prompt = eng.selector_prompt(selector)
    extra = {}
    if isinstance(selector, LLMMultiSelector):
        extra["max_outputs"] = eng.selector_max_outputs(selector) or len(metadatas)
    with spans.opened(selector, spans.call_names(selector, "_select"), metadatas, query) as box:
        text = await binding.predict(send, prompt, num_choices=len(metadatas), **extra,
                                     context_list=eng.build_choices_text(metadatas), query_str=query.query_str)
        return box.set(eng.selector_result(prompt.output_parser.parse(text)))
