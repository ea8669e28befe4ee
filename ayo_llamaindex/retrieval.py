"""Retrievers lowered to primitives: query embedding, vector search, query expansion, fusion.

``VectorIndexRetriever`` becomes *embed the query* (Ayo's embedding engine, batched with
whatever else is embedding) then *search* (the index's own vector store and docstore,
through the retriever's own ``_get_nodes_with_embeddings`` so nothing the user indexed
is bypassed). ``QueryFusionRetriever`` becomes a streamed *decode* of its query-gen
prompt whose lines flow to retrieval as soon as each is complete (decode pipelining),
then the retriever's own fusion method. The decode stops once the ``num_queries - 1``
lines the retriever keeps are complete: stock decodes on to ``max_tokens`` (a small
model rambles) and then discards the rest (in the graph: the core's ``early_stop`` pass;
inside a nested fusion retriever: :class:`QueryLines`). Anything else is retrieved by
the user's object (opaque), in a worker thread.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.retrievers import (
    AutoMergingRetriever,
    QueryFusionRetriever,
    RecursiveRetriever,
    RouterRetriever,
)
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import NodeWithScore, QueryBundle

from ayo_core.engines.llm_client import StopStream
from ayo_core.introspect import overrides_reason
from ayo_core.runtime.caller import call_stock, in_async_call
from ayo_core.runtime.owned import start_owned
from ayo_core.runtime.pipelined import PipelinedParts, streamed_lines
from ayo_llamaindex import events
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

RetrieveFn = Callable[[QueryBundle], Awaitable[list[NodeWithScore]]]
EmbedQueriesFn = Callable[[list[str]], Awaitable[list[float]]]

_VECTOR_MIRRORED = shim.VECTOR_RETRIEVER_MIRRORED
_FUSION_MIRRORED = shim.FUSION_RETRIEVER_MIRRORED


def retriever_kind(retriever: Any) -> tuple[str, str]:
    """``("vector" | "fusion" | "auto_merging" | "router" | "recursive" | "opaque", reason-if-opaque)``."""
    if isinstance(retriever, AutoMergingRetriever):
        if over := overrides_reason(retriever, AutoMergingRetriever, shim.AUTO_MERGING_MIRRORED):
            return "opaque", over
        inner, why = retriever_kind(shim.auto_merging_vector_retriever(retriever))
        if inner != "vector":
            return "opaque", f"AutoMergingRetriever over a retriever Ayo does not lower ({why})"
        return "auto_merging", ""
    if isinstance(retriever, RecursiveRetriever):
        if over := overrides_reason(retriever, RecursiveRetriever, eng.RECURSIVE_MIRRORED):
            return "opaque", over
        if shim.retriever_verbose(retriever):
            return "opaque", ("RecursiveRetriever(verbose=True) prints each step as it goes: it runs as stock, "
                              "its links one after another, so the prints keep their order")
        return "recursive", ""
    if isinstance(retriever, RouterRetriever):
        if over := overrides_reason(retriever, RouterRetriever, eng.ROUTER_RETRIEVER_MIRRORED):
            return "opaque", over
        return "router", ""
    if isinstance(retriever, QueryFusionRetriever):
        if over := overrides_reason(retriever, QueryFusionRetriever, _FUSION_MIRRORED):
            return "opaque", over
        return "fusion", ""
    if isinstance(retriever, VectorIndexRetriever):
        if over := overrides_reason(retriever, VectorIndexRetriever, _VECTOR_MIRRORED):
            return "opaque", over
        return "vector", ""
    if isinstance(retriever, BaseRetriever):
        return "opaque", f"{type(retriever).__name__} is a retriever Ayo does not lower"
    return "opaque", f"{type(retriever).__name__} is not a LlamaIndex retriever"


# -- VectorIndexRetriever ------------------------------------------------------------

def needs_query_embedding(retriever: VectorIndexRetriever, query_bundle: QueryBundle) -> bool:
    """Whether ``VectorIndexRetriever._retrieve`` would embed this query."""
    return (
        shim.needs_embedding(retriever)
        and query_bundle.embedding is None
        and len(query_bundle.embedding_strs) > 0
    )


def with_embedding(query_bundle: QueryBundle, embedding: list[float] | None) -> QueryBundle:
    """The bundle the search reads: stock ``retrieve()`` leaves the query embedding on the caller's
    bundle, ``aretrieve()`` (inside ``aquery``) on a copy."""
    if embedding is None:
        return query_bundle
    bundle = copy.copy(query_bundle) if in_async_call() else query_bundle
    bundle.embedding = embedding
    return bundle


def search_sync(retriever: VectorIndexRetriever, query_bundle: QueryBundle) -> list[NodeWithScore]:
    """The search half of ``BaseRetriever.retrieve`` (embedding already on the bundle)."""
    nodes = shim.search_with_embedding(retriever, query_bundle)
    return shim.handle_recursive_retrieval(retriever, query_bundle, nodes)


async def vector_retrieve(
    retriever: VectorIndexRetriever, query_bundle: QueryBundle, embed_queries: EmbedQueriesFn
) -> list[NodeWithScore]:
    """``retriever.retrieve(query_bundle)`` with the query embedded by Ayo's engine (and its events)."""

    async def run() -> list[NodeWithScore]:
        embedding = None
        if needs_query_embedding(retriever, query_bundle):
            embedding = await embed_queries(list(query_bundle.embedding_strs))
        return await asyncio.to_thread(search_sync, retriever, with_embedding(query_bundle, embedding))

    return await events.retrieve(retriever, query_bundle, run)


