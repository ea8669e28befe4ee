"""Per-query execution traces.

Every executed primitive records a :class:`NodeSpan` (query, node, module, op,
engine, start, end, time queued at engines, the engine batches it joined) and
every engine call an :class:`EngineCall` (engine, method, batch id, start, end,
the requests merged into it). From a trace we export Chrome trace JSON (opens
in Perfetto / chrome://tracing), a stage breakdown, the critical-path lower
bound from measured durations, and Ayo's own overhead.

Times are the event loop's clock (``loop.time()``), so a virtual clock gives
virtual traces; overhead is real time (``time.perf_counter``).

An object's ``last_trace`` is its last query's. A call that makes several queries (a chat
engine made per conversation, an agent's turns, a workflow's steps) is read with
:func:`collect_traces`: every query started inside the block, whichever optimized object
ran it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ayo_core.graph import Graph

OVERHEAD_KINDS = ("capture", "build", "passes", "scheduling")

# The sink of the innermost collect_traces() block. A context variable: it follows the call into
# the tasks it starts and onto Ayo's loop (a coroutine handed to another loop's thread runs in a
# copy of the caller's context), and concurrent callers each see their own.
_SINK: ContextVar[TraceSink | None] = ContextVar("ayo_trace_sink", default=None)


class TraceSink(list):
    """The traces a :func:`collect_traces` block gathered (a list), and ``caller_code``: the
    intervals (``time.monotonic()``) in which an optimized function ran the user's own code
    outside Ayo's hooks (:mod:`ayo_core.caller_code`), which stock runs too."""

    def __init__(self) -> None:
        super().__init__()
        self.caller_code: list[tuple[float, float]] = []


def current_sink() -> TraceSink | None:
    """The innermost :func:`collect_traces` block's sink (None outside any)."""
    return _SINK.get()


@contextmanager
def collect_traces() -> Iterator[TraceSink]:
    """The traces of every query Ayo starts inside the block, in start order::

        with collect_traces() as traces:
            chat_engine.chat("...")          # any optimized object, sync or async, any number of queries
        print(sum(t.latency for t in traces))

    Blocks nest; a query lands in the innermost one. A trace is appended when its query starts,
    so it may still be running when read inside the block.
    """
    sink = TraceSink()
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def report_started(trace: Trace) -> None:
    """Hand a query's trace to the enclosing :func:`collect_traces` block, if any."""
    sink = _SINK.get()
    if sink is not None:
        sink.append(trace)


@dataclass
class NodeSpan:
    """One execution of a node (or of one part of a per-part node)."""

    query: str
    node: str
    module: str
    op: str
    engine: str
    start: float
    end: float = 0.0
    queued: float = 0.0
    batch_ids: list[int] = field(default_factory=list)
    part: int | None = None
    status: str = "done"
    # a node streaming its output's parts: per part it published during its decode, the text deltas
    # received by then (None: published by the node's own code); later parts were published at its end
    part_deltas: list[int | None] | None = None
    # a speculative run: per part of the producer whose decode it read, the text deltas through the
    # last line the run's guess read (the lower bound's: it starts no earlier than that text exists)
    read_deltas: list[int] | None = None

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass
class TaskSpan:
    """A background task a node started, owned by its query (:func:`ayo_core.runtime.owned.start_owned`)."""

    query: str
    node: str  # the node that started it
    name: str  # what it is ("search: <query>", "tool: <name>")
    start: float
    end: float = 0.0
    status: str = "running"  # done, failed, or cancelled (by its query's release, when still running)

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass
class EngineCall:
    """One request's share of an engine call (a merged batch has one per request)."""

    engine: str
    method: str
    batch_id: int
    start: float
    end: float
    query: str
    node: str
    items: int = 1
    batch_requests: int = 1
    queued: float = 0.0
    part: int | None = None  # the part of a per-part node that made it (its span's ``part``)


