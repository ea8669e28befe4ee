"""``ContextualCompressionRetriever``: the base retriever lowered, then its compressor; an ``LLMChainExtractor`` /
``LLMChainFilter`` (alone or as a stage of a ``DocumentCompressorPipeline``) makes one chain call per
document, all in flight at once.

Stock retrieves with the base retriever, then calls the compressor's ``llm_chain`` once per
document: one after another in ``LLMChainExtractor.compress_documents`` (the sync path every
``invoke`` takes), as a ``batch`` in ``LLMChainFilter``. Ayo lowers the base retriever as any
retriever, and the compressor's chain (``prompt | llm | parser``, captured and lowered like
any LCEL chain: its model a decode on the LLM engine) once per retrieved document when the
documents are known (the graph grows by ``Expand``), so every document's decode runs
together. What is kept is decided by the compressor's own rules, re-stated from its
``compress_documents``: the extractor keeps a document whose output is non-empty, as a new
``Document(page_content=output, metadata=doc.metadata)``; the filter keeps the documents whose
output is ``True``. The chain input is the compressor's own ``get_input(query, doc)``.

A ``DocumentCompressorPipeline`` runs its stages in order as stock does: the LLM-chain compressors
lowered as above, any other compressor or document transformer (``EmbeddingsFilter``, a text
splitter, a cross-encoder reranker) called as the user's object in one node (``compress_documents`` /
``transform_documents`` in a worker thread under ``invoke``, their async methods under ``ainvoke``).
Any other compressor alone is such a node too, after the lowered base retriever.

Runs: the retriever's run opens before the base retriever's (its child), and each chain run
is a child of the retriever's run, as in stock. A compressor with a legacy ``LLMChain`` or a
subclass of ``ContextualCompressionRetriever`` / ``DocumentCompressorPipeline`` stays opaque.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from langchain_core.documents import BaseDocumentCompressor, BaseDocumentTransformer, Document
from langchain_core.runnables import RunnableConfig

from ayo_core.runtime.context import Expand
from ayo_core.templates import Aggregate, Route, Transform
from ayo_langchain import capture as cap
from ayo_langchain.callbacks import PlannedRetrieverRun, leaf_config, reported
from ayo_langchain.lower import COST, LOWERINGS, Lowerer

try:
    from langchain_classic.chains.llm import LLMChain
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import (
        DocumentCompressorPipeline,
        LLMChainExtractor,
        LLMChainFilter,
    )
except ImportError:  # pragma: no cover - langchain-classic is a dependency
    ContextualCompressionRetriever = None  # type: ignore[assignment,misc]


@dataclass
class Stage:
    """One step of the compressor: an LLM-chain compressor (``chain`` lowered per document) or a local one."""

    obj: Any
    chain: cap.Module | None = None  # LLMChainExtractor / LLMChainFilter: its llm_chain
    keep_if_true: bool = False  # LLMChainFilter (keep on True) vs LLMChainExtractor (keep the non-empty output)


@dataclass
class Compression(cap.Module):
    """A ``ContextualCompressionRetriever``: its base retriever, then its compressor's stages."""

    retriever: cap.Module | None = None  # the base retriever
    stages: list[Stage] = field(default_factory=list)
    opens_own_run: ClassVar[bool] = True  # as the root, its lowering reports its run (no chain run around it)

    def children(self) -> list[cap.Module]:
        return [m for m in (self.retriever, *(s.chain for s in self.stages)) if m is not None]

    def note(self) -> str:
        llm = [type(s.obj).__name__ for s in self.stages if s.chain is not None]
        local = [type(s.obj).__name__ for s in self.stages if s.chain is None]
        parts = [f"{name}'s chain runs once per retrieved document, all at once (stock's LLMChainExtractor: one document "
                 "after another)" for name in llm]
        parts += [f"{name} runs as the user's object in its node" for name in local]
        return f"{self.label()}: {'; '.join(parts)}"


cap.TEMPLATES[Compression] = "DocumentCompression"