EMBEDDING_POLL_S = 0.005  # how often a sync call looks for the first call's query embedding on the bundle


async def one_bundle_at_once(calls: list[Callable[[QueryBundle], Awaitable[Any]]], query: QueryBundle) -> list[Any]:
    """Each call's result, in their order, the calls running at once on ``query``.

    Stock's async paths gather such calls (a multi-selection Router's engines or retrievers), each
    vector retrieval embedding on its own. Its sync paths run them one after another on the one
    ``QueryBundle``: the first retrieval leaves its query embedding on it and the rest reuse it (no
    embedding, no embedding span of their own). So on a sync path the rest start once that embedding
    is on the bundle (or once the first call is done, if it never embeds), and a failure is raised in
    stock's order (the first call's before the rest start).
    """
    if in_async_call() or len(calls) < 2:
        return list(await asyncio.gather(*(call(query) for call in calls)))
    first = start_owned(calls[0](query), f"retrieve: {query.query_str}")
    rest: list[asyncio.Future] = []
    try:
        while query.embedding is None and not first.done():
            await asyncio.sleep(EMBEDDING_POLL_S)  # the bundle has no hook to wait on; the first embeds in ms
        if first.done():
            first.result()  # its error now, as stock's loop raises before the next call
        rest = [start_owned(call(query), f"retrieve: {query.query_str}") for call in calls[1:]]
        return [await task for task in (first, *rest)]
    finally:
        for task in (first, *rest):
            task.cancel()


async def opaque_retrieve(retriever: Any, query_bundle: QueryBundle) -> list[NodeWithScore]:
    """The user's retriever, called as stock ``RetrieverQueryEngine`` calls it (``aretrieve`` in ``aquery``)."""
    return await call_stock(retriever.retrieve, retriever.aretrieve, query_bundle)


# -- QueryFusionRetriever ------------------------------------------------------------

def query_gen_prompt(retriever: QueryFusionRetriever, query_str: str) -> str:
    """The prompt ``QueryFusionRetriever._get_queries`` completes."""
    return retriever.query_gen_prompt.format(num_queries=retriever.num_queries - 1, query=query_str)


def parse_queries(retriever: QueryFusionRetriever, text: str) -> list[str]:
    """``_get_queries``'s parsing of the completion (stock code path, same order of operations)."""
    queries = text.strip("`").split("\n")
    queries = [q.strip() for q in queries if q.strip()]
    return queries[: retriever.num_queries - 1]


def finished_queries(retriever: QueryFusionRetriever, text_so_far: str) -> list[str]:
    """Queries already final while the completion is still streaming.

    A line is final once a newline follows it: ``strip("`")`` on the whole text can only
    remove backticks at the very start (applied here) and after the last newline.
    """
    return fusion_lines(retriever, text_so_far)[0]


def fusion_lines(retriever: QueryFusionRetriever, text_so_far: str) -> tuple[list[str], str]:
    """The queries final so far (stripped, blank lines dropped, at most ``num_queries - 1``, as
    ``_get_queries`` parses them) and the line still being decoded, as written."""
    finished, growing = streamed_lines(text_so_far, lstrip="`", strip_lines=True)
    return finished[: retriever.num_queries - 1], growing


