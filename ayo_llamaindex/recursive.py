"""``RecursiveRetriever`` lowered: each level's linked retrievers and query engines at once.

Stock's ``_retrieve_rec`` retrieves from the root retriever, then walks the nodes it got: an ``IndexNode``
links to another retriever (retrieved, then walked the same way) or to a query engine (queried; its answer
becomes a node), one link after another, each a retrieval or a whole query (an LLM synthesis) awaited
alone, though none needs another's result. Here each level's links run at once (after the root: every link
needs its nodes). The root retriever is lowered (its query embedding on Ayo's engine); the linked
retrievers and query engines run as the user's objects in worker threads, called as stock calls them (the
sync ``retrieve`` / ``query``: this retriever has no async path of its own, ``aretrieve`` runs ``_retrieve``),
so their answers, events and spans are stock's. Stock's first retrieval leaves the query embedding on the
bundle and every later one reuses it; the links start after the root, so they do too.

The result is stock's: per level, the links' nodes in the order of the nodes that named them, deduplicated
by the retriever's own ``_deduplicate_nodes``. A failure is raised in stock's order (the first failing link
in node order); links started beside it run to their end in their threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, IndexNode, NodeWithScore, QueryBundle, TextNode

from ayo_core.runtime.caller import CALLER_LOOP
from ayo_core.runtime.owned import start_owned
from ayo_llamaindex import events
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

RetrieveFn = Callable[[QueryBundle], Awaitable[list[NodeWithScore]]]


async def recursive_retrieve(retriever: Any, query: QueryBundle, root: RetrieveFn) -> list[NodeWithScore]:
    """``retriever.retrieve(query)`` (or ``aretrieve``), ``root`` retrieving from its root retriever."""
    event = events.Retrieval(retriever, query)  # retrieve > _retrieve (aretrieve > _retrieve), on the caller's path
    token = CALLER_LOOP.set(None)  # this node's own context: below _retrieve everything is sync in stock
    try:
        with event.inside(), event.failing():
            nodes = await _retrieve_rec(retriever, eng.recursive_parts(retriever), query, None, None, root)
            nodes = shim.handle_recursive_retrieval(retriever, query, nodes)
    finally:
        CALLER_LOOP.reset(token)
    return event.end(nodes)


async def _retrieve_rec(retriever: Any, parts: dict[str, Any], query: QueryBundle, query_id: str | None,
                        similarity: float | None, root: RetrieveFn) -> list[NodeWithScore]:
    """Stock's ``_retrieve_rec`` (the nodes it adds; the additional nodes only ``retrieve_all`` reads)."""
    query_id = query_id or parts["root_id"]
    similarity = similarity or 1.0
    obj = eng.recursive_object(retriever, query_id)
    if isinstance(obj, BaseNode):
        return [NodeWithScore(node=obj, score=similarity)]
    if isinstance(obj, BaseRetriever):
        with events.retrieve_callback_event(retriever.callback_manager, query) as end:
            nodes = await (root(query) if query_id == parts["root_id"] else asyncio.to_thread(obj.retrieve, query))
            end(nodes)
        return await _query_retrieved_nodes(retriever, parts, query, nodes, root)
    if isinstance(obj, BaseQueryEngine):
        response = await asyncio.to_thread(obj.query, query)
        text = parts["response_tmpl"].format(query_str=query.query_str, response=str(response))
        return [NodeWithScore(node=TextNode(text=text), score=similarity)]
    raise ValueError("Must be a retriever or query engine.")


async def _query_retrieved_nodes(retriever: Any, parts: dict[str, Any], query: QueryBundle,
                                 nodes: list[NodeWithScore], root: RetrieveFn) -> list[NodeWithScore]:
    """Stock's ``_query_retrieved_nodes``, its links followed at once."""
    seen: set[str] = set()
    kept = []
    for node in nodes:  # index nodes that link to the same id: the first only
        if isinstance(node.node, IndexNode):
            if node.node.index_id in seen:
                continue
            seen.add(node.node.index_id)
        kept.append(node)

    async def follow(node: NodeWithScore) -> list[NodeWithScore]:
        if isinstance(node.node, IndexNode):
            return await _retrieve_rec(retriever, parts, query, node.node.index_id, node.score, root)
        assert isinstance(node.node, TextNode)  # noqa: S101 - stock's check, its AssertionError
        return [node]

    tasks = [start_owned(follow(node), f"follow: {node.node.node_id}") for node in kept]
    try:
        per_node = [await task for task in tasks]  # in node order: the first failing link's error, as stock's
    finally:
        for task in tasks:
            task.cancel()
    return eng.recursive_deduplicate(retriever, [n for found in per_node for n in found])
