"""Engine schedulers: one per engine, batching requests with the application in view.

Nodes reach engines only through :class:`EngineProxy` objects (``ctx.llm``,
``ctx.embed``, ``ctx.vector``) which turn every method call into an
:class:`EngineRequest` carrying the query id, node, depth and slack. The
scheduler queues requests, and each :meth:`EngineScheduler.step_nowait` returns a
:class:`SchedulePlan` value: which requests run now, merged into which engine
calls, at which engine priority. The synchronous ``*_nowait`` core does no I/O;
:meth:`EngineScheduler.submit` is the thin async wrapper that launches the
planned calls.

Merging: methods listed in ``SchedulerConfig.merge`` take one list argument
(``aembed(texts)``, ``query(collection, query_embeddings, k)``); concurrent
requests with equal other arguments are concatenated into one engine call (up
to ``max_batch_items``) and the result list is split back. Micro-batches of one
split node of one query are never re-merged (that would undo stage
decomposition). ``max_inflight`` bounds engine calls in flight; with 1 (the
embedding default) requests arriving during a call naturally form the next
batch.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ayo_core.runtime.errors import QueueFull
from ayo_core.runtime.policies import Policy, get_policy
from ayo_core.runtime.states import RequestState, request_transition
from ayo_core.trace import EngineCall, NodeSpan, Trace

log = logging.getLogger(__name__)

_request_ids = itertools.count()
_batch_ids = itertools.count()
STREAM_END = object()


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits and batching for one engine kind."""

    max_inflight: int = 8
    max_batch_items: int = 64
    max_queue: int = 10_000
    merge: Mapping[str, str] = field(default_factory=dict)  # method -> name of its list parameter
    pass_priority: bool = True
    # arguments that, when set (not None), ask the engine for one call of the request's own shape: such a
    # request is never merged. An engine declares its own too (``ALONE_WHEN``: the local embedding
    # engine's batch_size, stock's exact vectors; a remote one has none, its server batches anyway)
    alone_when: tuple[str, ...] = ()


DEFAULT_CONFIGS: dict[str, SchedulerConfig] = {
    # vLLM batches internally: admit many requests and hand it priorities.
    "llm": SchedulerConfig(max_inflight=16),
    # One worker: requests arriving while it computes form the next batch.
    "embed": SchedulerConfig(max_inflight=1, max_batch_items=64, merge={"aembed": "texts", "embed": "texts"}),
    "vector": SchedulerConfig(max_inflight=4, merge={"query": "query_embeddings", "aquery": "query_embeddings"}),
}


@dataclass(eq=False)
class EngineRequest:
    """One engine method call from one node, with the application view the policies use."""

    kind: str
    method: str
    args: tuple
    kwargs: dict[str, Any]
    query_id: str = ""
    node: str = ""
    module: str = ""
    depth: int = 0
    slack: float = 0.0
    query_start: float = 0.0
    split_group: str | None = None
    trace: Trace | None = None
    span: NodeSpan | None = None
    stream_queue: asyncio.Queue | None = None
    items: int = 1
    seq: int = field(default_factory=lambda: next(_request_ids))
    state: RequestState = RequestState.WAITING
    future: asyncio.Future | None = None
    enqueued_at: float = 0.0
    batch_id: int | None = None
    bound: dict[str, Any] | None = None  # arguments bound to the engine method's signature (cached)


@dataclass(frozen=True)
class _Failed:
    """One member's error after a merged call was split to isolate a failure."""

    error: Exception


@dataclass(frozen=True)
class Batch:
    """One engine call the plan launches: one request, or several merged along a list argument."""

    id: int
    method: str
    requests: tuple[EngineRequest, ...]
    priority: int
    merge_param: str | None = None


@dataclass(frozen=True)
class SchedulePlan:
    """What one scheduler step decided (a value: tests inspect it, nothing ran yet)."""

    batches: tuple[Batch, ...]
    waiting: int
    running_batches: int


@dataclass(frozen=True)
class SchedulerStatistics:
    kind: str
    policy: str
    waiting: int
    running_requests: int
    running_batches: int
    submitted: int
    finished: int
    failed: int
    cancelled: int
    batches: int
    merged_requests: int
    max_waiting: int


@functools.lru_cache(maxsize=1024)
def _resolve(engine_type: type, method: str) -> tuple[str, str]:
    """Which attribute serves ``method`` and how: ("name", "async"|"stream"|"sync").

    An async variant ``a<method>`` is preferred when the engine has one (``query`` -> ``aquery``).
    """
    for name in (f"a{method}", method):
        fn = getattr(engine_type, name, None)
        if fn is None:
            continue
        if inspect.isasyncgenfunction(fn):
            return name, "stream"
        if inspect.iscoroutinefunction(fn):
            return name, "async"
        if name == method:
            return name, "sync"
    raise AttributeError(f"engine {engine_type.__name__} has no method {method!r}")