def fuse(retriever: QueryFusionRetriever, results: dict[tuple[str, int], list[NodeWithScore]]) -> list[NodeWithScore]:
    """The retriever's own fusion for its mode, truncated to ``similarity_top_k``."""
    mode = retriever.mode
    if mode == FUSION_MODES.RECIPROCAL_RANK:
        fused = shim.reciprocal_rerank_fusion(retriever, results)
    elif mode == FUSION_MODES.RELATIVE_SCORE:
        fused = shim.relative_score_fusion(retriever, results)
    elif mode == FUSION_MODES.DIST_BASED_SCORE:
        fused = shim.relative_score_fusion(retriever, results, dist_based=True)
    elif mode == FUSION_MODES.SIMPLE:
        fused = shim.simple_fusion(retriever, results)
    else:
        raise ValueError(f"Invalid fusion mode: {mode}")
    return fused[: retriever.similarity_top_k]


def report_queries(retriever: QueryFusionRetriever, text: str) -> None:
    """``_get_queries``'s ``verbose=True`` output: every parsed line, before the cut to ``num_queries - 1``."""
    if shim.retriever_verbose(retriever):
        queries = [q.strip() for q in text.strip("`").split("\n") if q.strip()]
        queries_str = "\n".join(queries)
        print(f"Generated queries:\n{queries_str}")  # stock prints to stdout; so does the mirror


class QueryLines:
    """A query-gen completion as it streams: ``on_delta`` (forwarding each delta) raises
    :class:`StopStream` once the ``num_queries - 1`` lines the retriever keeps are complete.

    A ``verbose`` retriever prints every line the LLM wrote, so its decode runs to the end as in stock.
    """

    def __init__(self, retriever: QueryFusionRetriever, forward: Callable[[str], None] | None = None) -> None:
        self.retriever, self.forward = retriever, forward
        self.stop_early = not shim.retriever_verbose(retriever)
        self.text = ""
        self.complete = False

    def on_delta(self, delta: str) -> None:
        self.text += delta
        if self.forward is not None:
            self.forward(delta)
        if self.stop_early and len(finished_queries(self.retriever, self.text)) >= self.retriever.num_queries - 1:
            self.complete = True
            raise StopStream

    def queries(self, text: str) -> list[str]:
        """Stock's parse of the whole completion (equal to the finished lines after an early stop)."""
        if self.complete:
            return finished_queries(self.retriever, self.text)
        report_queries(self.retriever, text)
        return parse_queries(self.retriever, text)


async def fusion_retrieve(
    retriever: QueryFusionRetriever,
    query_bundle: QueryBundle,
    complete: Callable[..., Awaitable[str]],
    subs: list[RetrieveFn],
) -> list[NodeWithScore]:
    """``QueryFusionRetriever.retrieve`` with the original query retrieved during the
    query-gen decode and each generated query retrieved as soon as its line is done."""
    def start(query_str: str) -> list[asyncio.Future]:
        bundle = QueryBundle(query_str)
        return [start_owned(sub(bundle), f"search: {query_str}") for sub in subs]

    original = [start_owned(sub(query_bundle), f"search: {query_bundle.query_str}") for sub in subs]
    per_query = [original]
    queries = [query_bundle]
    try:
        if retriever.num_queries > 1:
            # the stream (and its early stop) is QueryLines'; each delta also starts the finished lines' retrievals
            pipe = PipelinedParts(lambda text: finished_queries(retriever, text), start)
            lines = QueryLines(retriever, forward=lambda _delta: pipe.on_text(lines.text))
            text = await complete(query_gen_prompt(retriever, query_bundle.query_str), stream_cb=lines.on_delta)
            # stopped early, the text is a prefix; the finished lines are what stock parses from the whole
            final = lines.queries(text)
            per_query += pipe.reconcile(final)
            queries += [QueryBundle(q) for q in final]
        results: dict[tuple[str, int], list[NodeWithScore]] = {}
        for bundle, tasks in zip(queries, per_query, strict=True):
            for i, task in enumerate(tasks):
                # same insertion semantics as stock: a repeated query string keeps its slot
                results[(bundle.query_str, i)] = await task
    except BaseException:
        for tasks in per_query:
            for t in tasks:
                t.cancel()
        raise
    nodes = fuse(retriever, results)
    return shim.handle_recursive_retrieval(retriever, query_bundle, nodes)
