"""Capture: walk a LlamaIndex query engine's object graph into a module graph (plans).

Static introspection of the user's objects: query engine -> retriever(s) ->
postprocessors -> synthesizer, each with its LLM / embedding model and vector store.
Every module is either *lowered* (Ayo knows how to split it into primitives and
reproduces stock behaviour exactly) or *opaque* (Ayo calls the user's object as
stock does; the reason is kept for ``explain()``). Capture never refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llama_index.core.query_engine import CitationQueryEngine, RetrieverQueryEngine

from ayo_core.introspect import overrides_reason
from ayo_core.modules import OPAQUE, BoundModule, ModuleGraph
from ayo_llamaindex import cross_encoder
from ayo_llamaindex.embedding import EmbedBinding
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.postprocess import postprocessor_kind
from ayo_llamaindex.retrieval import retriever_kind
from ayo_llamaindex.selectors import selector_binding
from ayo_llamaindex.synthesis import synthesis_mode
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

_ENGINE_MIRRORED = shim.ENGINE_MIRRORED


@dataclass
class RetrieverPlan:
    obj: Any
    kind: str  # vector | fusion | auto_merging | router | recursive | opaque
    reason: str = ""
    embed: EmbedBinding | None = None
    llm: LLMBinding | None = None
    subs: list[RetrieverPlan] = field(default_factory=list)

    @property
    def template(self) -> str:
        return {"vector": "Retrieval", "fusion": "QueryExpansion+Retrieval",
                "auto_merging": "Retrieval+Transform(merge)",
                "router": "Selection+Retrieval",
                "recursive": "Retrieval+ToolCall(links at once)"}.get(self.kind, "Opaque")


@dataclass
class PostprocessorPlan:
    obj: Any
    kind: str  # llm_rerank | structured_rerank | cross_encoder | local | opaque
    reason: str = ""
    llm: LLMBinding | None = None
    batched: bool = False  # cross_encoder: its predict serves concurrent queries in one forward pass

    @property
    def template(self) -> str:
        return {"llm_rerank": "Rerank", "local": "Transform", "structured_rerank": "Transform",
                "cross_encoder": "LocalRerank"}.get(self.kind, "Opaque")

    @property
    def detail(self) -> str:
        """What explain() says about how it runs (LLMRerank's batches, a cross-encoder's batching)."""
        if self.llm is not None:
            return f"llm={binding_label(self.llm)} batch={self.obj.choice_batch_size} top_n={self.obj.top_n}"
        if self.kind == "cross_encoder":
            return cross_encoder.NOTE if self.batched else self.reason
        return ""


@dataclass
class SynthesizerPlan:
    obj: Any
    mode: str | None  # compact | refine | tree_summarize | simple_summarize | (compact_)accumulate | None (opaque)
    reason: str = ""
    llm: LLMBinding | None = None

    @property
    def template(self) -> str:
        return f"Synthesis(mode={self.mode})" if self.mode else "Opaque"


@dataclass
class QueryEnginePlan:
    obj: Any
    kind: str  # retriever_query_engine | citation_query_engine | opaque
    reason: str = ""
    retriever: RetrieverPlan | None = None
    postprocessors: list[PostprocessorPlan] = field(default_factory=list)
    synthesizer: SynthesizerPlan | None = None

    def modules(self) -> ModuleGraph:
        """The core module graph of this plan (see :func:`module_graph`)."""
        return module_graph(self)

    def llm_bindings(self) -> list[LLMBinding]:
        return [plan.llm for plan in self.parts() if getattr(plan, "llm", None) is not None]

    def expands_query(self) -> bool:
        """Whether an LLM decodes before retrieval needs the index (query expansion)."""
        return any(isinstance(p, RetrieverPlan) and p.kind == "fusion" and p.obj.num_queries > 1 for p in self.parts())

    def embed_bindings(self) -> list[EmbedBinding]:
        return [p.embed for p in self.parts() if isinstance(p, RetrieverPlan) and p.embed is not None]

    def parts(self) -> list[Any]:
        plans: list[Any] = []

        def walk(r: RetrieverPlan | None) -> None:
            if r is not None:
                plans.append(r)
                for s in r.subs:
                    walk(s)

        walk(self.retriever)
        plans.extend(self.postprocessors)
        if self.synthesizer is not None:
            plans.append(self.synthesizer)
        return plans

    def opaque_modules(self) -> list[tuple[str, str]]:
        """``(module, reason)`` for every module (or engine) Ayo calls as the user's object."""
        out = []
        if self.kind == "opaque":
            return [("query_engine", self.reason)]
        for plan in self.parts():
            if getattr(plan, "kind", None) == "opaque" or (isinstance(plan, SynthesizerPlan) and plan.mode is None):
                out.append((type(plan.obj).__name__, plan.reason))
            elif isinstance(plan, RetrieverPlan) and plan.kind == "router" and plan.llm is None:
                out.append(("selector", plan.reason))
            llm = getattr(plan, "llm", None)
            if llm is not None and not llm.recognized:
                out.append((llm.label, f"LLM called as the user's object: {llm.reason}"))
            embed = getattr(plan, "embed", None)
            if embed is not None and not embed.recognized:
                out.append((embed.label, f"embedding called as the user's object: {embed.reason}"))
        return out


