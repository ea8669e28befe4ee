"""Lowering of one chat turn to a primitive graph (``ayo_core.graph``), through the core's templates.

Shape of a ``condense_plus_context`` turn (``context``: no condense, the message is the question)::

    message, history ── condense (LLMCall: PREFILL+DECODE, the engine's condense prompt) ── question
    question ── retrieve (Retrieval: EMBED ── SEARCH, or the query-engine retriever lowerings)
             ── post{i} (Rerank / Transform / Opaque) ── synthesize (Synthesis(mode=compact)) ── turn
    query ── synthesize.prefill (PARTIAL_PREFILL, added by the core's prefill-splitting pass where the
             device rule lets a warm-up pay): the final prompt's static head, warmed while condense decodes

``condense_question``: condense ── question ── answer, a node awaiting the wrapped query engine's own
optimized graph (:class:`~ayo_llamaindex.composed.ToolQueryEngine`, as stock calls ``query``), so its
query events and spans open where stock's do. A streamed turn's graph ends at the context nodes:
the answer then streams from the engine's own streaming synthesizer, so chunks are stock's.

Each turn's graph is built afresh: the final prompts carry that turn's history (the engine's own
``_get_response_synthesizer(chat_history)`` builds them), which the per-turn value ``TurnState``
also collects (condensed question, context nodes) for the chat response.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.generic_utils import messages_to_history_str
from llama_index.core.schema import QueryBundle

from ayo_core.graph import Graph
from ayo_core.templates import LLMCall, ToolCall, Transform
from ayo_llamaindex.capture import capture_synthesizer
from ayo_llamaindex.chat_engine_capture import ChatEnginePlan
from ayo_llamaindex.lowering import lower_postprocessor, lower_retriever, lower_synthesizer
from ayo_llamaindex.runtime import EngineAssignment, llm_send
from ayo_shims import llamaindex_chat as chat_shim


def _stock_logger(mode: str) -> logging.Logger:
    """The logger of the stock engine's module (``llama_index.core.chat_engine.<mode>``): its lines stay there."""
    return logging.getLogger(f"llama_index.core.chat_engine.{mode}")


@dataclass
class TurnState:
    """What a turn's graph found besides its value: the condensed question and the context nodes."""

    condensed: str = ""
    nodes: list[Any] = field(default_factory=list)


def build_turn_graph(plan: ChatEnginePlan, assign: EngineAssignment, history: list[Any], state: TurnState,
                     query_id: str, streaming: bool = False) -> Graph:
    """One turn's graph. Inputs: ``message`` (str), ``history`` (the memory's messages), ``query``
    (``QueryBundle(message)``) and ``prev_chunks`` (``context`` mode). Value: the synthesized
    ``Response`` (the query engine's for ``condense_question``), or the context nodes when ``streaming``
    (the condensed question for ``condense_question``, whose query engine then streams as stock's does)."""
    g = Graph(query_id=query_id)
    for name in ("message", "history", "query", "prev_chunks"):
        g.input(name)
    question = _condense(g, plan, assign, state) if plan.condenses else "query"
    if plan.query_engine is not None and streaming:  # condense_question streamed: the query engine streams after
        g.output(question)
        return g
    if plan.query_engine is not None:  # condense_question: the query engine answers the condensed question
        g.output(_ask_query_engine(g, plan, question))
        return g
    nodes = lower_retriever(g, plan.retriever, assign, question, frozenset())
    for i, pp in enumerate(plan.postprocessors):
        nodes = lower_postprocessor(g, pp, assign, f"post{i}", question, nodes)
    nodes = _context_nodes(g, plan, state, nodes)
    if streaming:
        g.output(nodes)
        return g
    synth = capture_synthesizer(chat_shim.response_synthesizer(plan.obj, history))
    g.output(lower_synthesizer(g, synth, assign, "query", nodes))
    return g


def _condense(g: Graph, plan: ChatEnginePlan, assign: EngineAssignment, state: TurnState) -> str:
    """The condense step (one LLM call, skipped as stock skips it) and the ``QueryBundle`` it feeds."""
    engine, binding, kind = plan.obj, plan.llm, assign.llm_kind(plan.llm)
    plus_context = plan.mode == "condense_plus_context"

    def render(message: str, history: list[Any]) -> Any:
        if not history or (plus_context and chat_shim.skips_condense(engine)):
            return None  # stock returns the message itself, without an LLM call
        history_str = messages_to_history_str(history)
        _stock_logger(plan.mode).debug(history_str)
        if plus_context:  # CondensePlusContextChatEngine: llm.complete(template.format(...))
            return chat_shim.condense_plus_context_prompt(engine).format(chat_history=history_str, question=message)
        return {"chat_history": history_str, "question": message}  # CondenseQuestion: llm.predict(template, ...)

    async def call(ctx: Any, rendered: Any) -> str:
        send = llm_send(ctx, kind)
        if isinstance(rendered, str):
            return str(await binding.complete(send, rendered))
        return await binding.predict(send, chat_shim.condense_question_prompt(engine), **rendered)

    async def decode(ctx: Any, message: str, history: list[Any]) -> str:
        rendered = render(message, history)
        condensed = message if rendered is None else await call(ctx, rendered)
        state.condensed = condensed
        _report(engine, plan.mode, condensed)
        return condensed

    # the node's fn renders and calls in one step (skipping the call when stock does): render passes inputs on
    condense = LLMCall(lambda **inputs: inputs, "condense", call=lambda ctx, inputs: decode(ctx, **inputs), cost=0.5)
    name = condense.build(g, "condense", {"message": "message", "history": "history"})
    return Transform(QueryBundle, "condense").build(g, "question", {"query_str": name})


def _ask_query_engine(g: Graph, plan: ChatEnginePlan, question: str) -> str:
    """``self._query_engine.query(condensed_question)`` (``aquery`` in ``achat``): the wrapped engine's own
    optimized graph, run from this node, so its query events and spans nest as stock's do."""
    engine = plan.answer_engine

    async def ask(ctx: Any, question: QueryBundle) -> Any:
        return await engine.aquery_in_graph(question.query_str)

    return ToolCall(ask, "query_engine", takes_ctx=True, side_effect=False, resources=None, cost=2.0).build(
        g, "answer", {"question": question})


def _report(engine: Any, mode: str, condensed: str) -> None:
    """Stock's log line (and ``verbose`` print) about the condensed question."""
    line = f"Condensed question: {condensed}" if mode == "condense_plus_context" else f"Querying with: {condensed}"
    _stock_logger(mode).info(line)
    if chat_shim.chat_verbose(engine):
        print(line)  # stock prints to stdout when verbose; so does the mirror


def _context_nodes(g: Graph, plan: ChatEnginePlan, state: TurnState, nodes: str) -> str:
    """The turn's context nodes (``context`` mode: ``prev_chunks`` when retrieval found none), kept in ``state``."""
    use_prev = plan.mode == "context"

    def keep(nodes: list[Any], prev_chunks: list[Any] | None) -> list[Any]:
        if use_prev and len(nodes) == 0 and prev_chunks is not None:
            nodes = prev_chunks
        state.nodes = nodes
        return nodes

    return Transform(keep, "chat_engine").build(g, "context", {"nodes": nodes, "prev_chunks": "prev_chunks"})
