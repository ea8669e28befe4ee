"""``ContextualCompressionRetriever`` with ``LLMChainExtractor`` / ``LLMChainFilter``: one chain call per
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

Runs: the retriever's run opens before the base retriever's (its child), and each chain run
is a child of the retriever's run, as in stock. A compressor with a legacy ``LLMChain``, a
subclass of any of these classes, or another compressor stays opaque.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig

from ayo_core.runtime.context import Expand
from ayo_core.templates import Aggregate, Route, Transform
from ayo_langchain import capture as cap
from ayo_langchain.callbacks import PlannedRetrieverRun, leaf_config, reported
from ayo_langchain.lower import COST, LOWERINGS, Lowerer

try:
    from langchain_classic.chains.llm import LLMChain
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor, LLMChainFilter
except ImportError:  # pragma: no cover - langchain-classic is a dependency
    ContextualCompressionRetriever = None  # type: ignore[assignment,misc]


@dataclass
class Compression(cap.Module):
    """A ``ContextualCompressionRetriever`` whose compressor calls an LCEL chain per document."""

    retriever: cap.Module | None = None  # the base retriever
    chain: cap.Module | None = None  # the compressor's llm_chain
    keep_if_true: bool = False  # LLMChainFilter (keep on True) vs LLMChainExtractor (keep the non-empty output)
    opens_own_run: ClassVar[bool] = True  # as the root, its lowering reports its run (no chain run around it)

    def children(self) -> list[cap.Module]:
        return [m for m in (self.retriever, self.chain) if m is not None]

    def note(self) -> str:
        what = type(self.runnable.base_compressor).__name__
        return (f"{self.label()}: {what}'s chain runs once per retrieved document, all at once "
                "(stock's LLMChainExtractor: one document after another)")


cap.TEMPLATES[Compression] = "DocumentCompression"


def compression_opaque_reason(r: Any) -> str:
    """'' when Ayo lowers the compression retriever ``r``, else why it runs as-is."""
    if type(r) is not ContextualCompressionRetriever:
        return f"{type(r).__name__} subclasses ContextualCompressionRetriever: called as-is"
    comp = r.base_compressor
    if type(comp) not in (LLMChainExtractor, LLMChainFilter):
        return f"compressor {type(comp).__name__} is not LLMChainExtractor/LLMChainFilter: called as-is"
    if isinstance(comp.llm_chain, LLMChain):
        return f"{type(comp).__name__} with a legacy LLMChain: called as-is"
    return ""


def recognize_compression(capturer: cap.Capturer, r: Any, wrappers: tuple[Any, ...]) -> cap.Module:
    if why := compression_opaque_reason(r):
        return cap.Opaque(r, wrappers, why)
    comp = r.base_compressor
    return Compression(r, wrappers, retriever=capturer.capture(r.base_retriever),
                       chain=capturer.capture(comp.llm_chain), keep_if_true=type(comp) is LLMChainFilter)


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
    compressor = ccr.base_compressor
    run_cfg = leaf_config(cfg, m.wrappers, ccr)
    planned = PlannedRetrieverRun(ccr, run_cfg)

    async def start(ctx: Any, query: Any) -> dict[str, Any]:
        return {"query": query, "_run": await planned.start(query)}

    started = lw.build(Transform(start, m.label(), takes_ctx=True), {"query": src}, "compress_start")

    async def query_of(ctx: Any, state: dict) -> Any:
        return state["query"]

    query = lw.build(Transform(query_of, m.label(), takes_ctx=True), {"state": started}, "compress_query")
    docs_node = lw.lower(m.retriever, query, planned.child(run_cfg))

    async def chain_inputs(ctx: Any, state: dict, docs: list) -> list[dict[str, Any]]:
        return [compressor.get_input(state["query"], doc) for doc in docs]

    inputs_node = lw.build(Transform(chain_inputs, m.label(), takes_ctx=True),
                           {"state": started, "docs": docs_node}, "compress_inputs")
    chain_cfg = planned.child(run_cfg)
    box: list[str] = []

    async def fan_out(ctx: Any, state: dict, docs: list, items: list) -> Any:
        if not docs:  # stock: no compressor call on no documents
            return await reported(state["_run"], _empty())
        return _per_document(lw, m, box[0], started, docs_node=docs_node, items_node=inputs_node, n=len(items),
                             cfg=chain_cfg)

    box.append(lw.build(Route(fan_out, m.label(), takes_ctx=True, cost=COST["branch"]),
                        {"state": started, "docs": docs_node, "items": inputs_node}, "compress"))
    return box[0]


async def _empty() -> list[Document]:
    return []


def _per_document(lw: Lowerer, m: Compression, parent: str, started: str, docs_node: str, items_node: str, n: int,
                  cfg: RunnableConfig) -> Expand:
    """The chain lowered once per document, then the compressor's keep rule (the retriever's run ends there)."""
    sub = lw.sub(parent)
    sub.invoked = True
    outs = {}
    for i in range(n):
        async def pick(ctx: Any, items: list, i: int = i) -> Any:
            return items[i]

        item = sub.build(Transform(pick, m.label(), takes_ctx=True), {"items": items_node}, f"doc{i}")
        outs[f"o{i}"] = sub.lower(m.chain, item, cfg)

    async def keep(ctx: Any, state: dict, docs: list, **outputs: Any) -> list[Document]:
        async def kept() -> list[Document]:
            values = [outputs[f"o{i}"] for i in range(n)]
            if m.keep_if_true:
                return [doc for doc, out in zip(docs, values, strict=True) if isinstance(out, bool) and out]
            return [Document(page_content=out, metadata=doc.metadata)
                    for doc, out in zip(docs, values, strict=True) if len(out) != 0]

        return await reported(state["_run"], kept())

    out = sub.build(Aggregate(keep, m.label(), takes_ctx=True, cost=COST["parser"]),
                    {"state": started, "docs": docs_node, **outs}, "compress_keep")
    return Expand(nodes=list(sub.graph.nodes.values()), output=out)


LOWERINGS.add(Compression, lower_compression)