def capture_retriever(retriever: Any) -> RetrieverPlan:
    kind, reason = retriever_kind(retriever)
    if kind == "vector":
        return RetrieverPlan(retriever, kind, embed=EmbedBinding(shim.retriever_embed_model(retriever)))
    if kind == "auto_merging":
        return RetrieverPlan(retriever, kind, subs=[capture_retriever(shim.auto_merging_vector_retriever(retriever))])
    if kind == "fusion":
        subs = [capture_retriever(r) for r in shim.fusion_retrievers(retriever)]
        return RetrieverPlan(retriever, kind, llm=LLMBinding(shim.fusion_llm(retriever)), subs=subs)
    if kind == "recursive":  # its root retriever lowered; the links it follows run as the user's objects
        return RetrieverPlan(retriever, kind, subs=[capture_retriever(eng.recursive_parts(retriever)["root"])])
    if kind == "router":  # reason: why its selector runs as the user's object, if it does
        parts = eng.router_retriever_parts(retriever)
        binding, why = selector_binding(parts["selector"])
        return RetrieverPlan(retriever, kind, why, llm=binding, subs=[capture_retriever(r) for r in parts["retrievers"]])
    return RetrieverPlan(retriever, "opaque", reason)


def capture_postprocessor(pp: Any, batch_cross_encoder: bool = False) -> PostprocessorPlan:
    """``batch_cross_encoder``: a ``SentenceTransformerRerank`` whose predict can be merged is (reason: why not)."""
    kind, reason = postprocessor_kind(pp)
    if kind == "llm_rerank":
        return PostprocessorPlan(pp, kind, llm=LLMBinding(pp.llm))
    if kind == "cross_encoder" and batch_cross_encoder:
        reason = cross_encoder.not_batchable_reason(pp)
        return PostprocessorPlan(pp, kind, reason, batched=not reason)
    return PostprocessorPlan(pp, kind, reason)


def capture_synthesizer(synth: Any) -> SynthesizerPlan:
    mode, reason = synthesis_mode(synth)
    if mode is None:
        return SynthesizerPlan(synth, None, reason)
    return SynthesizerPlan(synth, mode, llm=LLMBinding(shim.synth_llm(synth)))