@functools.lru_cache(maxsize=1024)
def _accepts(engine_type: type, name: str, param: str) -> bool:
    try:
        return param in inspect.signature(getattr(engine_type, name)).parameters
    except (TypeError, ValueError):
        return False


async def call_engine(engine: Any, method: str, args: tuple, kwargs: dict[str, Any],
                      stream_queue: asyncio.Queue | None = None) -> Any:
    """Call ``engine.method`` however it is implemented (async, async generator, or sync in a thread)."""
    name, how = _resolve(type(engine), method)
    fn = getattr(engine, name)
    if how == "stream":
        out = []
        async for delta in fn(*args, **kwargs):
            out.append(delta)
            if stream_queue is not None:
                stream_queue.put_nowait(delta)
        return out
    if how == "async":
        return await fn(*args, **kwargs)
    if getattr(engine, "ayo_inline_sync", False):
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def record_call(req: EngineRequest, engine_kind: str, method: str, batch_id: int, start: float, end: float,
                batch_requests: int) -> None:
    """Write one request's share of an engine call into its trace and node span."""
    queued = max(0.0, start - req.enqueued_at)
    if req.span is not None:
        req.span.queued += queued
        req.span.batch_ids.append(batch_id)
    if req.trace is not None:
        req.trace.engine_calls.append(EngineCall(engine_kind, method, batch_id, start, end, req.query_id,
                                                 req.node, req.items, batch_requests, queued,
                                                 req.span.part if req.span is not None else None))


class DirectDispatcher:
    """Calls the engine at once, one request at a time (the reference interpreter's dispatcher)."""

    def __init__(self, kind: str, engine: Any):
        self.kind, self.engine = kind, engine

    async def submit(self, req: EngineRequest) -> Any:
        loop = asyncio.get_running_loop()
        req.enqueued_at = start = loop.time()
        try:
            result = await call_engine(self.engine, req.method, req.args, req.kwargs, req.stream_queue)
        finally:
            if req.stream_queue is not None:
                req.stream_queue.put_nowait(STREAM_END)
        record_call(req, self.kind, req.method, next(_batch_ids), start, loop.time(), 1)
        return result


