"""Indexing (embed + ingest) and Retrieval (embed + search) templates."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ayo_core.graph import Graph, Node, Op, Splitter
from ayo_core.templates.base import Template, add_entry, hit_text


def to_records(chunks: list[Any]) -> list[dict[str, Any]]:
    """Normalise chunks (str, or dicts with text/document, id, metadata) to ``{id, text, metadata}``.

    Missing ids are derived from the text and position, so the same chunks get the same ids.
    """
    out = []
    for i, chunk in enumerate(chunks):
        if isinstance(chunk, Mapping):
            text = hit_text(chunk)
            cid = chunk.get("id") or f"{hashlib.sha1(text.encode()).hexdigest()[:16]}-{i}"
            out.append({"id": str(cid), "text": text, "metadata": dict(chunk.get("metadata") or {})})
        else:
            text = hit_text(chunk)
            out.append({"id": f"{hashlib.sha1(text.encode()).hexdigest()[:16]}-{i}", "text": text, "metadata": {}})
    return out


class _Records:
    def __call__(self, ctx: Any, chunks: list[Any]) -> list[dict[str, Any]]:
        return to_records(chunks)


class _EmbedRecords:
    async def __call__(self, ctx: Any, records: list[dict[str, Any]]) -> list[list[float]]:
        return list(await ctx.embed.aembed([r["text"] for r in records]))


class _Ingest:
    def __init__(self, collection: str):
        self.collection = collection

    async def __call__(self, ctx: Any, records: list[dict[str, Any]], vectors: list[list[float]]) -> list[str]:
        ids = [r["id"] for r in records]
        await ctx.vector.add(self.collection, ids, vectors, [r["text"] for r in records],
                             [r["metadata"] or None for r in records])
        return ids


class Indexing(Template):
    """Index chunks: ``records`` (local) -> ``embed`` (batchable, splittable) -> ``ingest``
    (side effect on ``vector:<collection>``, splittable along the same axis, so stage
    decomposition pipelines embed micro-batch i into ingest micro-batch i).

    Inputs: ``chunks`` (list of str or dicts). Value: the list of ingested ids.
    ``n_chunks`` (if known at build time) sizes the micro-batches.
    """

    kind = "indexing"

    def __init__(self, collection: str, n_chunks: int | None = None, module: str | None = None):
        super().__init__(module)
        self.collection, self.n_chunks = collection, n_chunks

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "chunks")
        axis = f"{name}:chunks"
        size = {"size": self.n_chunks} if self.n_chunks is not None else {}
        records = add_entry(g, Node(f"{name}.records", Op.TRANSFORM, fn=_Records(), inputs={"chunks": inputs["chunks"]},
                                    module=self.module, meta={"resources": frozenset()}), after)
        g.add(Node(f"{name}.embed", Op.EMBED, fn=_EmbedRecords(), inputs={"records": records}, engine="embed",
                   module=self.module, batchable=True, splittable=True,
                   meta={"split": Splitter.contiguous(["records"], axis=axis), "resources": frozenset(), **size}))
        g.add(Node(f"{name}.ingest", Op.INGEST, fn=_Ingest(self.collection),
                   inputs={"records": records, "vectors": f"{name}.embed"}, engine="vector", module=self.module,
                   batchable=True, splittable=True, side_effect=True,
                   meta={"split": Splitter.contiguous(["records", "vectors"], axis=axis),
                         "resources": frozenset({f"vector:{self.collection}"}), **size}))
        return f"{name}.ingest"

    def shape(self) -> Hashable:
        return ("Indexing", self.collection, self.n_chunks)


class _EmbedQuery:
    async def __call__(self, ctx: Any, query: str) -> list[float]:
        return list((await ctx.embed.aembed([query]))[0])


class _Search:
    def __init__(self, collection: str, k: int):
        self.collection, self.k = collection, k

    async def __call__(self, ctx: Any, vector: list[float]) -> list[Any]:
        return list((await ctx.vector.query(self.collection, [vector], self.k))[0])


class Retrieval(Template):
    """Retrieve the top ``k`` hits for a query: ``embed`` -> ``search`` (reads ``vector:<collection>``).

    Inputs: ``query``. Value: the hits (as the vector engine returns them).
    ``per_part=True``: ``query`` is a list (or a streaming producer's parts, e.g.
    QueryExpansion) and the value is one hit list per query; with decode
    pipelining each query is embedded and searched as soon as it is decoded.

    Hooks (for a framework's own retriever, so its results stay identical): ``embed(ctx, query)``
    and ``search(ctx, vector)`` replace the engine calls of the two nodes; ``retrieve(ctx, query)``
    makes the module one SEARCH node that retrieves as a whole (a retriever whose embedding Ayo
    does not reproduce, or one query of many). ``names=(embed, search)`` names the two nodes
    (default ``<name>.embed``, ``<name>.search``); ``costs=(embed, search)`` are their estimates.
    """

    kind = "retrieval"

    def __init__(self, collection: str, k: int = 4, per_part: bool = False, module: str | None = None, *,
                 embed: Callable[..., Any] | None = None, search: Callable[..., Any] | None = None,
                 retrieve: Callable[..., Any] | None = None, names: tuple[str, str] | None = None,
                 costs: tuple[float, float] = (0.0, 0.0)):
        super().__init__(module)
        self.collection, self.k, self.per_part = collection, k, per_part
        self.embed, self.search, self.retrieve, self.names, self.costs = embed, search, retrieve, names, costs

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "query")
        embed_meta: dict[str, Any] = {"resources": frozenset()}
        search_meta: dict[str, Any] = {"resources": frozenset({f"vector:{self.collection}"})}
        if self.per_part:
            embed_meta["per_part"] = "query"
            search_meta["per_part"] = "vector"
        if self.retrieve is not None:
            search_meta["per_part"] = embed_meta.get("per_part")
            return add_entry(g, Node(name, Op.SEARCH, fn=self.retrieve, inputs={"query": inputs["query"]},
                                     engine="embed", module=self.module, cost=sum(self.costs),
                                     meta={k: v for k, v in search_meta.items() if v is not None}), after)
        embed_name, search_name = self.names or (f"{name}.embed", f"{name}.search")
        embed = add_entry(g, Node(embed_name, Op.EMBED, fn=self.embed or _EmbedQuery(),
                                  inputs={"query": inputs["query"]}, engine="embed", module=self.module,
                                  batchable=True, cost=self.costs[0], meta=embed_meta), after)
        g.add(Node(search_name, Op.SEARCH, fn=self.search or _Search(self.collection, self.k),
                   inputs={"vector": embed}, engine="vector", module=self.module, batchable=True,
                   cost=self.costs[1], meta=search_meta))
        return search_name

    def shape(self) -> Hashable:
        shape = ("Retrieval", self.collection, self.k, self.per_part)
        return (*shape, "retrieve") if self.retrieve is not None else shape
