"""The drop-in chat engine: ``optimize(index.as_chat_engine(chat_mode=...))`` returns an ``OptimizedChatEngine``.

Each turn calls the user's memory exactly as the stock engine does (``set``/``get`` before, ``put``
after; the async methods use ``aset``/``aget``/``aput``), runs the condense step, retrieval and the
answer as one lowered graph (:mod:`ayo_llamaindex.chat_engine_lowering`) on the core's shared
runtime, and returns stock's response objects. ``stream_chat``/``astream_chat`` run condense and
retrieval lowered, then stream the answer from the engine's own streaming synthesizer; a
``condense_question`` engine's streamed turn runs its condense decode lowered, then streams from its
own query engine (its synthesizer's streaming flag set for that query, as stock sets it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from llama_index.core.callbacks import trace_method
from llama_index.core.chat_engine.types import AgentChatResponse, BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.schema import QueryBundle

from ayo_core.explain import Explanation
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_llamaindex import chat_engine_turns as turns
from ayo_llamaindex import spans
from ayo_llamaindex.chat_engine_capture import ChatEnginePlan, capture_chat_engine
from ayo_llamaindex.chat_engine_lowering import TurnState, build_turn_graph
from ayo_llamaindex.composed import tool_engine
from ayo_llamaindex.runtime import LOOP, EngineAssignment, assign_engines, runtime_for
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_chat as chat_shim

log = logging.getLogger(__name__)
spanned_elsewhere = shim.mark_spanned_elsewhere
_ids = itertools.count()


def optimize_chat_engine(engine: Any, policy: str = "critical_path", options: Options | None = None) -> Any:
    """An :class:`OptimizedChatEngine` for a recognized chat engine; any other stays the user's object
    (a warning says why)."""
    from ayo_llamaindex import unsupported_message

    plan, reason = capture_chat_engine(engine, bool(options and options.batch_cross_encoder))
    if plan is None:
        log.warning("ayo_llamaindex.optimize: %s", unsupported_message(engine, reason))
        return engine
    return OptimizedChatEngine(plan, policy=policy, options=options)


class OptimizedChatEngine(BaseChatEngine):
    """A ``BaseChatEngine`` answering each turn of the user's chat engine as an optimized Ayo graph.

    Same responses (text, ``sources``, ``source_nodes``), same memory contents, same stream text as
    the stock engine; ``explain()`` shows what was lowered; ``last_trace`` is the last turn's trace.
    A facade over the core's :class:`~ayo_core.pipeline.OptimizedPipeline`: a turn's graph closes
    over that turn's history and state, so it is lowered and optimized per turn (no shape key).
    """

    def __init__(self, plan: ChatEnginePlan, policy: str = "critical_path", options: Options | None = None) -> None:
        self._plan, self._stock = plan, plan.obj
        self._options = options or Options(policy=policy)
        self._policy = self._options.policy
        self._memory = chat_shim.chat_memory(plan.obj)
        if plan.query_engine is not None:  # condense_question: its query engine answers, optimized on its own
            plan.answer_engine = tool_engine(chat_shim.chat_query_engine(plan.obj), self._options)
        self._pipeline: OptimizedPipeline[tuple[ChatEnginePlan, EngineAssignment]] = OptimizedPipeline(
            lambda: (plan, assign_engines(plan.llm_bindings(), plan.embed_bindings())), self._lower_turn,
            self._options, runtime=self._runtime)
        self._assign = self._pipeline.plan[1]
        self.callback_manager = plan.obj.callback_manager

    @property
    def stock(self) -> BaseChatEngine:
        """The user's original chat engine."""
        return self._stock

    @property
    def mode(self) -> str:
        return self._plan.mode

    @property
    def last_trace(self) -> Any:
        """The ``ayo_core.trace.Trace`` of the last turn (None before the first)."""
        return self._pipeline.last_trace

    @property
    def last_graph(self) -> Any:
        """The optimized graph of the last turn (None before the first)."""
        return self._pipeline.last_graph

    # -- one turn's graph ---------------------------------------------------------------------
    @staticmethod
    def _lower_turn(captured: tuple[ChatEnginePlan, EngineAssignment], turn: tuple[list[Any], TurnState, bool]) -> Any:
        (plan, assign), (history, state, streaming) = captured, turn
        return build_turn_graph(plan, assign, history, state, f"chat{next(_ids)}", streaming)

    def _runtime(self) -> Any:
        return runtime_for(self._assign, self._policy, self._options.llm_inflight)

    async def _run(self, turn: tuple[list[Any], TurnState, bool], inputs: dict[str, Any],
                   caller_loop: asyncio.AbstractEventLoop | None = None) -> Any:
        CALLER_LOOP.set(caller_loop)  # this task's own context: opaque nodes take stock's async path in achat
        return await self._pipeline.run(inputs, call=turn)

    def _inputs(self, message: str, history: list[Any], prev_chunks: Any) -> dict[str, Any]:
        return {"message": message, "history": history, "query": QueryBundle(message), "prev_chunks": prev_chunks}

    def _turn(self, message: str, history: list[Any], prev_chunks: Any = None, streaming: bool = False) -> tuple[TurnState, Any]:
        state = TurnState(condensed=message)
        return state, LOOP.run_sync(self._run((history, state, streaming), self._inputs(message, history, prev_chunks)))

    async def _aturn(self, message: str, history: list[Any], prev_chunks: Any = None,
                     streaming: bool = False) -> tuple[TurnState, Any]:
        state = TurnState(condensed=message)
        inputs = self._inputs(message, history, prev_chunks)
        return state, await LOOP.arun(self._run((history, state, streaming), inputs, asyncio.get_running_loop()))

    # -- memory, in the stock engine's order ------------------------------------------------------
    def _history(self, message: str, chat_history: list[Any] | None) -> list[Any]:
        if self.mode == "condense_question":  # stock: chat_history or memory.get (no set)
            return chat_history or self._memory.get(input=message)
        if chat_history is not None:
            self._memory.set(chat_history)
        return self._memory.get(input=message)

    async def _ahistory(self, message: str, chat_history: list[Any] | None) -> list[Any]:
        if self.mode == "condense_question":
            return chat_history or await self._memory.aget(input=message)
        if chat_history is not None:
            await self._memory.aset(chat_history)
        return await self._memory.aget(input=message)

    def _check_prev_chunks(self, method: str, prev_chunks: Any) -> None:
        if prev_chunks is not None and self.mode != "context":  # only ContextChatEngine takes it
            raise TypeError(f"{type(self._stock).__name__}.{method}() got an unexpected keyword argument 'prev_chunks'")

    def _answer(self, message: str, state: TurnState, response: Any) -> AgentChatResponse:
        tool_output = None
        if self.mode == "condense_question":
            tool_output = chat_shim.tool_output_from_response(self._stock, state.condensed, response)
        return turns.chat_response(self.mode, message, state, response, tool_output)

    @contextlib.contextmanager
    def _stock_span(self, method: str, message: str, chat_history: Any, prev_chunks: Any) -> Iterator[spans.Box]:
        """The span the stock engine's ``method`` opens (``ContextChatEngine.chat``), with the caller's arguments."""
        given = {k: v for k, v in (("chat_history", chat_history), ("prev_chunks", prev_chunks)) if v is not None}
        with spans.opened(self._stock, [method], message, **given) as box:
            yield box

    # -- the chat API: each opens the stock engine's span (this class's own are marked elsewhere) ---------
    @spanned_elsewhere
    @trace_method("chat")
    def chat(self, message: str, chat_history: list[Any] | None = None, prev_chunks: Any = None) -> AgentChatResponse:
        self._check_prev_chunks("chat", prev_chunks)
        with self._stock_span("chat", message, chat_history, prev_chunks) as span:
            state, response = self._turn(message, self._history(message, chat_history), prev_chunks)
            answer = self._answer(message, state, response)
            for turn_message in turns.turn_messages(self.mode, message, response):
                self._memory.put(turn_message)
            return span.set(answer)

    @spanned_elsewhere
    @trace_method("chat")
    async def achat(self, message: str, chat_history: list[Any] | None = None,
                    prev_chunks: Any = None) -> AgentChatResponse:
        self._check_prev_chunks("achat", prev_chunks)
        with self._stock_span("achat", message, chat_history, prev_chunks) as span:
            state, response = await self._aturn(message, await self._ahistory(message, chat_history), prev_chunks)
            answer = self._answer(message, state, response)
            for turn_message in turns.turn_messages(self.mode, message, response):
                await self._memory.aput(turn_message)
            return span.set(answer)

    @spanned_elsewhere
    @trace_method("chat")
    def stream_chat(self, message: str, chat_history: list[Any] | None = None,
                    prev_chunks: Any = None) -> StreamingAgentChatResponse:
        self._check_prev_chunks("stream_chat", prev_chunks)
        with self._stock_span("stream_chat", message, chat_history, prev_chunks) as span:
            return span.set(self._stream_chat(message, chat_history, prev_chunks))

    def _stream_chat(self, message: str, chat_history: list[Any] | None, prev_chunks: Any) -> StreamingAgentChatResponse:
        history = self._history(message, chat_history)
        if self.mode == "condense_question":
            state, _ = self._turn(message, history, streaming=True)
            return turns.condensed_stream(self._stock, message, state.condensed, self._memory)
        state, nodes = self._turn(message, history, prev_chunks, streaming=True)
        streaming = chat_shim.response_synthesizer(self._stock, history, streaming=True).synthesize(message, nodes)
        self._memory.put(turns.turn_messages(self.mode, message, "")[0])
        return turns.stream_response(self.mode, message, state, streaming, self._memory)

    @spanned_elsewhere
    @trace_method("chat")
    async def astream_chat(self, message: str, chat_history: list[Any] | None = None,
                           prev_chunks: Any = None) -> StreamingAgentChatResponse:
        self._check_prev_chunks("astream_chat", prev_chunks)
        with self._stock_span("astream_chat", message, chat_history, prev_chunks) as span:
            return span.set(await self._astream_chat(message, chat_history, prev_chunks))

    async def _astream_chat(self, message: str, chat_history: list[Any] | None,
                            prev_chunks: Any) -> StreamingAgentChatResponse:
        history = await self._ahistory(message, chat_history)
        if self.mode == "condense_question":
            state, _ = await self._aturn(message, history, streaming=True)
            return await turns.acondensed_stream(self._stock, message, state.condensed, self._memory)
        state, nodes = await self._aturn(message, history, prev_chunks, streaming=True)
        synth = chat_shim.response_synthesizer(self._stock, history, streaming=True)
        streaming = await synth.asynthesize(message, nodes)
        await self._memory.aput(turns.turn_messages(self.mode, message, "")[0])
        return turns.astream_response(self.mode, message, state, streaming, self._memory)

    @spanned_elsewhere
    def reset(self) -> None:
        self._stock.reset()  # opens its own span

    @property
    def chat_history(self) -> list[Any]:
        return self._stock.chat_history

    def __getattr__(self, name: str) -> Any:
        # only reached for names this class lacks (chat_repl helpers, attributes users read): the stock engine's
        stock = self.__dict__.get("_stock")
        if stock is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(stock, name)

    def explain(self) -> Explanation:
        """The chat engine's modules (what was lowered, to which template), the last turn's primitive graph
        (a first turn's when none ran yet), passes and optimizations; ``str()`` is the human view."""
        graph = self.last_graph or self._pipeline.graph(([], TurnState(), False))
        modules = self._plan.modules()
        lowered = [(m.name, m.kind) for m in modules.lowered() if m.name != "chat_engine"]
        return self._pipeline.explain(f"Ayo plan for {type(self._stock).__name__} (chat_mode={self.mode})",
                                      graph=graph, modules=[("chat_engine", self.mode), *lowered],
                                      opaque=self._plan.opaque_modules(), module_lines=modules.lines())

    def __repr__(self) -> str:
        return f"OptimizedChatEngine({type(self._stock).__name__}, chat_mode={self.mode})"
