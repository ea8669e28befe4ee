"""Indexing (embed + ingest) and Retrieval (embed + search) templates."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Mapping
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
    """

    kind = "retrieval"

    def __init__(self, collection: str, k: int = 4, per_part: bool = False, module: str | None = None):
        super().__init__(module)
        self.collection, self.k, self.per_part = collection, k, per_part

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "query")
        embed_meta: dict[str, Any] = {"resources": frozenset()}
        search_meta: dict[str, Any] = {"resources": frozenset({f"vector:{self.collection}"})}
        if self.per_part:
            embed_meta["per_part"] = "query"
            search_meta["per_part"] = "vector"
        embed = add_entry(g, Node(f"{name}.embed", Op.EMBED, fn=_EmbedQuery(), inputs={"query": inputs["query"]},
                                  engine="embed", module=self.module, batchable=True, meta=embed_meta), after)
        g.add(Node(f"{name}.search", Op.SEARCH, fn=_Search(self.collection, self.k), inputs={"vector": embed},
                   engine="vector", module=self.module, batchable=True, meta=search_meta))
        return f"{name}.search"

    def shape(self) -> Hashable:
        return ("Retrieval", self.collection, self.k, self.per_part)
