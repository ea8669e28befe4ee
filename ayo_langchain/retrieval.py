"""Lowering of retrievers: vector search, MultiQueryRetriever, EnsembleRetriever, MergerRetriever.

* ``VectorStoreRetriever`` (or ``MultiVectorRetriever`` / ``ParentDocumentRetriever``, whose chunks found
  are then mapped to their parents through its own docstore) over ``langchain_chroma.Chroma`` with
  ``HuggingFaceEmbeddings``
  -> EMBED on Ayo's embedding engine (same model folder, same options: newline
  replacement, ``normalize_embeddings``; concurrent queries share forward passes), or with
  ``OpenAIEmbeddings`` -> EMBED on the remote embedding engine (the query sent as
  ``embed_query`` sends it; concurrent queries share requests) +
  SEARCH through the user's own ``Chroma`` object (``similarity_search_by_vector`` /
  ``max_marginal_relevance_search_by_vector``: the very calls ``similarity_search`` /
  ``max_marginal_relevance_search`` make after embedding the query).
* ``MultiQueryRetriever`` -> its prompt and model as nodes; when its parser is the
  line-list parser, the model's decode streams each finished line to a per-line
  retrieval while the next line is still being generated (decode pipelining). The
  union uses the retriever's own ``unique_union`` over the user parser's final list,
  in its order; a line the stream split differently from the parser is retrieved
  again, so the result never depends on the streaming heuristics.
* ``EnsembleRetriever`` -> its retrievers as parallel branches, fused by its own
  ``weighted_reciprocal_rank``.
* ``MergerRetriever`` -> its retrievers as parallel branches (stock's ``invoke`` runs them one after
  another), their lists interleaved as its ``merge_documents`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig

from ayo_core.runtime.errors import Captured, capturing
from ayo_core.runtime.pipelined import streamed_lines
from ayo_core.templates import Aggregate, Opaque, StepRetrieval, Transform
from ayo_langchain import capture as cap
from ayo_langchain import engines as eng
from ayo_langchain.callbacks import PlannedRetrieverRun, leaf_config, reported, start_retriever_run
from ayo_langchain.lower import COST, LOWERINGS, Lowerer, call_user
from ayo_langchain.prefill import Progress

Retrieve = Callable[[Any, Any], Awaitable[Any]]
_MMR_KEYS = ("k", "fetch_k", "lambda_mult", "filter", "where_document")


# ---- vector retrieval ------------------------------------------------------------------
async def embed_query(ctx: Any, plan: Any, emb: Any, query: str) -> list[float]:
    """``HuggingFaceEmbeddings.embed_query`` on the embedding engine (its options: newline replacement,
    ``normalize_embeddings``; its ``batch_size`` with ``exact_embeddings``); ``OpenAIEmbeddings.embed_query``
    (the text as it is: the server computes the vector) on the remote one."""
    if eng.is_remote_embeddings(emb):
        return (await ctx.embed.aembed([query]))[0]  # type: ignore[no-any-return]
    encode = emb.query_encode_kwargs or emb.encode_kwargs
    kw: dict[str, Any] = {"normalize": bool(encode.get("normalize_embeddings", False))}
    if plan.options.exact_embeddings:
        kw["batch_size"] = encode.get("batch_size", 32)
    vectors = await ctx.embed.aembed([query.replace("\n", " ")], **kw)
    return vectors[0]


def search_by_vector(retriever: Any, vector: list[float]) -> list[Document]:
    """What ``VectorStoreRetriever`` does after ``embed_query``, on the user's own Chroma object."""
    vs, kwargs = retriever.vectorstore, dict(retriever.search_kwargs)
    if retriever.search_type == "mmr":
        return vs.max_marginal_relevance_search_by_vector(vector, **{k: kwargs[k] for k in _MMR_KEYS if k in kwargs})
    k = kwargs.pop("k", 4)
    return vs.similarity_search_by_vector(vector, k, **kwargs)


def parent_ids(retriever: Any, chunks: list[Document]) -> list[str]:
    """``MultiVectorRetriever``'s parent ids of the chunks found, in their order, each once."""
    ids: list[str] = []
    for d in chunks:
        if retriever.id_key in d.metadata and d.metadata[retriever.id_key] not in ids:
            ids.append(d.metadata[retriever.id_key])
    return ids


async def parents_of(retriever: Any, chunks: list[Document], sync: bool) -> list[Document]:
    """The parents ``MultiVectorRetriever`` returns for the chunks: ``docstore.mget`` (a worker thread) under
    a sync call, ``amget`` under an async one, as stock; missing ones left out."""
    ids = parent_ids(retriever, chunks)
    docs = await asyncio.to_thread(retriever.docstore.mget, ids) if sync else await retriever.docstore.amget(ids)
    return [d for d in docs if d is not None]


class _Done:
    """An EMBED node's value when it already ran the stock retriever (non-str input)."""

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs


def _vector_steps(lw: Lowerer, m: cap.VectorRetriever, run_cfg: RunnableConfig) -> tuple[Retrieve, Retrieve]:
    """``embed(ctx, query)`` (opens the retriever's run) and ``search(ctx, embedded)`` (ends it)."""
    retriever = m.runnable

    async def embed(ctx: Any, query: Any) -> Any:
        if not isinstance(query, str):  # let the stock retriever raise (or cope) exactly as it would
            return _Done(await call_user(lw.run, retriever, query, run_cfg))
        run_manager = await start_retriever_run(retriever, query, run_cfg)
        try:
            return (run_manager, await embed_query(ctx, lw.plan, m.embeddings, query))
        except BaseException as exc:
            await run_manager.on_retriever_error(exc)
            raise

    async def search(ctx: Any, vector: Any) -> list[Document]:
        if isinstance(vector, _Done):
            return vector.docs
        run_manager, vector = vector
        return await reported(run_manager, found(vector))

    async def found(vector: list[float]) -> list[Document]:
        chunks = await asyncio.to_thread(search_by_vector, retriever, vector)
        return await parents_of(retriever, chunks, lw.run.sync) if m.parents else chunks

    return embed, search


def lower_vector(lw: Lowerer, m: cap.VectorRetriever, src: str, cfg: RunnableConfig) -> str:
    if not lw.plan.serves_embeddings(m.embeddings):
        return lw._call_node("retriever", m, src, cfg, COST["opaque"], kind=Opaque)
    embed, search = _vector_steps(lw, m, leaf_config(cfg, m.wrappers, m.runnable))
    names = (lw.name("embed"), lw.name("search"))
    template = StepRetrieval(m.label(), embed=embed, search=search, names=names,
                             costs=(COST["embed"], COST["search"]))
    return lw.build(template, {"query": src}, name=names[0])


def retrieve_fn(lw: Lowerer, m: cap.Module, cfg: RunnableConfig) -> Retrieve:
    """One call that retrieves for a query with module ``m`` (for per-part nodes and fallbacks)."""
    run_cfg = leaf_config(cfg, m.wrappers, m.runnable)
    if not (isinstance(m, cap.VectorRetriever) and lw.plan.serves_embeddings(m.embeddings)):
        async def call(ctx: Any, query: str) -> list[Document]:
            return await call_user(lw.run, m.runnable, query, run_cfg)

        return call
    embed, search = _vector_steps(lw, m, run_cfg)

    async def vector(ctx: Any, query: str) -> list[Document]:
        return await search(ctx, await embed(ctx, query))

    return vector


# ---- MultiQueryRetriever ---------------------------------------------------------------
def line_parts(parser: Any) -> Callable[[Any], list[str]]:
    """The ``parts`` function of the query-generation decode.

    While streaming (text so far): the finished lines + the line still growing, split as
    ``LineListOutputParser`` splits. On the final message: the user's parser's own list,
    so the per-line retrievals end up being exactly the parser's queries.
    """

    def parts(value: Any) -> list[str]:
        if not isinstance(value, str):
            return list(parser.invoke(value))
        finished, growing = streamed_lines(value)  # whitespace stripped at the start, empty lines dropped
        return [*finished, growing]

    return parts


def lower_multi_query(lw: Lowerer, m: cap.MultiQuery, src: str, cfg: RunnableConfig) -> str:
    # stock's retriever invokes its query chain (prompt, model, parser), even inside a stream
    was, lw.invoked = lw.invoked, True
    try:
        return _lower_multi_query(lw, m, src, cfg)
    finally:
        lw.invoked = was


def _lower_multi_query(lw: Lowerer, m: cap.MultiQuery, src: str, cfg: RunnableConfig) -> str:
    mq = m.runnable
    run_cfg = leaf_config(cfg, m.wrappers, mq)
    steps = m.llm_chain.steps if isinstance(m.llm_chain, cap.Sequence) else []
    pipelined = (len(steps) == 3 and isinstance(steps[0], cap.Prompt) and isinstance(steps[1], cap.Model)
                 and isinstance(steps[2], cap.Parser) and steps[2].line_list and id(steps[1]) in lw.plan.routed)

    planned = PlannedRetrieverRun(mq, run_cfg)

    async def start(ctx: Any, query: Any) -> Any:
        run_manager = await planned.start(query)
        return {"question": query, "_run": run_manager}

    started = lw.build(Transform(start, m.label(), takes_ctx=True), {"query": src}, "mq_start")

    async def question(ctx: Any, state: dict) -> dict:
        return {"question": state["question"]}

    q_dict = lw.build(Transform(question, m.label(), takes_ctx=True), {"state": started}, "mq_question")
    # as in stock, the query chain and the inner retriever are untagged children of the retriever's
    # run (every node using these configs runs after mq_start)
    chain_cfg = planned.child(run_cfg)
    retrieve = _capturing(retrieve_fn(lw, m.retriever, chain_cfg))
    inputs = {"state": started}
    if mq.include_original:  # the original question needs no generation: retrieve it right away

        async def original(ctx: Any, query: dict) -> list[tuple[str, Any]]:
            return [await retrieve(ctx, query["question"])]

        inputs["first"] = lw.build(StepRetrieval(m.retriever.label(), retrieve=original,
                                                 costs=(COST["embed"], COST["search"])), {"query": started},
                                   "mq_original")
    if pipelined:
        # the query chain's steps run under its sequence's run (when reported), tagged as in stock
        seq_run, chain_in = lw.composite_run(m.llm_chain, q_dict, chain_cfg)
        pv = lw.lower(steps[0], chain_in, lw.composite_step_config(seq_run, chain_cfg, "seq:step:1"))
        generated = asyncio.Event()
        gen = lw._lower_model(steps[1], pv, lw.composite_step_config(seq_run, chain_cfg, "seq:step:2"),
                              parts=line_parts(steps[2].runnable), finished=generated)
        lines = lw.lower(steps[2], gen, lw.composite_step_config(seq_run, chain_cfg, "seq:step:3"))
        inputs["lines"] = lw.composite_end(seq_run, m.llm_chain, lines)
        inputs["per"] = lw.build(StepRetrieval(m.retriever.label(), per_part=True, retrieve=retrieve,
                                               costs=(COST["embed"], COST["search"])), {"query": gen}, "mq_retrieve")
    else:
        inputs["lines"] = lw.lower(m.llm_chain, q_dict, chain_cfg)
    out = lw.build(Aggregate(_union(mq, retrieve), m.label(), takes_ctx=True, cost=COST["search"]), inputs, "mq_union")
    if pipelined:
        lw.progress[out] = Progress(inputs["per"], mq, generated=generated)
    return out


