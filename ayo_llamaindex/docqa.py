"""``optimize(fn)`` for the document-QA pattern: a function that indexes what it is given, then asks.

::

    def answer(question, documents):
        index = VectorStoreIndex.from_documents(documents, embed_model=embed)
        return index.as_query_engine(llm=llm).query(question)

    fast = ayo_llamaindex.optimize(answer)      # same signature; plus acall, explain(), last_trace

Capture is by tracing each call, torch.fx-style but on the real arguments: while the
user's function runs, wrapt interceptors (active only inside an optimized call, via a
context variable) record the LlamaIndex calls it makes. Building a ``VectorStoreIndex``
(``from_documents``, the constructor) or inserting into one is split into what must
happen now (splitting, ids, docstore, index struct) and a pending ingest (embed +
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
import logging
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.callbacks import EventPayload
from llama_index.core.schema import QueryBundle

from ayo_core.bound import BoundOptimizedFunction
from ayo_core.caller_code import running_ayo_code, running_caller_code
from ayo_core.graph import Graph
from ayo_core.introspect import once
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.runtime.caller import CALLER_LOOP
from ayo_core.runtime.execute import is_async_callable
from ayo_core.templates import Indexing, IndexingHooks
from ayo_llamaindex import events, extractors, ingest, spans
from ayo_llamaindex import explain as explain_mod
from ayo_llamaindex.capture import binding_label, capture_query_engine, describe
from ayo_llamaindex.lowering import build_query_graph
from ayo_llamaindex.query_engine import OptimizedQueryEngine
from ayo_llamaindex.runtime import LOOP, assign_engines, embed_send, runtime_for
from ayo_shims import llamaindex as shim

log = logging.getLogger(__name__)
_CALL: contextvars.ContextVar[CallState | None] = contextvars.ContextVar("ayo_docqa_call", default=None)


@dataclass
class CallState:
    """What one optimized call has traced so far."""

    owner: OptimizedFunction
    pending: list[ingest.PendingIngest] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lowered: list[tuple[str, str]] = field(default_factory=list)  # (module, core template), for explain()
    graph: Any = None
    trace: Any = None


class OptimizedFunction:
    """The optimized stand-in for a doc-QA function (same call signature)."""

    def __init__(self, fn: Any, policy: str = "critical_path", options: Options | None = None) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._options = options or Options(policy=policy)
        self._policy = self._options.policy
        self._is_async = is_async_callable(fn)
        self._last: CallState | None = None
        self.last_trace: Any = None
        install_hooks()

    def __repr__(self) -> str:
        return f"OptimizedFunction({getattr(self._fn, '__qualname__', self._fn)!r})"

    @property
    def stock(self) -> Any:
        """The user's original function."""
        return self._fn

    @property
    def options(self) -> Options:
        """The knobs its queries run with (``optimize(fn, options=...)``)."""
        return self._options

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # ``@ayo_llamaindex.optimize`` on a method: bind like the function it replaces
        return self if instance is None else BoundOptimizedFunction(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_async:
            return self.acall(*args, **kwargs)
        state = CallState(self)
        token = _CALL.set(state)
        try:
            with running_caller_code():
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
            with running_caller_code():
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

    def explain(self) -> explain_mod.Explanation:
        """What the last call traced: modules, the graph it ran, passes, what ran stock and why."""
        state = self._last
        if state is None:
            return explain_mod.Explanation("no call traced yet: call the optimized function once, then explain()")
        return explain_mod.explain_call(state.modules, state.lowered, state.notes, state.graph, state.trace)


# -- the per-call graph --------------------------------------------------------------------------

@dataclass(frozen=True)
class CallPlan:
    """What one query of a call runs: the captured engine, its engines, the ingests it waits for."""

    engine_plan: Any  # capture_query_engine's plan of it
    assign: Any
    pendings: list[ingest.PendingIngest]


def capture_call(state: CallState, query_engine: Any) -> CallPlan:
    """Capture ``query_engine`` with the call's unfinished ingests, noting what it found for explain()."""
    plan = capture_query_engine(query_engine)
    pendings = [p for p in state.pending if not p.done.is_set()]
    # indexing overlaps decoding when the query expands itself with an LLM before retrieval
    assign = assign_engines(plan.llm_bindings(), plan.embed_bindings() + [p.embed for p in pendings],
                            overlap=bool(pendings) and plan.expands_query())
    state.modules.extend(describe(plan))
    state.lowered.extend(explain_mod.lowered_modules(plan))
    for name, reason in plan.opaque_modules():
        state.notes.append(f"{name}: {reason}")
    return CallPlan(plan, assign, pendings)


def build_call_graph(call: CallPlan, _query: Any = None) -> Graph:
    """One graph: the call's pending ingests + the query through its engine."""
    g = Graph(query_id="q")
    g.input("query")
    after = [_add_ingest_nodes(g, k, p, call.assign) for k, p in enumerate(call.pendings)]
    build_query_graph(call.engine_plan, call.assign, extra_after=frozenset(after), graph=g)
    return g


def _add_ingest_nodes(g: Graph, k: int, p: ingest.PendingIngest, assign: Any) -> str:
    kind = assign.embed_kind(p.embed)

    async def embed_chunks(ctx: Any) -> list[list[float]]:
        return await p.vectors(embed_send(ctx, kind))

    async def add(ctx: Any, vectors: list[list[float]]) -> int:
        return await p.add(vectors, embed_send(ctx, kind))

    hooks = IndexingHooks(embed=embed_chunks, add=add, engine=kind or "local", n_chunks=len(p.nodes))
    return Indexing(str(id(p.store)), module="indexing", hooks=hooks).build(g, f"ingest{k}", {})


async def run_call_query(state: CallState, query_engine: Any, query: Any,
                         caller_loop: asyncio.AbstractEventLoop | None = None) -> Any:
    # this task runs on Ayo's loop in a copy of the caller's context: nodes must not be
    # intercepted again (an opaque node calls the stock query engine); in aquery, opaque
    # nodes await the stock async methods on the caller's loop
    _CALL.set(None)
    CALLER_LOOP.set(caller_loop)
    bundle = QueryBundle(query) if isinstance(query, str) else query
    options = state.owner.options
    # one pipeline per query: its graph holds this call's own ingests, so no shape is shared
    pipeline: OptimizedPipeline[CallPlan] = OptimizedPipeline(
        lambda: capture_call(state, query_engine), build_call_graph, options,
        runtime=lambda: runtime_for(pipeline.plan.assign, options.policy, options.llm_inflight))
    lowered = pipeline.plan.engine_plan.kind != "opaque"
    # the engine's ``_query`` span(s), as its query() opens them; an opaque node runs the stock ``_query``,
    # which opens its own
    inner = spans.sync_or_async("_query")
    inner_spans = [inner] * (spans.spanned_levels(query_engine, inner) if lowered else 0)
    with spans.opened(query_engine, inner_spans, bundle) as box, \
            events.query_event(query_engine, bundle, lowered=lowered) as event:
        try:
            value, trace = await pipeline.run_traced({"query": bundle})
        finally:
            state.graph = pipeline.last_graph
        event.on_end(payload={EventPayload.RESPONSE: box.set(value)})
    state.trace = trace
    state.owner.last_trace = trace
    return value


# -- interceptors (process-wide, active only inside an optimized call) ---------------------------

@once
def install_hooks() -> None:
    shim.wrap_index_writes(_build_index, _insert)
    shim.wrap_query_calls(_query, _aquery)
    ingest.install_barriers()
    extractors.install(_CALL.get)


def _nodes_args(args: tuple, kwargs: dict) -> tuple[list[Any], dict[str, Any]] | None:
    if args and "nodes" not in kwargs and len(args) == 1:
        return list(args[0]), dict(kwargs)
    if not args and "nodes" in kwargs:
        rest = dict(kwargs)
        return list(rest.pop("nodes")), rest
    return None


def _defer(state: CallState, index: Any, args: tuple, kwargs: dict, what: str) -> tuple[Any, Any] | None:
    """``(index_struct, pending)`` when this index write can be deferred; else None (and a note)."""
    bound = _nodes_args(args, kwargs)
    reason = "arguments Ayo does not mirror" if bound is None else ingest.why_not_deferred(index, bound[1])
    if reason is not None:
        state.notes.append(f"{type(index).__name__}.{what}: {reason}")
        return None
    nodes = bound[0]
    struct = index.index_struct_cls() if what == "build" else index.index_struct
    pending = ingest.defer_vectors(index, struct, nodes)
    state.pending.append(pending)
    state.lowered.append((f"{type(index).__name__}.{what}", "Indexing"))
    state.modules.append(f"indexing ({what}): {type(index).__name__}, {len(nodes)} chunks -> Indexing[embed="
                         f"{binding_label(pending.embed)}, "
                         f"store={type(pending.store).__name__}] (vectors deferred into the query graph)")
    return struct, pending


def _build_index(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``VectorStoreIndex._build_index_from_nodes`` (from_documents and the constructor)."""
    state = _CALL.get()
    with running_ayo_code():
        deferred = None if state is None else _defer(state, instance, args, kwargs, "build")
    return wrapped(*args, **kwargs) if deferred is None else deferred[0]


def _insert(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``VectorStoreIndex._insert`` (insert / insert_nodes into a live index)."""
    state = _CALL.get()
    with running_ayo_code():
        deferred = None if state is None else _defer(state, instance, args, kwargs, "insert")
    return wrapped(*args, **kwargs) if deferred is None else None


def _intercepted(instance: Any, args: tuple, kwargs: dict) -> tuple[CallState, Any] | None:
    """``(call state, query)`` when this ``query``/``aquery`` call is one to run as Ayo's graph."""
    state = _CALL.get()
    if state is None or isinstance(instance, OptimizedQueryEngine) or len(args) + len(kwargs) != 1:
        return None
    return state, args[0] if args else next(iter(kwargs.values()))


def _query(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    hit = _intercepted(instance, args, kwargs)
    if hit is None:
        return wrapped(*args, **kwargs)
    state, query = hit
    # the stock query()'s span and events, which this hook replaces
    with running_ayo_code(), spans.opened(instance, ["query"] * spans.levels(instance, "query"), query) as box, \
            events.QueryCall(instance, query).span() as done:
        return box.set(done(LOOP.run_sync(run_call_query(state, instance, query))))


def _aquery(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    hit = _intercepted(instance, args, kwargs)
    return wrapped(*args, **kwargs) if hit is None else _arun_call_query(hit[0], instance, hit[1])


async def _arun_call_query(state: CallState, query_engine: Any, query: Any) -> Any:
    # the loop is the one awaiting this coroutine (``asyncio.run(qe.aquery(q))`` creates it first)
    with running_ayo_code(), spans.opened(query_engine, ["aquery"] * spans.levels(query_engine, "aquery"), query) as box, \
            events.QueryCall(query_engine, query).span() as done:
        return box.set(done(await LOOP.arun(run_call_query(state, query_engine, query, asyncio.get_running_loop()))))