def _llm_stage_reason(comp: Any) -> str:
    if isinstance(comp.llm_chain, LLMChain):
        return f"{type(comp).__name__} with a legacy LLMChain: called as-is"
    return ""


def _is_llm_compressor(comp: Any) -> bool:
    return type(comp) in (LLMChainExtractor, LLMChainFilter)


def _stage_objects(comp: Any) -> list[Any]:
    return list(comp.transformers) if type(comp) is DocumentCompressorPipeline else [comp]


def compression_opaque_reason(r: Any) -> str:
    """'' when Ayo lowers the compression retriever ``r``, else why it runs as-is."""
    if type(r) is not ContextualCompressionRetriever:
        return f"{type(r).__name__} subclasses ContextualCompressionRetriever: called as-is"
    comp = r.base_compressor
    if isinstance(comp, DocumentCompressorPipeline) and type(comp) is not DocumentCompressorPipeline:
        return f"{type(comp).__name__} subclasses DocumentCompressorPipeline: called as-is"
    for stage in _stage_objects(comp):
        if _is_llm_compressor(stage) and (why := _llm_stage_reason(stage)):
            return why
        if not isinstance(stage, BaseDocumentCompressor | BaseDocumentTransformer):
            return f"{type(stage).__name__} is not a document compressor or transformer: called as-is"
    return ""


def recognize_compression(capturer: cap.Capturer, r: Any, wrappers: tuple[Any, ...]) -> cap.Module:
    if why := compression_opaque_reason(r):
        return cap.Opaque(r, wrappers, why)
    stages = [Stage(obj, capturer.capture(obj.llm_chain), type(obj) is LLMChainFilter) if _is_llm_compressor(obj)
              else Stage(obj) for obj in _stage_objects(r.base_compressor)]
    return Compression(r, wrappers, retriever=capturer.capture(r.base_retriever), stages=stages)


if ContextualCompressionRetriever is not None:
    cap.RECOGNIZERS.add(ContextualCompressionRetriever, recognize_compression)


def lower_compression(lw: Lowerer, m: Compression, src: str, cfg: RunnableConfig) -> str:
    # stock's compressor invokes (batches) its chain, even inside a stream: its models do not stream
    was, lw.invoked = lw.invoked, True
    try:
        return _lower_compression(lw, m, src, cfg)
    finally:
        lw.invoked = was


def _lower_compression(lw: Lowerer, m: Compression, src: str, cfg: RunnableConfig) -> str:
    ccr = m.runnable
    run_cfg = leaf_config(cfg, m.wrappers, ccr)
    planned = PlannedRetrieverRun(ccr, run_cfg)

    async def start(ctx: Any, query: Any) -> dict[str, Any]:
        return {"query": query, "_run": await planned.start(query)}

    started = lw.build(Transform(start, m.label(), takes_ctx=True), {"query": src}, "compress_start")

    async def query_of(ctx: Any, state: dict) -> Any:
        return state["query"]

    query = lw.build(Transform(query_of, m.label(), takes_ctx=True), {"state": started}, "compress_query")
    docs = lw.lower(m.retriever, query, planned.child(run_cfg))
    # stock passes the compressor one child of the retriever's run (run_manager.get_child())
    stage_cfg = planned.child(run_cfg)
    for i, stage in enumerate(m.stages):
        where = _Where(started, first=i == 0, last=i == len(m.stages) - 1, suffix="" if i == 0 else str(i))
        lower_stage = _lower_llm_stage if stage.chain is not None else _lower_local_stage
        docs = lower_stage(lw, m, stage, where, docs, stage_cfg)
    return docs


@dataclass
class _Where:
    """A stage's place: the start node (query, retriever run), first / last stage, its node names' suffix."""

    started: str
    first: bool
    last: bool
    suffix: str

    async def finish(self, state: dict, work: Awaitable[list[Document]]) -> list[Document]:
        """The last stage's documents end the retriever's run (as stock's ``list(compressed_docs)``)."""
        if not self.last:
            return await work
        return await reported(state["_run"], _as_list(work))