def _capturing(retrieve: Retrieve) -> Callable[..., Awaitable[tuple[str, Any]]]:
    """``retrieve`` returning ``(query, docs)``, or ``(query, Captured(exc))`` when it raises: the
    union raises it (a per-part task never fails on its own, so the query fails once, with the
    retriever's own exception, from one node)."""
    safe = capturing(retrieve)

    async def run(ctx: Any, query: str) -> tuple[str, Any]:
        return query, await safe(ctx, query)

    return run


def _union(mq: Any, retrieve: Callable[..., Awaitable[tuple[str, Any]]]) -> Callable[..., Any]:
    """The union node: the parser's queries (+ the original), each one's documents, ``unique_union``."""

    async def union(ctx: Any, state: dict, lines: list[str], per: list | None = None,
                    first: list | None = None) -> list[Document]:
        async def docs() -> list[Document]:
            queries = list(lines) + ([state["question"]] if mq.include_original else [])
            have = {**dict(first or []), **dict(per or [])}
            missing = [q for q in dict.fromkeys(queries) if q not in have]
            have.update(await asyncio.gather(*(retrieve(ctx, q) for q in missing)))
            for q in queries:
                if isinstance(have[q], Captured):
                    raise have[q].exc
            return mq.unique_union([d for q in queries for d in have[q]])

        return await reported(state["_run"], docs())

    return union


# ---- EnsembleRetriever -----------------------------------------------------------------
def interleave(doc_lists: list[list[Document]]) -> list[Document]:
    """``MergerRetriever.merge_documents``' merge: the first of each list, then the second of each, ..."""
    merged = []
    for i in range(max(map(len, doc_lists), default=0)):
        merged.extend(docs[i] for docs in doc_lists if i < len(docs))
    return merged


def lower_ensemble(lw: Lowerer, m: cap.Ensemble, src: str, cfg: RunnableConfig) -> str:
    ens = m.runnable
    run_cfg = leaf_config(cfg, m.wrappers, ens)

    # EnsembleRetriever.ainvoke opens its run itself, without the LangSmith retriever metadata;
    # MergerRetriever keeps BaseRetriever's invoke, which adds them
    planned = PlannedRetrieverRun(ens, run_cfg, ls_params=m.merge == "interleave")

    async def start(ctx: Any, query: Any) -> Any:
        return await planned.start(query)

    started = lw.build(Transform(start, m.label(), takes_ctx=True), {"query": src}, "ensemble_start")

    async def query_of(ctx: Any, query: Any, run: Any) -> Any:
        return query

    # the sub-retrievers start after the ensemble's run: their runs are its children, as in stock
    query = lw.build(Transform(query_of, m.label(), takes_ctx=True), {"query": src, "run": started}, "ensemble_query")
    inputs = {"run": started}
    for i, sub in enumerate(m.retrievers):
        inputs[f"r{i}"] = lw.lower(sub, query, planned.child(run_cfg, f"retriever_{i + 1}"))

    async def fuse(ctx: Any, run: Any, **lists: list) -> list[Document]:
        async def docs() -> list[Document]:
            doc_lists = [[d if isinstance(d, Document) else Document(page_content=d) for d in lists[f"r{i}"]]
                         for i in range(len(m.retrievers))]
            return interleave(doc_lists) if m.merge == "interleave" else ens.weighted_reciprocal_rank(doc_lists)

        return await reported(run, docs())

    return lw.build(Aggregate(fuse, m.label(), takes_ctx=True, cost=COST["parser"]), inputs, "ensemble_fuse")


LOWERINGS.add(cap.VectorRetriever, lower_vector)
LOWERINGS.add(cap.MultiQuery, lower_multi_query)
LOWERINGS.add(cap.Ensemble, lower_ensemble)
LOWERINGS.add(cap.Merger, lower_ensemble)
