"""Deferred indexing for document QA: a ``VectorStoreIndex`` is built now, its vectors land later.

Inside an optimized doc-QA call, building a ``VectorStoreIndex`` (``from_documents``,
the constructor with nodes) and ``insert`` / ``insert_nodes`` run LlamaIndex's own
steps (document hashes, ``run_transformations``, the constructor), and every docstore /
index-struct write of ``_add_nodes_to_index`` happens at once, so the index the user
holds is complete in structure (``as_retriever`` sees every node id). Only the
expensive part — embedding the chunks and adding the vectors to the vector store —
becomes a :class:`PendingIngest`, which the query graph runs as EMBED + INGEST nodes
concurrently with query-side LLM work (query expansion, prefill). Retrieval waits
for it (an ``after`` edge on a side-effecting node, which dependency pruning keeps).

Nothing the user indexed is lost: the vectors go to the index's own vector store
object with the same ids stock would write. Any other access to that store (query,
add, delete, persist, get) waits for the pending vectors first (a barrier), and the
optimized call does not return before every ingest it started has finished.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.schema import ImageNode, IndexNode, MetadataMode
from llama_index.core.utils import iter_batch
from llama_index.core.vector_stores.simple import SimpleVectorStore

from ayo_core.caller_code import running_ayo_code
from ayo_core.introspect import once, overrides_reason
from ayo_core.runtime.pending import PendingWrites
from ayo_llamaindex.embedding import EmbedBinding
from ayo_llamaindex.runtime import LOOP, direct_embed_send
from ayo_shims import llamaindex as shim

_IN_INGEST: contextvars.ContextVar[bool] = contextvars.ContextVar("ayo_in_ingest", default=False)
_PENDING = PendingWrites()  # vector store -> its PendingIngests, in the order they were deferred
_INDEX_MIRRORED = shim.INDEX_MIRRORED
_BARRIER_METHODS = ("add", "delete", "delete_nodes", "clear", "query", "get", "get_nodes", "persist")


def known_store_types() -> tuple[type, ...]:
    types: list[type] = [SimpleVectorStore]
    try:
        from llama_index.vector_stores.chroma import ChromaVectorStore

        types.append(ChromaVectorStore)
    except ImportError:
        pass
    return tuple(types)


def why_not_deferred(index: Any, insert_kwargs: dict[str, Any]) -> str | None:
    """None when this index's vector writes can be deferred, else the reason (for explain())."""
    if not isinstance(index, VectorStoreIndex):
        return f"{type(index).__name__} is not a VectorStoreIndex"
    if over := overrides_reason(index, VectorStoreIndex, _INDEX_MIRRORED):
        return over
    store = index.vector_store
    if type(store) not in known_store_types():
        return f"vector store {type(store).__name__} is not one Ayo defers writes to"
    if insert_kwargs:
        return f"vector-store add() keyword arguments Ayo does not mirror: {sorted(insert_kwargs)}"
    return None