async def _as_list(work: Awaitable[Any]) -> list[Document]:
    return list(await work)


def _lower_local_stage(lw: Lowerer, m: Compression, stage: Stage, where: _Where, docs_node: str,
                       cfg: RunnableConfig) -> str:
    obj, sync = stage.obj, lw.run.sync

    async def call(docs: list, query: Any) -> Any:
        if where.first and not docs:  # stock: no compressor call on no documents
            return []
        if isinstance(obj, BaseDocumentCompressor):
            if sync:
                return await asyncio.to_thread(obj.compress_documents, docs, query, callbacks=cfg["callbacks"])
            return await obj.acompress_documents(docs, query, callbacks=cfg["callbacks"])
        return await (asyncio.to_thread(obj.transform_documents, docs) if sync else obj.atransform_documents(docs))

    async def run(ctx: Any, state: dict, docs: list) -> list[Document]:
        return await where.finish(state, call(docs, state["query"]))

    return lw.build(Transform(run, m.label(), takes_ctx=True, resources=None, reason=f"{type(obj).__name__} "
                              "runs as the user's object"),
                    {"state": where.started, "docs": docs_node}, f"compress_local{where.suffix}")


def _lower_llm_stage(lw: Lowerer, m: Compression, stage: Stage, where: _Where, docs_node: str,
                     cfg: RunnableConfig) -> str:
    compressor = stage.obj

    async def chain_inputs(ctx: Any, state: dict, docs: list) -> list[dict[str, Any]]:
        return [compressor.get_input(state["query"], doc) for doc in docs]

    inputs_node = lw.build(Transform(chain_inputs, m.label(), takes_ctx=True),
                           {"state": where.started, "docs": docs_node}, f"compress_inputs{where.suffix}")
    box: list[str] = []

    async def fan_out(ctx: Any, state: dict, docs: list, items: list) -> Any:
        if not docs:  # stock: no chain call on no documents
            return await where.finish(state, _empty())
        return _per_document(lw, m, stage, where, box[0], docs_node=docs_node, items_node=inputs_node, n=len(items),
                             cfg=cfg)

    box.append(lw.build(Route(fan_out, m.label(), takes_ctx=True, cost=COST["branch"]),
                        {"state": where.started, "docs": docs_node, "items": inputs_node}, f"compress{where.suffix}"))
    return box[0]


async def _empty() -> list[Document]:
    return []


def _per_document(lw: Lowerer, m: Compression, stage: Stage, where: _Where, parent: str, docs_node: str,
                  items_node: str, n: int, cfg: RunnableConfig) -> Expand:
    """The chain lowered once per document, then the compressor's keep rule (the last stage ends the run)."""
    sub = lw.sub(parent)
    sub.invoked = True
    outs = {}
    for i in range(n):
        async def pick(ctx: Any, items: list, i: int = i) -> Any:
            return items[i]

        item = sub.build(Transform(pick, m.label(), takes_ctx=True), {"items": items_node}, f"doc{i}{where.suffix}")
        outs[f"o{i}"] = sub.lower(stage.chain, item, cfg)

    async def keep(ctx: Any, state: dict, docs: list, **outputs: Any) -> list[Document]:
        async def kept() -> list[Document]:
            values = [outputs[f"o{i}"] for i in range(n)]
            if stage.keep_if_true:
                return [doc for doc, out in zip(docs, values, strict=True) if isinstance(out, bool) and out]
            return [Document(page_content=out, metadata=doc.metadata)
                    for doc, out in zip(docs, values, strict=True) if len(out) != 0]

        return await where.finish(state, kept())

    out = sub.build(Aggregate(keep, m.label(), takes_ctx=True, cost=COST["parser"]),
                    {"state": where.started, "docs": docs_node, **outs}, f"compress_keep{where.suffix}")
    return Expand(nodes=list(sub.graph.nodes.values()), output=out)


LOWERINGS.add(Compression, lower_compression)
