"""Capture of LlamaIndex chat engines: which of the three RAG chat modes an engine is, and its parts.

``condense_plus_context`` (``CondensePlusContextChatEngine``), ``context`` (``ContextChatEngine``) and
``condense_question`` (``CondenseQuestionChatEngine``) are recognized by type; a user's subclass that
overrides a method whose control flow Ayo mirrors (listed in ``ayo_shims.llamaindex_chat``), or an
engine of any other class, is not: ``optimize`` returns it unchanged with a warning naming why.
The memory is never reproduced: every turn calls the user's memory object itself, in stock's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    CondenseQuestionChatEngine,
    ContextChatEngine,
)
from llama_index.core.query_engine import RetrieverQueryEngine

from ayo_core.introspect import overrides_reason
from ayo_core.modules import OPAQUE, BoundModule, ModuleGraph
from ayo_llamaindex.capture import (
    PostprocessorPlan,
    QueryEnginePlan,
    RetrieverPlan,
    binding_label,
    capture_postprocessor,
    capture_query_engine,
    capture_retriever,
    module_graph,
)
from ayo_llamaindex.llm import LLMBinding
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_chat as chat_shim

# most specific first (none of the three derives from another today; the order keeps it safe)
MODES: tuple[tuple[type, str, tuple[str, ...]], ...] = (
    (CondensePlusContextChatEngine, "condense_plus_context", chat_shim.CONDENSE_PLUS_CONTEXT_MIRRORED),
    (ContextChatEngine, "context", chat_shim.CONTEXT_MIRRORED),
    (CondenseQuestionChatEngine, "condense_question", chat_shim.CONDENSE_QUESTION_MIRRORED),
)


@dataclass
class ChatEnginePlan:
    """A recognized chat engine: its mode, LLM, and what answers a turn (retriever or query engine)."""

    obj: Any
    mode: str  # condense_plus_context | context | condense_question
    llm: LLMBinding
    retriever: RetrieverPlan | None = None
    postprocessors: list[PostprocessorPlan] = field(default_factory=list)
    query_engine: QueryEnginePlan | None = None
    # condense_question: the wrapped query engine's optimized stand-in, which a turn's graph calls
    # (``ayo_llamaindex.composed.ToolQueryEngine``); set by the optimized chat engine
    answer_engine: Any = None

    @property
    def condenses(self) -> bool:
        return self.mode in ("condense_plus_context", "condense_question")

    def llm_bindings(self) -> list[LLMBinding]:
        parts = [self.llm, *(p.llm for p in self.postprocessors if p.llm is not None)]
        if self.retriever is not None and self.retriever.llm is not None:
            parts.append(self.retriever.llm)
        if self.query_engine is not None:
            parts += self.query_engine.llm_bindings()
        return parts

    def embed_bindings(self) -> list[Any]:
        if self.query_engine is not None:
            return self.query_engine.embed_bindings()
        out: list[Any] = []

        def walk(r: RetrieverPlan) -> None:
            if r.embed is not None:
                out.append(r.embed)
            for s in r.subs:
                walk(s)

        if self.retriever is not None:
            walk(self.retriever)
        return out

    def modules(self) -> ModuleGraph:
        """The chat engine as the core's module graph (what ``explain()`` lists)."""
        children = []
        if self.condenses:
            kind = "LLMCall" if self.llm.recognized else OPAQUE
            children.append(BoundModule("condense", kind, self.llm.llm, self.llm.reason,
                                        detail=f"llm={binding_label(self.llm)}"))
        if self.query_engine is not None:
            children.append(module_graph(self.query_engine).root)
        else:
            children.append(_retriever_module(self.retriever))
            for i, pp in enumerate(self.postprocessors):
                children.append(BoundModule(f"postprocessor[{i}]", pp.template, pp.obj, pp.reason))
            children.append(BoundModule("synthesizer", "Synthesis(mode=compact)", None,
                                        detail=f"llm={binding_label(self.llm)} (the engine's per-turn "
                                               "CompactAndRefine: system prompt + history + context)"))
        return ModuleGraph(BoundModule("chat_engine", f"{type(self.obj).__name__}({self.mode})", self.obj,
                                       children=children))

    def opaque_modules(self) -> list[tuple[str, str]]:
        out = []
        if not self.llm.recognized:
            out.append((self.llm.label, f"LLM called as the user's object: {self.llm.reason}"))
        if self.query_engine is not None:
            out += self.query_engine.opaque_modules()
        if self.retriever is not None and self.retriever.kind == "opaque":
            out.append((type(self.retriever.obj).__name__, self.retriever.reason))
        out += [(e.label, f"embedding called as the user's object: {e.reason}")
                for e in self.embed_bindings() if self.query_engine is None and not e.recognized]
        out += [(type(p.obj).__name__, p.reason) for p in self.postprocessors if p.kind == "opaque"]
        return out


def _retriever_module(r: RetrieverPlan) -> BoundModule:
    return BoundModule("retriever", r.template, r.obj, r.reason, [_retriever_module(s) for s in r.subs])


def recognize_chat_engine(engine: Any) -> tuple[str | None, str]:
    """``(mode, "")`` for a chat engine Ayo lowers, else ``(None, why it stays the user's object)``."""
    for cls, mode, mirrored in MODES:
        if isinstance(engine, cls):
            if over := overrides_reason(engine, cls, mirrored):
                return None, f"a subclass of {cls.__name__} that changes its control flow ({over})"
            return mode, ""
    return None, (f"a chat engine Ayo does not lower ({type(engine).__name__}; Ayo lowers chat_mode="
                  "'condense_plus_context', 'context' and 'condense_question')")


def capture_chat_engine(engine: Any, batch_cross_encoder: bool = False) -> tuple[ChatEnginePlan | None, str]:
    """The plan of a recognized chat engine, or ``(None, reason)``."""
    mode, reason = recognize_chat_engine(engine)
    if mode is None:
        return None, reason
    llm = LLMBinding(chat_shim.chat_llm(engine))
    if mode == "condense_question":
        qe = chat_shim.chat_query_engine(engine)
        if isinstance(qe, RetrieverQueryEngine) and shim.synth_streaming(shim.engine_synthesizer(qe)):
            # stock flips the synthesizer's private streaming flag around each query: not mirrored
            return None, "a condense_question engine whose query engine streams (streaming=True; stock flips its flag per turn)"
        return ChatEnginePlan(engine, mode, llm, query_engine=capture_query_engine(qe, batch_cross_encoder)), ""
    return ChatEnginePlan(
        engine, mode, llm, retriever=capture_retriever(chat_shim.chat_retriever(engine)),
        postprocessors=[capture_postprocessor(pp, batch_cross_encoder)
                        for pp in chat_shim.chat_postprocessors(engine)]), ""