class PendingIngest:
    """The embed + vector-store-add half of one ``from_documents`` call."""

    def __init__(self, index: VectorStoreIndex, nodes: list[Any], embed: EmbedBinding) -> None:
        self.index, self.nodes, self.embed = index, nodes, embed
        self.after: PendingIngest | None = None  # an earlier pending write into the same store: lands first, as in stock
        self.store = index.vector_store
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._vectors: asyncio.Future | None = None
        self._added: asyncio.Future | None = None
        # the span and callback event stock's embedding would open under: those open where the index was built
        self._span_parent = shim.active_span_id().get()
        self._span_tags = shim.active_instrument_tags().get()
        self._callback_stack = shim.callback_stack().get()

    def __repr__(self) -> str:
        return f"PendingIngest({len(self.nodes)} nodes -> {type(self.store).__name__})"

    # -- the two stages, each run once (graph node, barrier, or call exit: whoever comes first) --
    async def vectors(self, send: Any) -> list[list[float]]:
        if self._vectors is None:
            # not a query's task (start_owned): the vectors must outlive a failed or cancelled query, as
            # stock's write would (nothing a user indexed is lost); the optimized call's exit awaits them
            self._vectors = asyncio.ensure_future(self._embed_nodes(send))
        return await asyncio.shield(self._vectors)

    async def _embed_nodes(self, send: Any) -> list[list[float]]:
        """Stock's ``embed_nodes`` for each insert batch (one ``get_text_embedding_batch`` call and span
        each), all batches at once, under the span and callback event open when the index was written."""
        shim.active_span_id().set(self._span_parent)  # this task's own context
        shim.active_instrument_tags().set(self._span_tags)
        shim.callback_stack().set(self._callback_stack)
        show_progress = shim.index_show_progress(self.index)
        batches = [[n.get_content(metadata_mode=MetadataMode.EMBED) for n in batch if n.embedding is None]
                   for batch in iter_batch(self.nodes, shim.index_insert_batch_size(self.index))]
        parts = await asyncio.gather(*(self.embed.text_embeddings(send, texts, show_progress) for texts in batches))
        return [v for part in parts for v in part]

    async def add(self, vectors: list[list[float]], send: Any = None) -> int:
        if self._added is None:
            self._added = asyncio.ensure_future(self._add_in_order(vectors, send))
        try:
            return await asyncio.shield(self._added)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            if self._added.done():
                self.done.set()

    async def _add_in_order(self, vectors: list[list[float]], send: Any) -> int:
        if self.after is not None and not self.after.done.is_set():
            await self.after.run(send)
        return await asyncio.to_thread(self._add_sync, vectors)

    async def run(self, send: Any) -> int:
        return await self.add(await self.vectors(send), send)

    def _add_sync(self, vectors: list[list[float]]) -> int:
        """``_add_nodes_to_index``'s vector-store writes, with the embeddings computed by Ayo."""
        token = _IN_INGEST.set(True)
        try:
            it = iter(vectors)
            with_vectors = []
            for node in self.nodes:
                copy = node.model_copy()
                if copy.embedding is None:
                    copy.embedding = next(it)
                with_vectors.append(copy)
            for batch in iter_batch(with_vectors, shim.index_insert_batch_size(self.index)):
                ids = self.store.add(batch)
                expected = [n.node_id for n in batch]
                if list(ids) != expected:
                    raise RuntimeError(f"{type(self.store).__name__}.add returned ids {ids[:3]}... instead of the "
                                       "node ids Ayo registered in the index struct; run this app unoptimized")
            return len(with_vectors)
        finally:
            _IN_INGEST.reset(token)
            _PENDING.remove(self.store, self)

    def wait_sync(self) -> None:
        """Block until the vectors are in the store (starting the work if nobody has)."""
        if self.done.is_set():
            if self.error is not None:
                raise self.error
            return

        LOOP.run_sync(self.run(direct_embed_send(self.embed)))


def barrier(store: Any) -> None:
    """Wait for every pending ingest into ``store`` (not from inside an ingest itself)."""
    if _IN_INGEST.get():
        return
    for p in _PENDING.of(store):
        p.wait_sync()


def defer_vectors(index: VectorStoreIndex, index_struct: Any, nodes: list[Any]) -> PendingIngest:
    """``_add_nodes_to_index`` for ``nodes`` into ``index_struct``: the docstore and index-struct
    writes now, the embedding + vector-store add as a registered PendingIngest."""
    store = index.vector_store
    for batch in iter_batch(nodes, shim.index_insert_batch_size(index)):
        for node in batch:
            if store.stores_text and not shim.index_stores_nodes_override(index) and not isinstance(node, (ImageNode, IndexNode)):
                continue
            # the id the store's add() returns is the node id (checked when the vectors land)
            node_without_embedding = node.model_copy()
            node_without_embedding.embedding = None
            index_struct.add_node(node_without_embedding, text_id=node.node_id)
            index.docstore.add_documents([node_without_embedding], allow_update=True)
    pending = PendingIngest(index, list(nodes), EmbedBinding(shim.index_embed_model(index)))
    pending.after = _PENDING.add(store, pending)  # an earlier pending write into the store lands first
    return pending


@once
def install_barriers() -> None:
    """Wrap the known stores' methods so outside access waits for pending vectors (once per process)."""
    for store_type in known_store_types():
        shim.wrap_store_methods(store_type, _BARRIER_METHODS, _barrier_wrapper)


def _barrier_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    if instance is not None and instance in _PENDING:
        with running_ayo_code():  # waiting for Ayo's ingest is Ayo's time, not the caller's
            barrier(instance)
    return wrapped(*args, **kwargs)