class EngineScheduler:
    """Queues, orders (by policy) and batches the requests for one engine."""

    def __init__(self, kind: str, engine: Any, policy: str | Policy = "fifo", config: SchedulerConfig | None = None):
        self.kind, self.engine = kind, engine
        self.policy = get_policy(policy)
        self.config = config or DEFAULT_CONFIGS.get(kind, SchedulerConfig())
        self._alone_when = (*self.config.alone_when, *getattr(engine, "ALONE_WHEN", ()))
        self.waiting: list[EngineRequest] = []
        self.running: dict[int, Batch] = {}
        self._tasks: dict[int, asyncio.Task] = {}
        self._space_waiters: list[asyncio.Future] = []
        self._counts = dict.fromkeys(("submitted", "finished", "failed", "cancelled", "batches", "merged"), 0)
        self._max_waiting = 0
        self._pump_scheduled = False

    # ---- synchronous core (no I/O) --------------------------------------------------
    def submit_nowait(self, req: EngineRequest) -> None:
        """Queue ``req``; raise :class:`QueueFull` when the bounded queue is full."""
        if len(self.waiting) >= self.config.max_queue:
            raise QueueFull(f"{self.kind} scheduler queue is full ({self.config.max_queue} waiting); "
                            "submit() waits for space, or raise SchedulerConfig.max_queue")
        param = self.config.merge.get(req.method)
        if param is not None:
            values = self._bound(req).get(param)
            req.items = len(values) if isinstance(values, (list, tuple)) else 1
        self.waiting.append(req)
        self._counts["submitted"] += 1
        self._max_waiting = max(self._max_waiting, len(self.waiting))

    def step_nowait(self) -> SchedulePlan:
        """Decide which waiting requests start now, in which merged calls; mark them RUNNING."""
        free = self.config.max_inflight - len(self.running)
        if free <= 0 or not self.waiting:
            return SchedulePlan((), len(self.waiting), len(self.running))
        order = sorted(self.waiting, key=self.policy.key)
        taken: set[int] = set()
        batches = []
        for req in order:
            if free <= 0:
                break
            if req.seq in taken:
                continue
            members = self._gather(req, order, taken)
            taken.update(r.seq for r in members)
            batch = Batch(next(_batch_ids), req.method, tuple(members),
                          min(self.policy.priority(r) for r in members),
                          self.config.merge.get(req.method) if len(members) > 1 else None)
            for r in members:
                r.state = request_transition(r.state, RequestState.RUNNING, f"{self.kind} request of {r.node}")
                r.batch_id = batch.id
            self.running[batch.id] = batch
            batches.append(batch)
            free -= 1
        self.waiting = [r for r in self.waiting if r.seq not in taken]
        self._counts["batches"] += len(batches)
        self._counts["merged"] += sum(len(b.requests) - 1 for b in batches)
        return SchedulePlan(tuple(batches), len(self.waiting), len(self.running))

    def finish_nowait(self, batch_id: int, results: list[Any] | None = None, error: BaseException | None = None) -> None:
        """Deliver a finished call's results (one per request) or its error; free the slot."""
        batch = self.running.pop(batch_id)
        self._tasks.pop(batch_id, None)
        for i, req in enumerate(batch.requests):
            if req.state is not RequestState.RUNNING:
                continue  # cancelled while the call ran: its share is dropped
            fut = req.future
            failed = results[i].error if results is not None and isinstance(results[i], _Failed) else None
            if error is not None or failed is not None:
                req.state = request_transition(req.state, RequestState.FAILED)
                self._counts["failed"] += 1
                if fut is not None and not fut.done():
                    fut.set_exception(error if error is not None else failed)
            else:
                req.state = request_transition(req.state, RequestState.FINISHED)
                self._counts["finished"] += 1
                if fut is not None and not fut.done():
                    fut.set_result(results[i] if results is not None else None)

    def cancel_nowait(self, req: EngineRequest) -> None:
        """Withdraw ``req``: dequeue it, or drop its share of a running call (the call itself is
        cancelled once no request still wants it)."""
        if req.state is RequestState.WAITING:
            self.waiting = [r for r in self.waiting if r is not req]
        elif req.state is not RequestState.RUNNING:
            return
        req.state = request_transition(req.state, RequestState.CANCELLED)
        self._counts["cancelled"] += 1
        batch = self.running.get(req.batch_id) if req.batch_id is not None else None
        if batch is not None and all(r.state is RequestState.CANCELLED for r in batch.requests):
            task = self._tasks.get(batch.id)
            if task is not None:
                task.cancel()

    def statistics(self) -> SchedulerStatistics:
        c = self._counts
        return SchedulerStatistics(self.kind, self.policy.name, len(self.waiting),
                                   sum(len(b.requests) for b in self.running.values()), len(self.running),
                                   c["submitted"], c["finished"], c["failed"], c["cancelled"], c["batches"],
                                   c["merged"], self._max_waiting)

    # ---- async wrapper --------------------------------------------------------------
    async def submit(self, req: EngineRequest) -> Any:
        """Queue ``req`` (waiting for space if the queue is full) and return the engine's result."""
        loop = asyncio.get_running_loop()
        while len(self.waiting) >= self.config.max_queue:
            waiter = loop.create_future()
            self._space_waiters.append(waiter)
            await waiter
        req.future = loop.create_future()
        req.enqueued_at = loop.time()
        self.submit_nowait(req)
        self._schedule_pump()
        try:
            return await req.future
        except asyncio.CancelledError:
            self.cancel_nowait(req)
            self._schedule_pump()
            raise

    def _schedule_pump(self) -> None:
        # Step once per loop iteration, after every request submitted in this one:
        # the policy then orders (and merging combines) requests that arrived together.
        if not self._pump_scheduled:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_scheduled = False
        t0 = time.perf_counter()
        plan = self.step_nowait()
        for batch in plan.batches:
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            task.add_done_callback(functools.partial(self._reap, batch.id))
            self._tasks[batch.id] = task
        while self._space_waiters and len(self.waiting) < self.config.max_queue:
            waiter = self._space_waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
        if plan.batches:
            spent = (time.perf_counter() - t0) / sum(len(b.requests) for b in plan.batches)
            for batch in plan.batches:
                for r in batch.requests:
                    if r.trace is not None:
                        r.trace.add_overhead("scheduling", spent)

    def _reap(self, batch_id: int, task: asyncio.Task) -> None:
        # A call task cancelled before its first step (all its requests withdrawn in the loop iteration
        # the pump created it in) never runs _execute, whose end frees the slot: free it here.
        if batch_id in self.running:
            self.finish_nowait(batch_id, None, asyncio.CancelledError())
            self._schedule_pump()

    async def _execute(self, batch: Batch) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        results, error = None, None
        try:
            results = await self._call(batch)
        except asyncio.CancelledError:
            error = asyncio.CancelledError()
        except Exception as exc:  # delivered to every request of the batch
            error = exc
        end = loop.time()
        for req in batch.requests:
            if req.state is RequestState.RUNNING:
                record_call(req, self.kind, batch.method, batch.id, start, end, len(batch.requests))
        self.finish_nowait(batch.id, results, error)
        for req in batch.requests:
            if req.stream_queue is not None:
                req.stream_queue.put_nowait(STREAM_END)
        self._schedule_pump()

    async def _call(self, batch: Batch) -> list[Any]:
        if batch.merge_param is None:
            req = batch.requests[0]
            kwargs = dict(req.kwargs)
            name, _ = _resolve(type(self.engine), req.method)
            if self.config.pass_priority and "priority" not in kwargs and _accepts(type(self.engine), name, "priority"):
                kwargs["priority"] = batch.priority
            return [await call_engine(self.engine, req.method, req.args, kwargs, req.stream_queue)]
        return await self._call_merged(batch)

    async def _call_merged(self, batch: Batch) -> list[Any]:
        try:
            return await self._call_merged_once(batch)
        except Exception:
            if len(batch.requests) < 2:
                raise
        # Merged methods are pure reads (embed, query): one bad input must fail only its own request,
        # so the members run again one by one and each gets its own result or its own error.
        log.warning("%s.%s failed on %d merged requests; running them one by one to isolate the failure",
                       self.kind, batch.method, len(batch.requests))
        alone = await asyncio.gather(*(self._call_alone(r) for r in batch.requests), return_exceptions=True)
        return [_Failed(out) if isinstance(out, Exception) else out for out in alone]

    async def _call_alone(self, req: EngineRequest) -> Any:
        if req.state is not RequestState.RUNNING:
            return None  # cancelled meanwhile: its share is dropped anyway
        return await call_engine(self.engine, req.method, req.args, req.kwargs)

    async def _call_merged_once(self, batch: Batch) -> list[Any]:
        param = batch.merge_param
        bound = [self._bound(r) for r in batch.requests]
        merged_list = [x for b in bound for x in b[param]]
        head = batch.requests[0]
        name, _ = _resolve(type(self.engine), head.method)
        call = inspect.signature(getattr(self.engine, name)).bind(*head.args, **head.kwargs)
        call.arguments[param] = merged_list
        out = await call_engine(self.engine, batch.method, call.args, call.kwargs)
        if not isinstance(out, (list, tuple)) or len(out) != len(merged_list):
            raise RuntimeError(f"{self.kind}.{batch.method} returned {type(out).__name__} of length "
                               f"{len(out) if hasattr(out, '__len__') else '?'} for {len(merged_list)} merged items; "
                               f"merging needs one result per item (remove {batch.method!r} from SchedulerConfig.merge)")
        results, pos = [], 0
        for b in bound:
            n = len(b[param])
            results.append(list(out[pos:pos + n]))
            pos += n
        return results

    # ---- helpers --------------------------------------------------------------------
    def _bound(self, req: EngineRequest) -> dict[str, Any]:
        if req.bound is None:
            name, _ = _resolve(type(self.engine), req.method)
            sig = inspect.signature(getattr(self.engine, name))
            req.bound = dict(sig.bind(*req.args, **req.kwargs).arguments)
        return req.bound

    def _merge_key(self, req: EngineRequest) -> Hashable | None:
        param = self.config.merge.get(req.method)
        if param is None or req.stream_queue is not None:
            return None
        try:
            bound = self._bound(req)
            others = tuple(sorted((k, v) for k, v in bound.items() if k != param))
            hash(others)
        except (TypeError, ValueError):
            return None
        if any(bound.get(name) is not None for name in self._alone_when):
            return None
        return (req.method, others)

    def _gather(self, head: EngineRequest, order: list[EngineRequest], taken: set[int]) -> list[EngineRequest]:
        key = self._merge_key(head)
        members = [head]
        if key is None:
            return members
        items = head.items
        groups = {(head.query_id, head.split_group)} if head.split_group else set()
        for other in order:
            if other is head or other.seq in taken or items + other.items > self.config.max_batch_items:
                continue
            group = (other.query_id, other.split_group)
            if other.split_group and group in groups:
                continue
            if self._merge_key(other) != key:
                continue
            members.append(other)
            items += other.items
            if other.split_group:
                groups.add(group)
        return members


Dispatcher = EngineScheduler | DirectDispatcher
DispatcherFactory = Callable[[str, Any], Dispatcher]
