"""Vector store engine over Chroma: embedded ``PersistentClient`` or a Chroma server (``HttpClient``).

Collections are always opened with ``embedding_function=None``: Chroma's default
embedding function downloads a model, and Ayo always passes explicit vectors.
Chroma's client is thread-safe, so the async forms run the sync calls in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

Metadata = Mapping[str, Any]


class VectorStoreError(RuntimeError):
    """A vector store operation failed (bad collection name, unreachable server, bad arguments)."""


@dataclass
class VectorHit:
    """One search result. ``distance`` is Chroma's distance in the collection's space (lower is closer)."""

    id: str
    distance: float
    document: str | None = None
    metadata: dict[str, Any] | None = field(default=None)


def default_store_path() -> Path:
    return Path(os.environ.get("AYO_HOME", Path.home() / ".cache" / "ayo")).expanduser() / "chroma"


class VectorStoreEngine:
    """Chroma collections by name; ``add`` and batched top-k ``query``, sync and async."""

    def __init__(self, path: str | os.PathLike[str] | None = None, url: str | None = None,
                 client: Any = None) -> None:
        if path is not None and url is not None:
            raise ValueError("VectorStoreEngine takes path= (embedded Chroma) or url= (Chroma server), not both")
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        self.path = None if url is not None or client is not None else Path(path or default_store_path())
        self.url = url
        if client is not None:  # an existing chromadb client (e.g. the one a stock app made)
            self.client = client
        elif url is not None:
            parsed = urlparse(url if "://" in url else f"http://{url}")
            self.client = chromadb.HttpClient(host=parsed.hostname or "localhost", port=parsed.port or 8000,
                                              ssl=parsed.scheme == "https", settings=settings)
        else:
            assert self.path is not None
            self.path.mkdir(parents=True, exist_ok=True)
            self.client = chromadb.PersistentClient(path=str(self.path), settings=settings)
        self._collections: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = f"url={self.url!r}" if self.url else f"path={str(self.path)!r}"
        return f"VectorStoreEngine({where})"

    def collection(self, name: str, metadata: Metadata | None = None) -> Any:
        """Get or create collection ``name`` (``embedding_function=None``). ``metadata`` applies on
        creation, e.g. ``{"hnsw:space": "cosine"}``; Chroma's default space is ``l2``."""
        with self._lock:
            col = self._collections.get(name)
            if col is not None:
                return col
            try:
                col = self.client.get_or_create_collection(name, embedding_function=None,
                                                           metadata=dict(metadata) if metadata else None)
            except Exception as exc:
                raise self._name_error(name, exc) from exc
            self._collections[name] = col
            return col

    @staticmethod
    def _name_error(name: str, exc: Exception) -> Exception:
        text = str(exc)
        if "name" in text.lower() and ("expected" in text.lower() or "invalid" in text.lower()):
            # Chroma's message states the rule ("3-512 characters from [a-zA-Z0-9._-], starting and ending ...").
            return VectorStoreError(f"Chroma rejects collection name {name!r}: {text} "
                                    "Fix: choose a name that follows this rule.")
        return VectorStoreError(f"Chroma could not open collection {name!r}: {type(exc).__name__}: {exc}")

    def add(self, collection: str, ids: Sequence[str], embeddings: Sequence[Sequence[float]],
            documents: Sequence[str] | None = None, metadatas: Sequence[Metadata | None] | None = None,
            upsert: bool = False) -> None:
        """Add (or ``upsert``) vectors with their documents and metadata, in Chroma-sized batches."""
        n = len(ids)
        if len(embeddings) != n or (documents is not None and len(documents) != n) or (
                metadatas is not None and len(metadatas) != n):
            raise ValueError(f"VectorStoreEngine.add({collection!r}): ids, embeddings, documents and metadatas "
                             f"must have the same length (got {n}, {len(embeddings)}, "
                             f"{None if documents is None else len(documents)}, "
                             f"{None if metadatas is None else len(metadatas)})")
        if n == 0:
            return
        col = self.collection(collection)
        step = max(1, int(self.client.get_max_batch_size()))
        write = col.upsert if upsert else col.add
        for a in range(0, n, step):
            b = min(n, a + step)
            write(ids=list(ids[a:b]), embeddings=[list(map(float, v)) for v in embeddings[a:b]],
                  documents=None if documents is None else list(documents[a:b]),
                  metadatas=None if metadatas is None else [dict(m) if m else None for m in metadatas[a:b]])

    def query(self, collection: str, query_embeddings: Sequence[Sequence[float]], k: int = 4,
              where: Metadata | None = None, where_document: Metadata | None = None) -> list[list[VectorHit]]:
        """Top-``k`` hits for each query vector (one Chroma call for the whole batch)."""
        if not query_embeddings:
            return []
        col = self.collection(collection)
        res = col.query(query_embeddings=[list(map(float, q)) for q in query_embeddings], n_results=k,
                        where=dict(where) if where else None,
                        where_document=dict(where_document) if where_document else None,
                        include=["documents", "metadatas", "distances"])
        all_docs = res.get("documents") or [None] * len(res["ids"])
        all_metas = res.get("metadatas") or [None] * len(res["ids"])
        out: list[list[VectorHit]] = []
        for i, ids in enumerate(res["ids"]):
            docs = all_docs[i] or [None] * len(ids)
            metas = all_metas[i] or [None] * len(ids)
            dists = res["distances"][i]
            out.append([VectorHit(id_, float(d), doc, dict(m) if m else None)
                        for id_, d, doc, m in zip(ids, dists, docs, metas, strict=True)])
        return out

    def count(self, collection: str) -> int:
        return int(self.collection(collection).count())

    def delete_collection(self, name: str) -> None:
        with self._lock:
            self._collections.pop(name, None)
        self.client.delete_collection(name)

    def close(self) -> None:
        """Release the client (flushes the embedded store); a new engine on the same path reopens it."""
        with self._lock:
            self._collections.clear()
        closer = getattr(self.client, "close", None)
        if callable(closer):
            closer()

    async def aadd(self, collection: str, ids: Sequence[str], embeddings: Sequence[Sequence[float]],
                   documents: Sequence[str] | None = None, metadatas: Sequence[Metadata | None] | None = None,
                   upsert: bool = False) -> None:
        await asyncio.to_thread(self.add, collection, ids, embeddings, documents, metadatas, upsert)

    async def aquery(self, collection: str, query_embeddings: Sequence[Sequence[float]], k: int = 4,
                     where: Metadata | None = None,
                     where_document: Metadata | None = None) -> list[list[VectorHit]]:
        return await asyncio.to_thread(self.query, collection, query_embeddings, k, where, where_document)
