"""The LlamaIndex chat-engine internals ``ayo_llamaindex.chat_engine*`` touches (declared once each).

The three chat engines keep their parts (retriever, LLM, memory, prompts) in private attributes
assigned in ``__init__``; capture reads them here. The per-turn response synthesizer is built by
the engine's own ``_get_response_synthesizer(chat_history, streaming)`` (its system prompt, prefix
messages, history and context templates), never re-typed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ayo_shims.llamaindex import CORE, CORE_CHECKED, assigns, mirrored
from ayo_shims.touchpoints import all_of, declare, has_attr

_CHAT = "llama_index.core.chat_engine"

declare(f"{_CHAT}.CondensePlusContextChatEngine._retriever/_llm/_memory/_node_postprocessors/"
        "_condense_prompt_template/_skip_condense/_verbose", framework=CORE, checked=CORE_CHECKED,
        why="capture walks the condense-plus-context chat engine into its condense step, retriever and memory",
        check=assigns(_CHAT, "CondensePlusContextChatEngine", "_retriever", "_llm", "_memory",
                      "_node_postprocessors", "_condense_prompt_template", "_skip_condense", "_verbose"))
declare(f"{_CHAT}.ContextChatEngine._retriever/_llm/_memory/_node_postprocessors", framework=CORE,
        checked=CORE_CHECKED, why="capture walks the context chat engine into its retriever and memory",
        check=assigns(_CHAT, "ContextChatEngine", "_retriever", "_llm", "_memory", "_node_postprocessors"))
declare(f"{_CHAT}.CondenseQuestionChatEngine._query_engine/_condense_question_prompt/_memory/_llm/_verbose",
        framework=CORE, checked=CORE_CHECKED,
        why="capture walks the condense-question chat engine into its condense step and query engine",
        check=assigns(_CHAT, "CondenseQuestionChatEngine", "_query_engine", "_condense_question_prompt",
                      "_memory", "_llm", "_verbose"))
declare(f"{_CHAT}.ContextChatEngine/CondensePlusContextChatEngine._get_response_synthesizer", framework=CORE,
        checked=CORE_CHECKED, why="the final answer's prompts (system prompt, history, context template) "
        "come from the engine's own per-turn synthesizer",
        check=all_of(has_attr(_CHAT, "ContextChatEngine", "_get_response_synthesizer"),
                     has_attr(_CHAT, "CondensePlusContextChatEngine", "_get_response_synthesizer")))

# the chat methods whose stock control flow Ayo mirrors: a subclass overriding one runs as the user's object
CONDENSE_PLUS_CONTEXT_MIRRORED = mirrored(_CHAT, "CondensePlusContextChatEngine", (
    "chat", "achat", "stream_chat", "astream_chat", "_run_c3", "_arun_c3", "_condense_question",
    "_acondense_question", "_get_nodes", "_aget_nodes", "_get_response_synthesizer"),
    why="a condense-plus-context chat turn is lowered to a graph (condense, retrieval, synthesis)")
CONTEXT_MIRRORED = mirrored(_CHAT, "ContextChatEngine", (
    "chat", "achat", "stream_chat", "astream_chat", "_get_nodes", "_aget_nodes", "_get_response_synthesizer"),
    why="a context chat turn is lowered to a graph (retrieval, synthesis)")
CONDENSE_QUESTION_MIRRORED = mirrored(_CHAT, "CondenseQuestionChatEngine", (
    "chat", "achat", "stream_chat", "astream_chat", "_condense_question", "_acondense_question",
    "_get_tool_output_from_response"),
    why="a condense-question chat turn is lowered to a graph (condense, then the query engine)")


def chat_retriever(engine: Any) -> Any:
    return engine._retriever


def chat_llm(engine: Any) -> Any:
    return engine._llm


def chat_memory(engine: Any) -> Any:
    return engine._memory


def chat_postprocessors(engine: Any) -> list[Any]:
    return list(engine._node_postprocessors)


def condense_plus_context_prompt(engine: Any) -> Any:
    """The condense-plus-context engine's condense template."""
    return engine._condense_prompt_template


def skips_condense(engine: Any) -> bool:
    return bool(engine._skip_condense)


def chat_verbose(engine: Any) -> bool:
    return bool(engine._verbose)


def condense_question_prompt(engine: Any) -> Any:
    """The condense-question engine's condense template."""
    return engine._condense_question_prompt


def chat_query_engine(engine: Any) -> Any:
    return engine._query_engine


def response_synthesizer(engine: Any, chat_history: list[Any], streaming: bool = False) -> Any:
    """The engine's own per-turn ``CompactAndRefine`` (prompts carry system prompt and history)."""
    return engine._get_response_synthesizer(chat_history, streaming=streaming)


def tool_output_from_response(engine: Any, query: str, response: Any) -> Any:
    """``CondenseQuestionChatEngine``'s own ``ToolOutput`` for a query engine response."""
    return engine._get_tool_output_from_response(query, response)


declare("llama_index.core.response_synthesizers.BaseSynthesizer._streaming (set per streamed condense_question turn)",
        framework=CORE, checked=CORE_CHECKED,
        why="a streamed condense_question turn makes its RetrieverQueryEngine's synthesizer stream for that "
            "query, as CondenseQuestionChatEngine.stream_chat does",
        check=assigns("llama_index.core.response_synthesizers.base", "BaseSynthesizer", "_streaming"))


@contextmanager
def streaming_query(query_engine: Any) -> Iterator[None]:
    """``CondenseQuestionChatEngine.(a)stream_chat``'s toggle: a ``RetrieverQueryEngine``'s synthesizer
    streams inside the block and is reset after it (stock's own hack, the same attribute)."""
    from llama_index.core.query_engine.retriever_query_engine import RetrieverQueryEngine

    if not isinstance(query_engine, RetrieverQueryEngine):
        yield
        return
    synth = query_engine._response_synthesizer
    was = synth._streaming
    synth._streaming = True
    try:
        yield
    finally:
        synth._streaming = was