class Trace:
    """Everything one query did."""

    def __init__(self, query_id: str, start: float = 0.0):
        self.query_id = query_id
        self.start = start
        self.end = start
        self.nodes: list[NodeSpan] = []
        self.engine_calls: list[EngineCall] = []
        self.tasks: list[TaskSpan] = []  # background tasks its nodes started (owned: cancelled with it)
        self.overhead: dict[str, float] = dict.fromkeys(OVERHEAD_KINDS, 0.0)
        self.graph: Graph | None = None
        self.status = "running"
        self.error: str | None = None

    # ---- recording ------------------------------------------------------------------
    def add_overhead(self, kind: str, seconds: float) -> None:
        """Charge ``seconds`` of Ayo's own work to ``kind`` (capture, build, passes, scheduling)."""
        self.overhead[kind] = self.overhead.get(kind, 0.0) + seconds

    @contextmanager
    def measure(self, kind: str) -> Iterator[None]:
        """Context manager charging the real time spent inside to ``kind``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add_overhead(kind, time.perf_counter() - t0)

    # ---- analysis -------------------------------------------------------------------
    @property
    def latency(self) -> float:
        return self.end - self.start

    def spans_of(self, node: str) -> list[NodeSpan]:
        return [s for s in self.nodes if s.node == node]

    def stage_breakdown(self, by: str = "op") -> dict[str, dict[str, float]]:
        """Per op (or ``by="module"``/``"engine"``): summed busy time and wall time covered."""
        groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for s in self.nodes:
            groups[str(getattr(s, by))].append((s.start, s.end))
        return {k: {"busy": sum(e - b for b, e in iv), "wall": _union_length(iv), "count": len(iv)}
                for k, iv in sorted(groups.items())}

    def measured_durations(self) -> dict[str, float]:
        """Service time per node: span length minus engine queueing; parts of a node run in parallel."""
        whole: dict[str, float] = {}
        parts: dict[str, float] = defaultdict(float)
        for s in self.nodes:
            d = max(0.0, s.duration - s.queued)
            if s.part is None:
                whole[s.node] = max(whole.get(s.node, 0.0), d)
            else:
                parts[s.node] = max(parts[s.node], d)
        whole.update(parts)
        return whole

    def critical_path_bound(self, graph: Graph | None = None) -> float:
        """Latency with unlimited engines and zero queueing: the longest path of measured durations.

        Uses the executed graph (grown by any ``Expand``); a node that expanded
        finishes only when its expansion's output does. Pipelined streaming can
        overlap a consumer with its producer, so an optimized run may beat it.
        """
        graph = graph or self.graph
        if graph is None:
            return 0.0
        durations = self.measured_durations()
        expansions: dict[str, str] = graph.meta.get("expansions", {})
        finish: dict[str, float] = {}

        def deps(name: str) -> set[str]:
            # A consumer of an expanding node really waits for the expansion's output.
            out = set(graph.nodes[name].deps)
            return out | {expansions[d] for d in out if d in expansions}

        pending = list(graph.topo_order())
        while pending:  # repeat until stable: expansion outputs come late in topo order
            left = []
            for name in pending:
                ds = deps(name)
                if any(d in graph.nodes and d not in finish for d in ds):
                    left.append(name)
                    continue
                finish[name] = max((finish.get(d, 0.0) for d in ds), default=0.0) + durations.get(name, 0.0)
            if len(left) == len(pending):
                break
            pending = left
        return max(finish.values(), default=0.0)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest: latency, bound, breakdown, overhead, batches."""
        batches = {c.batch_id for c in self.engine_calls}
        return {
            "query": self.query_id,
            "status": self.status,
            "latency_s": self.latency,
            "critical_path_bound_s": self.critical_path_bound(),
            "stage_breakdown": self.stage_breakdown(),
            "overhead_s": dict(self.overhead),
            "nodes_executed": len(self.nodes),
            "engine_batches": len(batches),
            "owned_tasks": len(self.tasks),
        }

    # ---- export ---------------------------------------------------------------------
    def chrome_events(self, pid: int = 0) -> list[dict[str, Any]]:
        """Chrome trace "complete" events: one process per query, one row per node; engine rows too."""
        events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": pid,
                                         "args": {"name": f"query {self.query_id}"}}]
        for s in self.nodes:
            label = s.node if s.part is None else f"{s.node}[{s.part}]"
            events.append({"ph": "X", "name": label, "cat": s.op, "pid": pid, "tid": s.node,
                           "ts": s.start * 1e6, "dur": s.duration * 1e6,
                           "args": {"module": s.module, "engine": s.engine, "batches": s.batch_ids,
                                    "queued_s": s.queued, "status": s.status}})
        for c in self.engine_calls:
            events.append({"ph": "X", "name": f"{c.engine}.{c.method}", "cat": "engine", "pid": pid,
                           "tid": f"engine:{c.engine}", "ts": c.start * 1e6, "dur": (c.end - c.start) * 1e6,
                           "args": {"batch": c.batch_id, "node": c.node, "items": c.items,
                                    "batch_requests": c.batch_requests}})
        for t in self.tasks:
            events.append({"ph": "X", "name": t.name, "cat": "task", "pid": pid, "tid": f"tasks:{t.node}",
                           "ts": t.start * 1e6, "dur": t.duration * 1e6, "args": {"node": t.node, "status": t.status}})
        return events

    def to_chrome(self) -> dict[str, Any]:
        return chrome_trace([self])

    def save_chrome(self, path: str | Path) -> Path:
        return save_chrome_trace([self], path)

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "nodes": [asdict(s) for s in self.nodes],
                "engine_calls": [asdict(c) for c in self.engine_calls], "tasks": [asdict(t) for t in self.tasks]}


def chrome_trace(traces: Iterable[Trace]) -> dict[str, Any]:
    """One Chrome trace document for several queries (each its own process row)."""
    events: list[dict[str, Any]] = []
    for pid, trace in enumerate(traces):
        events.extend(trace.chrome_events(pid))
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def save_chrome_trace(traces: Iterable[Trace], path: str | Path) -> Path:
    """Write :func:`chrome_trace` to ``path`` (open it in https://ui.perfetto.dev)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(traces)))
    return path


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, cur_lo, cur_hi = 0.0, None, None
    for lo, hi in sorted(intervals):
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total
