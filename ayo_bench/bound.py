"""Ayo's schedule's use of its busiest engine, and what the rest of its latency is made of.

Not a lower bound: the lower bound that holds for any schedule is :mod:`ayo_bench.lower_bound`.
What this module measures is a *utilization* of the schedule Ayo ran: the busiest engine (on a
CPU machine the LLM server) was in flight with this query's requests for the union of their
intervals; ``efficiency = busy / latency`` is the share of the latency it was, and a schedule
that overlaps more requests shrinks the union while running faster, so it bounds nothing.

The time the busiest engine had none of the query's requests (the gap) is split, instant by
instant, into: time outside Ayo's graph (the call's own code, capture and lowering that run
before the graph, loop hops, event replay), time another engine worked while the busiest one
waited, time this query's requests sat queued at an engine, and the rest: nothing of the query
running (scheduling, Python between nodes). Ayo's overhead on the critical path is read from it.

Everything is intervals in one clock: ``time.monotonic()``, which is what asyncio's
``loop.time()`` (and so Ayo's trace) uses. The interval algebra (``merge``, ``length``,
``clip``, ``subtract``, ``clip_to``) is shared with other tools.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

Interval = tuple[float, float]


# ---- interval algebra ------------------------------------------------------------------
def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time; empty and reversed ones dropped."""
    out: list[list[float]] = []
    for lo, hi in sorted((a, b) for a, b in intervals if b > a):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def length(intervals: Iterable[Interval]) -> float:
    """Length of the union of ``intervals`` (overlaps counted once)."""
    return sum(hi - lo for lo, hi in merge(intervals))


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``intervals`` inside ``[lo, hi]``, merged."""
    return merge((max(a, lo), min(b, hi)) for a, b in intervals)


def subtract(base: Iterable[Interval], holes: Iterable[Interval]) -> list[Interval]:
    """``base`` minus ``holes`` (both may overlap themselves)."""
    out: list[Interval] = []
    cut = merge(holes)
    for lo, hi in merge(base):
        cur = lo
        for a, b in cut:
            if b <= cur or a >= hi:
                continue
            if a > cur:
                out.append((cur, a))
            cur = max(cur, b)
        if cur < hi:
            out.append((cur, hi))
    return out


# ---- one query -------------------------------------------------------------------------
@dataclass
class QueryWork:
    """What one query did, as intervals: the whole call, Ayo's graph inside it, engine work, queueing."""

    call: Interval
    graph: list[Interval] = field(default_factory=list)  # when Ayo's graphs ran (one per query of the call)
    engines: dict[str, list[Interval]] = field(default_factory=dict)
    queued: list[Interval] = field(default_factory=list)
    other_work: list[Interval] = field(default_factory=list)  # nodes off the engines (local Python nodes)
    # an optimized function's own code (ayo_core.caller_code), outside Ayo's hooks: stock runs it too
    caller_code: list[Interval] = field(default_factory=list)


@dataclass
class BoundReport:
    """The busiest engine's in-flight time in one call (a utilization, not a bound) and what the
    rest of the call is made of (seconds)."""

    latency_s: float
    busiest_engine: str
    busy_s: float
    efficiency: float
    gap_s: float
    outside_graph_s: float
    caller_code_s: float  # the part of outside_graph_s that was the optimized function's own code
    other_engine_s: float
    queued_s: float
    runtime_s: float
    busy_by_engine: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def busiest_engine_bound(work: QueryWork) -> BoundReport:
    """The busiest engine's in-flight time inside the call, its share of the latency, and the gap split by cause."""
    lo, hi = work.call
    latency = max(0.0, hi - lo)
    busy = {name: clip(iv, lo, hi) for name, iv in work.engines.items()}
    busy_by_engine = {name: length(iv) for name, iv in busy.items()}
    name = max(busy_by_engine, key=lambda n: busy_by_engine[n], default="")
    idle = subtract([(lo, hi)], busy.get(name, []))  # the busiest engine waits: the gap
    inside = clip_to(idle, work.graph)
    outside = subtract(idle, inside)
    others = [iv for n, ivs in busy.items() if n != name for iv in ivs] + list(work.other_work)
    other_engine = clip_to(inside, others)
    rest = subtract(inside, other_engine)
    queued = clip_to(rest, work.queued)
    runtime = subtract(rest, queued)
    busy_s = busy_by_engine.get(name, 0.0)
    return BoundReport(
        latency_s=latency, busiest_engine=name, busy_s=busy_s,
        efficiency=busy_s / latency if latency > 0 else float("nan"), gap_s=length(idle),
        outside_graph_s=length(outside), caller_code_s=length(clip_to(outside, work.caller_code)),
        other_engine_s=length(other_engine), queued_s=length(queued),
        runtime_s=length(runtime), busy_by_engine=busy_by_engine,
    )


def clip_to(base: Iterable[Interval], mask: Iterable[Interval]) -> list[Interval]:
    """The parts of ``base`` covered by ``mask`` (intersection)."""
    base = merge(base)
    return subtract(base, subtract(base, mask))


# ---- from an Ayo trace -----------------------------------------------------------------
def work_from_trace(trace: Any, call: Interval, llm_requests: list[dict[str, Any]] | None = None,
                    llm_engine: str = "llm server (recorded)") -> QueryWork:
    """A :class:`QueryWork` from Ayo's ``last_trace`` (engine calls, node spans) for one call.

    ``llm_requests`` (recorder rows inside the call) add the LLM server's own view, which
    also sees requests made outside Ayo's graph (a doc-QA function's own stock code).
    """
    return work_from_traces([] if trace is None else [trace], call, llm_requests, llm_engine)


def work_from_traces(traces: Iterable[Any], call: Interval, llm_requests: list[dict[str, Any]] | None = None,
                     llm_engine: str = "llm server (recorded)") -> QueryWork:
    """:func:`work_from_trace` for a call that ran several of Ayo's queries (a chat conversation's
    turns, an agent's steps: ``ayo_core.trace.collect_traces``): their engine calls, node spans
    and graph intervals together, and the sink's ``caller_code`` when ``traces`` is the
    ``collect_traces`` sink itself."""
    engines: dict[str, list[Interval]] = defaultdict(list)
    queued, other, graphs = [], [], []
    for trace in traces:
        for c in getattr(trace, "engine_calls", []) or []:
            engines[str(c.engine)].append((c.start, c.end))
    engine_nodes = set(engines)
    for trace in traces:
        for s in getattr(trace, "nodes", []) or []:
            if s.queued > 0:
                queued.append((s.start, s.start + s.queued))
            if str(s.engine) not in engine_nodes:
                other.append((s.start, s.end))
        if trace.end > trace.start:
            graphs.append((trace.start, trace.end))
    if llm_requests:
        # one server, two views: the trace's LLM calls are a subset of what the server was sent
        llm_kinds = [n for n in engines if n.lower().startswith("llm")]
        recorded = [(r["start"], r["end"]) for r in llm_requests]
        engines[llm_engine] = recorded + [iv for n in llm_kinds for iv in engines.pop(n)]
    return QueryWork(call=call, graph=merge(graphs), engines=dict(engines), queued=queued, other_work=other,
                     caller_code=list(getattr(traces, "caller_code", [])))
