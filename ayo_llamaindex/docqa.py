"""``optimize(fn)`` for the document-QA pattern: a function that indexes what it is given, then asks.

::

    def answer(question, documents):
        index = VectorStoreIndex.from_documents(documents, embed_model=embed)
        return index.as_query_engine(llm=llm).query(question)

    fast = ayo_llamaindex.optimize(answer)      # same signature; plus acall, explain(), last_trace

Capture is by tracing each call, torch.fx-style but on the real arguments: while the
user's function runs, wrapt interceptors (active only inside an optimized call, via a
context variable) record the LlamaIndex calls it makes. ``from_documents`` is split
into what must happen now (splitting, ids, docstore) and a pending ingest (embed +
vector-store add, see :mod:`ayo_llamaindex.ingest`); ``query``/``aquery`` on any
query engine captures that engine and runs one graph holding the pending ingests and
the query: indexing (the embedder's core) overlaps the query's LLM work (query
expansion, prefill), and retrieval waits only for the ingest. Whatever tracing cannot
follow runs stock, and ``explain()`` says so.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.schema import QueryBundle

from ayo_core.graph import Graph, Node, Op
from ayo_llamaindex import explain as explain_mod
from ayo_llamaindex import ingest
from ayo_llamaindex.capture import capture_query_engine, describe
from ayo_llamaindex.runtime import LOOP, assign_engines, embed_send, runtime_for

log = logging.getLogger(__name__)
_CALL: contextvars.ContextVar[CallState | None] = contextvars.ContextVar("ayo_docqa_call", default=None)
_ids = itertools.count()


@dataclass
class CallState:
    """What one optimized call has traced so far."""

    owner: OptimizedFunction
    pending: list[ingest.PendingIngest] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    graph: Any = None
    trace: Any = None


class OptimizedFunction:
    """The optimized stand-in for a doc-QA function (same call signature)."""

    def __init__(self, fn: Any, policy: str = "critical_path") -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._policy = policy
        self._is_async = inspect.iscoroutinefunction(fn)
        self._last: CallState | None = None
        self.last_trace: Any = None
        install_hooks()

    def __repr__(self) -> str:
        return f"OptimizedFunction({getattr(self._fn, '__qualname__', self._fn)!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_async:
            return self.acall(*args, **kwargs)
        state = CallState(self)
        token = _CALL.set(state)
        try:
            return self._fn(*args, **kwargs)
        finally:
            _CALL.reset(token)
            self._finish(state)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """The async form: awaits an ``async def`` function, runs a plain one in a worker thread."""
        if not self._is_async:
            return await asyncio.to_thread(self.__call__, *args, **kwargs)
        state = CallState(self)
        token = _CALL.set(state)
        try:
            return await self._fn(*args, **kwargs)
        finally:
            _CALL.reset(token)
            await asyncio.to_thread(self._finish, state)

    def _finish(self, state: CallState) -> None:
        # the call returns only once every ingest it started is in the store
        for p in state.pending:
            try:
                p.wait_sync()
            except Exception:
                log.exception("Ayo: pending ingest %r failed", p)
                raise
        self._last = state
        if state.trace is not None:
            self.last_trace = state.trace

    def explain(self) -> str:
        """What the last call traced: modules, the graph it ran, passes, what ran stock and why."""
        state = self._last
        if state is None:
            return "no call traced yet: call the optimized function once, then explain()"
        lines = ["== traced calls (last call) =="]
        lines += state.modules or ["(no LlamaIndex call Ayo follows was seen: the function ran stock)"]
        if state.graph is not None:
            lines += ["", "== primitive graph ==", state.graph.format(), explain_mod.passes_line(state.graph),
                      *explain_mod.speculation_lines(state.graph)]
        lines += ["", "ran stock (tracing could not follow):" if state.notes else "ran stock: nothing"]
        lines += [f"  {n}" for n in state.notes]
        lines += ["", *explain_mod.trace_lines(state.trace)]
        return "\n".join(lines)


# -- the per-call graph --------------------------------------------------------------------------

def build_call_graph(state: CallState, query_engine: Any) -> tuple[Graph, Any, Any]:
    """One graph: the call's pending ingests + the query through ``query_engine``."""
    from ayo_llamaindex.lowering import build_query_graph

    plan = capture_query_engine(query_engine)
    pendings = [p for p in state.pending if not p.done.is_set()]
    # indexing overlaps decoding when the query expands itself with an LLM before retrieval
    assign = assign_engines(plan.llm_bindings(), plan.embed_bindings() + [p.embed for p in pendings],
                            overlap=bool(pendings) and plan.expands_query())
    g = Graph(query_id="q")
    g.input("query")
    after = []
    for k, p in enumerate(pendings):
        after.append(_add_ingest_nodes(g, k, p, assign))
    build_query_graph(plan, assign, extra_after=frozenset(after), graph=g)
    state.modules.extend(describe(plan))
    for name, reason in plan.opaque_modules():
        state.notes.append(f"{name}: {reason}")
    return explain_mod.apply_passes(g), plan, assign