def _engine_kind(query_engine: Any) -> tuple[str, str]:
    """``("retriever_query_engine" | "citation_query_engine" | "opaque", reason-if-opaque)``."""
    if isinstance(query_engine, CitationQueryEngine):
        if over := overrides_reason(query_engine, CitationQueryEngine, shim.CITATION_ENGINE_MIRRORED):
            return "opaque", over
        if shim.citation_multimodal(query_engine):
            return "opaque", "multimodal=True (citations of image/audio/video blocks are not lowered)"
        return "citation_query_engine", ""
    if not isinstance(query_engine, RetrieverQueryEngine):
        return "opaque", f"{type(query_engine).__name__} is a query engine Ayo does not lower"
    if over := overrides_reason(query_engine, RetrieverQueryEngine, _ENGINE_MIRRORED):
        return "opaque", over
    return "retriever_query_engine", ""


def capture_query_engine(query_engine: Any, batch_cross_encoder: bool = False) -> QueryEnginePlan:
    """The plan for ``query_engine``; unknown engines become one opaque module. ``batch_cross_encoder``:
    ``Options.batch_cross_encoder`` (see :func:`capture_postprocessor`)."""
    kind, reason = _engine_kind(query_engine)
    if kind == "opaque":
        return QueryEnginePlan(query_engine, "opaque", reason)
    return QueryEnginePlan(
        query_engine, kind,
        retriever=capture_retriever(shim.engine_retriever(query_engine)),
        postprocessors=[capture_postprocessor(pp, batch_cross_encoder)
                        for pp in shim.engine_postprocessors(query_engine)],
        synthesizer=capture_synthesizer(shim.engine_synthesizer(query_engine)),
    )


def module_graph(plan: QueryEnginePlan) -> ModuleGraph:
    """The captured modules as the core's module graph: each bound to its template kind and object."""
    if plan.kind == "opaque":
        return ModuleGraph(BoundModule("query_engine", OPAQUE, plan.obj, plan.reason))
    children = [_retriever_module(plan.retriever)]
    for i, pp in enumerate(plan.postprocessors):
        children.append(BoundModule(f"postprocessor[{i}]", pp.template, pp.obj, pp.reason, detail=pp.detail))
    if plan.kind == "citation_query_engine":
        children.append(BoundModule("citations", "Transform", plan.obj,
                                    detail="the engine's own _create_citation_nodes (numbered sources)"))
    s = plan.synthesizer
    children.append(BoundModule("synthesizer", s.template, s.obj, s.reason, detail=f"llm={binding_label(s.llm)}" if s.llm else ""))
    return ModuleGraph(BoundModule("query_engine", type(plan.obj).__name__, plan.obj, children=children))


def _retriever_module(r: RetrieverPlan) -> BoundModule:
    detail = ""
    if r.kind == "vector":
        detail = f"top_k={r.obj.similarity_top_k} store={type(shim.retriever_vector_store(r.obj)).__name__} embed={binding_label(r.embed)}"
    elif r.kind == "fusion":
        detail = f"num_queries={r.obj.num_queries} mode={_mode(r.obj.mode)} llm={binding_label(r.llm)}"
    elif r.kind == "router":
        selector = eng.router_retriever_parts(r.obj)["selector"]
        detail = f"selector={type(selector).__name__} llm={binding_label(r.llm)}"
    return BoundModule("retriever", r.template, r.obj, r.reason, [_retriever_module(s) for s in r.subs], detail)


def describe(plan: QueryEnginePlan) -> list[str]:
    """The module graph, one module a line (indented children)."""
    if plan.kind == "opaque":
        return [f"query_engine: Opaque({type(plan.obj).__name__}) -- {plan.reason}"]
    return [f"query_engine: {type(plan.obj).__name__}", *module_graph(plan).lines()[1:]]


def _mode(mode: Any) -> str:
    return str(getattr(mode, "value", mode))


def binding_label(binding: Any) -> str:
    """A binding for ``explain()``: its label, marked when Ayo calls it as the user's object."""
    if binding is None:
        return "-"
    return f"{binding.label}{'' if binding.recognized else ' (opaque)'}"
