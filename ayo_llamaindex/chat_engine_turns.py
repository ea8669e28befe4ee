"""What a chat turn returns and how it streams: stock's responses, built from a lowered turn's results.

The chat engines' own response objects (``AgentChatResponse``, ``StreamingAgentChatResponse``,
``ToolOutput``) and their history writers are used as stock uses them; a streamed answer comes from
the engine's own streaming synthesizer (the same request, the same chunks, the same memory writes);
a ``condense_question`` turn streams from its own query engine, queried with the condensed question
Ayo's graph decoded, as stock queries it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse, ToolOutput
from llama_index.core.types import Thread

from ayo_llamaindex.chat_engine_lowering import TurnState
from ayo_shims import llamaindex_chat as chat_shim


def retriever_source(mode: str, message: str, state: TurnState) -> ToolOutput:
    """The ``retriever`` tool output of a context / condense-plus-context turn."""
    asked = state.condensed if mode == "condense_plus_context" else message
    return ToolOutput(tool_name="retriever", content=str(state.nodes), raw_input={"message": asked},
                      raw_output=state.nodes)


def turn_messages(mode: str, message: str, response: Any) -> tuple[ChatMessage, ChatMessage]:
    """The user and assistant messages a turn puts into memory (``context`` writes ``str(message)``)."""
    content = str(message) if mode == "context" else message
    return (ChatMessage(content=content, role=MessageRole.USER),
            ChatMessage(content=str(response), role=MessageRole.ASSISTANT))


def chat_response(mode: str, message: str, state: TurnState, response: Any, tool_output: Any = None) -> AgentChatResponse:
    if mode == "condense_question":
        return AgentChatResponse(response=str(response), sources=[tool_output])
    return AgentChatResponse(response=str(response), sources=[retriever_source(mode, message, state)],
                             source_nodes=state.nodes)


def _deltas(tokens: Iterator[str]) -> Iterator[ChatResponse]:
    full_response = ""
    for token in tokens:
        full_response += token
        yield ChatResponse(message=ChatMessage(content=full_response, role=MessageRole.ASSISTANT), delta=token)


async def _adeltas(tokens: AsyncIterator[str]) -> AsyncIterator[ChatResponse]:
    full_response = ""
    async for token in tokens:
        full_response += token
        yield ChatResponse(message=ChatMessage(content=full_response, role=MessageRole.ASSISTANT), delta=token)


def stream_response(mode: str, message: str, state: TurnState, streaming: Any, memory: Any) -> StreamingAgentChatResponse:
    """``stream_chat``'s response: the synthesizer's token stream, written to ``memory`` by stock's thread."""
    response = StreamingAgentChatResponse(chat_stream=_deltas(streaming.response_gen),
                                          sources=[retriever_source(mode, message, state)], source_nodes=state.nodes)
    thread = Thread(target=response.write_response_to_history, args=(memory,))
    response.write_response_to_history_thread = thread
    thread.start()
    return response


def astream_response(mode: str, message: str, state: TurnState, streaming: Any, memory: Any) -> StreamingAgentChatResponse:
    """``astream_chat``'s response: the async token stream, written to ``memory`` by stock's task."""
    response = StreamingAgentChatResponse(achat_stream=_adeltas(streaming.async_response_gen()),
                                          sources=[retriever_source(mode, message, state)], source_nodes=state.nodes)
    # stock's own task, on stock's field: the user's response object holds it, as in stock
    response.awrite_response_to_history_task = asyncio.create_task(response.awrite_response_to_history(memory))
    return response


# -- condense_question: the condensed question streams through the engine's own query engine ----------

def condensed_stream(engine: Any, message: str, condensed: str, memory: Any) -> StreamingAgentChatResponse:
    """``CondenseQuestionChatEngine.stream_chat`` after its condense step (which Ayo ran lowered)."""
    from llama_index.core.base.response.schema import StreamingResponse
    from llama_index.core.chat_engine.utils import response_gen_from_query_engine

    query_engine = chat_shim.chat_query_engine(engine)
    with chat_shim.streaming_query(query_engine):
        query_response = query_engine.query(condensed)
    tool_output = chat_shim.tool_output_from_response(engine, condensed, query_response)
    if not isinstance(query_response, StreamingResponse) or query_response.response_gen is None:
        raise ValueError("Streaming is not enabled. Please use chat() instead.")
    memory.put(ChatMessage(role=MessageRole.USER, content=message))
    response = StreamingAgentChatResponse(chat_stream=response_gen_from_query_engine(query_response.response_gen),
                                          sources=[tool_output])
    thread = Thread(target=response.write_response_to_history, args=(memory,))
    response.write_response_to_history_thread = thread
    thread.start()
    return response


async def acondensed_stream(engine: Any, message: str, condensed: str, memory: Any) -> StreamingAgentChatResponse:
    """``CondenseQuestionChatEngine.astream_chat`` after its condense step (which Ayo ran lowered)."""
    from llama_index.core.base.response.schema import AsyncStreamingResponse
    from llama_index.core.chat_engine.utils import aresponse_gen_from_query_engine

    query_engine = chat_shim.chat_query_engine(engine)
    with chat_shim.streaming_query(query_engine):
        query_response = await query_engine.aquery(condensed)
    tool_output = chat_shim.tool_output_from_response(engine, condensed, query_response)
    if not isinstance(query_response, AsyncStreamingResponse):
        raise ValueError("Streaming is not enabled. Please use achat() instead.")
    await memory.aput(ChatMessage(role=MessageRole.USER, content=message))
    response = StreamingAgentChatResponse(
        achat_stream=aresponse_gen_from_query_engine(query_response.async_response_gen()), sources=[tool_output])
    response.awrite_response_to_history_task = asyncio.create_task(response.awrite_response_to_history(memory))
    return response