def _add_ingest_nodes(g: Graph, k: int, p: ingest.PendingIngest, assign: Any) -> str:
    kind = assign.embed_kind(p.embed)

    async def embed_chunks(ctx: Any) -> list[list[float]]:
        return await p.vectors(embed_send(ctx, kind))

    async def add(ctx: Any, vectors: list[list[float]]) -> int:
        return await p.add(vectors)

    g.add(Node(f"ingest{k}.embed", Op.EMBED, fn=embed_chunks, engine=kind or "local", module="indexing",
               batchable=True, cost=0.02 * max(1, len(p.nodes))))
    g.add(Node(f"ingest{k}.add", Op.INGEST, fn=add, inputs={"vectors": f"ingest{k}.embed"}, module="indexing",
               side_effect=True, cost=0.01, meta={"resources": frozenset({f"vector:{id(p.store)}"})}))
    return f"ingest{k}.add"


async def run_call_query(state: CallState, query_engine: Any, query: Any) -> Any:
    from ayo_llamaindex.query_engine import unwrap_failure

    # this task runs on Ayo's loop in a copy of the caller's context: nodes must not be
    # intercepted again (an opaque node calls the stock query engine)
    _CALL.set(None)
    bundle = QueryBundle(query) if isinstance(query, str) else query
    graph, _, assign = build_call_graph(state, query_engine)
    state.graph = graph
    rt = runtime_for(assign, state.owner._policy)
    try:
        value, trace = await rt.run(graph.for_query(f"doc{next(_ids)}"), {"query": bundle})
    except Exception as exc:
        raise unwrap_failure(exc) from None
    state.trace = trace
    state.owner.last_trace = trace
    return value


# -- interceptors (process-wide, active only inside an optimized call) ---------------------------

_installed = False
_install_lock = threading.Lock()


def install_hooks() -> None:
    global _installed
    import wrapt
    from llama_index.core.base.base_query_engine import BaseQueryEngine
    from llama_index.core.indices.base import BaseIndex

    with _install_lock:
        if _installed:
            return
        wrapt.wrap_function_wrapper(BaseIndex, "from_documents", _from_documents)
        wrapt.wrap_function_wrapper(BaseQueryEngine, "query", _query)
        wrapt.wrap_function_wrapper(BaseQueryEngine, "aquery", _aquery)
        ingest.install_barriers()
        _installed = True


def _from_documents(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = _CALL.get()
    if state is None:
        return wrapped(*args, **kwargs)
    cls = instance
    bound = _bind_from_documents(args, kwargs)
    if bound is None:
        state.notes.append("from_documents: arguments Ayo does not mirror")
        return wrapped(*args, **kwargs)
    documents, named, extra = bound
    reason = ingest.why_not_deferred(cls, named.get("storage_context"), extra)
    if reason is not None:
        state.notes.append(f"{getattr(cls, '__name__', cls)}.from_documents: {reason}")
        return wrapped(*args, **kwargs)
    index, pending = ingest.deferred_from_documents(cls, documents, **named, **extra)
    state.pending.append(pending)
    state.modules.append(f"indexing: {cls.__name__}.from_documents({len(documents)} documents -> "
                         f"{len(pending.nodes)} chunks) -> Indexing[embed={pending.embed.label}"
                         f"{'' if pending.embed.recognized else ' (opaque)'}, store={type(pending.store).__name__}]")
    return index


def _bind_from_documents(args: tuple, kwargs: dict) -> tuple[Any, dict, dict] | None:
    names = ("documents", "storage_context", "show_progress", "callback_manager", "transformations")
    if len(args) > len(names):
        return None
    given = dict(zip(names, args, strict=False))
    for k in names:
        if k in kwargs:
            if k in given:
                return None
            given[k] = kwargs[k]
    if "documents" not in given:
        return None
    documents = given.pop("documents")
    extra = {k: v for k, v in kwargs.items() if k not in names}
    return documents, given, extra


def _should_intercept(instance: Any) -> CallState | None:
    from ayo_llamaindex.query_engine import OptimizedQueryEngine

    state = _CALL.get()
    if state is None or isinstance(instance, OptimizedQueryEngine):
        return None
    return state


def _query(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = _should_intercept(instance)
    if state is None or len(args) + len(kwargs) != 1:
        return wrapped(*args, **kwargs)
    query = args[0] if args else next(iter(kwargs.values()))
    return LOOP.run(run_call_query(state, instance, query))


def _aquery(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = _should_intercept(instance)
    if state is None or len(args) + len(kwargs) != 1:
        return wrapped(*args, **kwargs)
    query = args[0] if args else next(iter(kwargs.values()))
    return LOOP.arun(run_call_query(state, instance, query))
