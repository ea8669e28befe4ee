"""A lower bound on one call's latency that holds for *any* schedule of its work.

    bound = max(critical path, busiest engine's work)

* **critical path**: the longest dependency path of the query's primitive graph (the executed
  graph the trace keeps, grown by any ``Expand``), each node at its zero-load service time: the
  sum of its requests' service times (:mod:`ayo_bench.service_model`) where the node issued one
  after the previous had ended, the longest of them where they overlapped. Engines are taken
  as unlimited and never busy: no schedule waits less. A per-part node whose parts start as its
  producer streams them (decode pipelining) runs each part once the producer could have decoded
  the text that defined it: the producer's span notes the text deltas it had received when it
  published each part (``NodeSpan.part_deltas``; a delta is at least one token), so at zero load
  part ``i`` exists no earlier than the producer's start plus its time to decode that many tokens
  (its request alone, less the rest of its decode); a part published when the producer ended, no
  earlier than its end; a part of a producer that notes nothing, no earlier than its start. A
  node without engine work (local Python) counts 0.
* **busiest engine's work**: the least time each engine must be busy to serve the call's
  required requests under any batching (``llm_engine_floor_s``, ``embed_engine_floor_s``), at
  zero load, not the union of Ayo's in-flight intervals (that is a utilization of Ayo's schedule).

Both hold for any schedule, so ``latency / bound >= 1`` for every run; how far above 1 is what
scheduling, Python, queueing and interference cost. A call that ran several of Ayo's queries (a
conversation's turns) chains them where one started after the other ended (the caller awaited
it), as it chains requests made outside Ayo's graph (a doc-QA function's own code). A query that
ran inside a node of another (a sub-question's query engine inside its sub-answer) is that node's
work: its critical path counts in the node's service.

A consumer whose value came from a speculative run (a synthesis started on a rerank's partial
output, :mod:`ayo_core.templates.speculation`) sends nothing itself: the run's requests are its work,
chained as they ran, starting no earlier than the node whose decode the run reads could have
written the lines the run read (the run's span notes, per part, the deltas through them).

A request to the search service (the apps' web-search stand-in, ``ayo_examples.search_service``,
which holds every reply for its declared latency) counts that latency in the node that made it, when
the service's log of the call is given.

Where it is loose: local nodes count 0 (no service model for Python: a node's own code could take
any time), as do searches when no log is given; the graph's expansions are ordered only
by their data edges (an expansion cannot start before the node that made it, which the bound
ignores); cached prompt tokens are those of the run (a schedule that shared more prefix would
prefill less). Where it leans on data: each LLM request's token counts come from the recorder's
row matched to the trace's engine call by time (the row lies inside the call); a call with no
row counts 0.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ayo_core.runtime.query import is_stream_consumer

from .service_model import LLMRequest, embed_engine_floor_s, llm_engine_floor_s, service_name

log = logging.getLogger("ayo.compare.bound")
CLOCK_SLACK_S = 0.005  # a recorder row lies inside its engine call, up to the two clocks' read order
MATCH_SLACK_S = 0.010  # concurrent branches end this close after their searches reply (graph's trace: 1-3 ms)


@dataclass
class Request:
    """One engine request of the call, as the bound sees it: when it was asked for, and its service."""

    engine: str
    issued: float
    end: float
    start: float | None = None  # when the engine began it (None: as issued)
    service_s: float = 0.0
    items: int = 1
    node: str = ""
    part: int | None = None  # the part of a per-part node that made it
    trace: int = -1  # index of the trace it belongs to; -1: outside Ayo's graph
    llm: LLMRequest | None = None
    required: bool = True


@dataclass
class LowerBound:
    """The bound of one call and its two parts (seconds)."""

    latency_s: float
    bound_s: float
    critical_path_s: float
    busiest_engine: str
    engine_work_s: dict[str, float]
    latency_over_bound: float
    service_model: str
    llm_requests: int = 0
    llm_requests_with_tokens: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- longest chains --------------------------------------------------------------------
def longest_chain(items: Sequence[tuple[float, float, float]]) -> float:
    """Longest sum of costs over ``(issued, end, cost)`` items each issued after the previous ended."""
    order = sorted(items, key=lambda x: x[1])
    best: list[float] = []
    for i, (issued, _, cost) in enumerate(order):
        before = [best[j] for j in range(i) if order[j][1] <= issued]
        best.append(cost + max(before, default=0.0))
    return max(best, default=0.0)


def requests_chain(requests: Sequence[Request]) -> float:
    """:func:`longest_chain` of requests at their zero-load service times."""
    return longest_chain([(r.issued, r.end, r.service_s) for r in requests])


# ---- requests of a call ----------------------------------------------------------------
def requests_from_traces(traces: Sequence[Any]) -> list[Request]:
    """Every engine call of the traces, issued when its node asked (start minus time queued)."""
    out = []
    for t, trace in enumerate(traces):
        graph = getattr(trace, "graph", None)
        for c in getattr(trace, "engine_calls", []) or []:
            name = str(getattr(c, "node", ""))
            node = graph.nodes.get(name) if graph is not None else None
            required = graph is None or (node is not None and not node.meta.get("optional"))
            out.append(Request(str(c.engine), c.start - float(getattr(c, "queued", 0.0)), c.end, start=c.start,
                               items=int(getattr(c, "items", 1)), node=name, part=getattr(c, "part", None),
                               trace=t, required=required))
    return out


def match_rows(requests: list[Request], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each LLM request the recorder row inside it (tightest first); return the rows left over."""
    llm = [r for r in requests if r.engine.lower().startswith("llm")]
    pairs = []
    for i, row in enumerate(rows):
        for k, req in enumerate(llm):
            lead, tail = row["start"] - (req.issued if req.start is None else req.start), req.end - row["end"]
            if lead >= -CLOCK_SLACK_S and tail >= -CLOCK_SLACK_S:
                pairs.append((abs(lead) + abs(tail), i, k))
    used_rows, used_reqs = set(), set()
    for _, i, k in sorted(pairs):
        if i in used_rows or k in used_reqs:
            continue
        used_rows.add(i)
        used_reqs.add(k)
        llm[k].llm = llm_request(rows[i])
    return [row for i, row in enumerate(rows) if i not in used_rows]


def llm_request(row: dict[str, Any]) -> LLMRequest | None:
    """The token counts of a recorder row (None when it has none)."""
    if row.get("prompt_tokens") is None and row.get("completion_tokens") is None:
        return None
    return LLMRequest(int(row.get("prompt_tokens") or 0), int(row.get("cached_tokens") or 0),
                      int(row.get("completion_tokens") or 0))


def price(requests: Iterable[Request], service: Any) -> None:
    """Each request's zero-load service time from ``service``."""
    for r in requests:
        if r.llm is not None:
            r.service_s = float(service.llm_alone_s(r.llm.prompt_tokens, r.llm.cached_tokens, r.llm.completion_tokens))
        elif r.engine == "embed":
            r.service_s = float(service.embed_batch_s(r.items, 0))
        elif not r.engine.lower().startswith("llm"):
            call_s = getattr(service, "call_s", None)
            seconds = call_s(r.engine, "query", r.items) if callable(call_s) else None
            r.service_s = float(seconds or 0.0)


# ---- per node --------------------------------------------------------------------------
def _spans(trace: Any) -> list[Any]:
    return [s for s in getattr(trace, "nodes", []) or [] if s.end >= s.start]


def _holds(span: Any, start: float, end: float) -> bool:
    return span.start - CLOCK_SLACK_S <= start and end <= span.end + CLOCK_SLACK_S


def _nearest_end(spans: Sequence[Any], end: float) -> Any:
    """Of ``spans``, the one that ended nearest ``end`` (the shortest on a tie), or None."""
    return min(spans, key=lambda s: (abs(s.end - end), s.end - s.start), default=None)


def _nearest_unused_end(spans: Sequence[Any], end: float, used: set[int]) -> Any:
    """Of ``spans``, the one that ended nearest ``end``; but when that one already holds a search and
    another, not yet given one, ended within :data:`MATCH_SLACK_S` as near, that other. Why: a
    fan-out's branches each wait on their own search and go on when it replies, so searches and
    branches end within a few milliseconds of each other and nearest-end alone can give one branch
    two searches and the longest none. The slack moves a search only between spans that each ended
    within 10 ms of its reply; a span that made two searches in a row ended a whole search after the
    first reply, and still gets the second."""
    best = _nearest_end(spans, end)
    if best is None or id(best) not in used:
        return best
    fresh = [s for s in spans if id(s) not in used and abs(s.end - end) <= abs(best.end - end) + MATCH_SLACK_S]
    return _nearest_end(fresh, end) or best


def _tightest_holder(spans: Sequence[Any], start: float, end: float) -> Any:
    """The shortest span that holds ``[start, end]`` (up to the clocks' slack), or None."""
    holders = [s for s in spans if _holds(s, start, end)]
    return min(holders, key=lambda s: s.end - s.start, default=None)


def assign_to_spans(trace_index: int, trace: Any, requests: list[Request], rows: list[dict[str, Any]],
                    service: Any) -> tuple[dict[int, list[Request]], list[Request], list[dict[str, Any]]]:
    """The requests each span made (by id of the span), the rows made into requests there, and the
    rows no span holds.

    An engine call goes to the span of its node (and part) that holds it most tightly; a leftover recorder
    row (a request made by the node's own code, not through Ayo's engines) to the shortest span
    that holds it.
    """
    spans = _spans(trace)
    by_span: dict[int, list[Request]] = defaultdict(list)
    for r in (r for r in requests if r.trace == trace_index):
        inside = [s for s in spans if s.node == r.node and (r.part is None or s.part == r.part)
                  and _holds(s, r.issued, r.end)]
        if inside:
            best = min(inside, key=lambda s: (s.end - r.end) + (r.issued - s.start))
            by_span[id(best)].append(r)
    inner, outside = [], []
    for row in rows:
        if (span := _tightest_holder(spans, row["start"], row["end"])) is not None:
            req = Request("llm", row["start"], row["end"], llm=llm_request(row), node=span.node, trace=trace_index)
            price([req], service)
            graph = getattr(trace, "graph", None)
            node = graph.nodes.get(span.node) if graph is not None else None
            req.required = graph is None or (node is not None and not node.meta.get("optional"))
            by_span[id(span)].append(req)
            inner.append(req)
        else:
            outside.append(row)
    return by_span, inner, outside


@dataclass(frozen=True)
class NodeServices:
    """Zero-load service per node (``whole``); per streamed consumer its parts' (``parts``); per
    producer that noted where it published its parts, each part's least time from the producer's
    start (``leads``, None: not known; parts past the list were published at the producer's end)."""

    whole: dict[str, float]
    parts: dict[str, dict[int, float]] = field(default_factory=dict)
    leads: dict[str, list[float | None]] = field(default_factory=dict)


def node_services(trace: Any, by_span: dict[int, list[Request]], service: Any) -> NodeServices:
    """Zero-load service per node: its span's requests chained; parts as the runtime runs them."""
    whole: dict[str, float] = {}
    parts: dict[str, dict[int, float]] = defaultdict(dict)
    graph = getattr(trace, "graph", None)
    for s in _spans(trace):
        cost = requests_chain(by_span.get(id(s), []))
        if getattr(s, "part", None) is None:
            whole[s.node] = max(whole.get(s.node, 0.0), cost)
        else:
            parts[s.node][s.part] = max(parts[s.node].get(s.part, 0.0), cost)
    streamed = {}
    for name, costs in parts.items():
        whole[name] = max(whole.get(name, 0.0), max(costs.values()))  # other per-part nodes start them all at once
        node = graph.nodes.get(name) if graph is not None else None
        if node is not None and is_stream_consumer(node):
            streamed[name] = costs
    leads = {s.node: part_leads(s, by_span.get(id(s), []), whole.get(s.node, 0.0), service)
             for s in _spans(trace) if getattr(s, "part", None) is None and getattr(s, "part_deltas", None) is not None}
    return NodeServices(whole, streamed, leads)


def part_leads(span: Any, requests: Sequence[Request], cost: float, service: Any) -> list[float | None]:
    """Each part the producer ``span`` published during its decode: the least time from its start to
    that part at zero load (:func:`decode_lead`). None where that is not known."""
    return [None if d is None else decode_lead(requests, cost, d, service) for d in span.part_deltas]


def decode_lead(requests: Sequence[Request], cost: float, deltas: int, service: Any) -> float | None:
    """The least time from a span's start to the first ``deltas`` text deltas of its decode, at zero
    load: its cost less what its one LLM request still had to decode then (the request alone to the
    end, less alone to that many tokens: a delta is at least one token). None: not one LLM request."""
    llm = [r.llm for r in requests if r.engine.lower().startswith("llm")]
    one = llm[0] if len(llm) == 1 else None
    if one is None:
        return None
    full = service.llm_alone_s(one.prompt_tokens, one.cached_tokens, one.completion_tokens)
    rest = full - service.llm_alone_s(one.prompt_tokens, one.cached_tokens, min(deltas, one.completion_tokens))
    return max(0.0, cost - rest)


def used_speculation(trace: Any, trace_index: int, requests: Sequence[Request],
                     by_span: dict[int, list[Request]], service: Any) -> dict[str, tuple[str, float]]:
    """``{consumer: (node, earliest end)}`` when the consumer's value came from its speculative run: the
    run (span ``{consumer}.speculative``) ended uncancelled and the consumer sent nothing itself. That
    run's requests (sent through ``node``'s engines, whose decode it reads) are the consumer's work; at
    zero load they take their chain, from no earlier than ``node``'s decode had written what the run
    read (:func:`speculation_lead`); the value is the least time from ``node``'s start to the run's end."""
    graph = getattr(trace, "graph", None)
    board = graph.meta.get("speculation") if graph is not None else None
    consumer = getattr(board, "consumer", None)
    if consumer is None:
        return {}
    mine = [r for r in requests if r.trace == trace_index]
    runs = [s for s in _spans(trace) if s.node == f"{consumer}.speculative" and s.status == "done"]
    if not runs or any(r.node == consumer for r in mine):
        return {}
    run, assigned = runs[-1], {id(r) for rs in by_span.values() for r in rs}
    inside = [r for r in mine if id(r) not in assigned and run.start - CLOCK_SLACK_S <= r.issued
              and r.end <= run.end + CLOCK_SLACK_S]
    if not inside:
        return {}
    reads = inside[0].node
    lead = speculation_lead(trace, reads, getattr(run, "read_deltas", None) or [], by_span, service)
    return {consumer: (reads, lead + requests_chain(inside))}


def speculation_lead(trace: Any, reads: str, read_deltas: Sequence[int], by_span: dict[int, list[Request]],
                     service: Any) -> float:
    """The least time from node ``reads``' start to the text a speculative run read: for each part of it
    (``read_deltas[part]`` deltas), that part's decode to so many deltas (:func:`decode_lead`)."""
    lead = 0.0
    for s in _spans(trace):
        part = s.part if s.part is not None else 0
        if s.node != reads or part >= len(read_deltas) or read_deltas[part] <= 0:
            continue
        requests = by_span.get(id(s), [])
        cost = requests_chain(requests)
        lead = max(lead, decode_lead(requests, cost, read_deltas[part], service) or 0.0)
    return lead


def graph_critical_path(graph: Any, services: NodeServices,
                        speculated: dict[str, tuple[str, float]] | None = None) -> float:
    """Longest path of ``services`` over ``graph``'s edges (optional nodes are not waited for); a
    streamed consumer as in the module doc; a consumer in ``speculated`` ends no earlier than its
    speculative run could (see :func:`used_speculation`)."""
    whole, finish = services.whole, {}
    for name in graph.topo_order():
        node = graph.nodes[name]
        deps = [d for d in node.deps if d in graph.nodes]
        if is_stream_consumer(node):
            finish[name] = _streamed_finish(graph, node, services, finish)
        else:
            finish[name] = max((finish[d] for d in deps), default=0.0) + whole.get(name, 0.0)
        reads, chain = (speculated or {}).get(name, ("", 0.0))
        if reads in graph.nodes:
            finish[name] = max(finish[name], _start(graph, reads, finish) + chain)
    return max((f for n, f in finish.items() if not graph.nodes[n].meta.get("optional")), default=0.0)


def _streamed_finish(graph: Any, node: Any, services: NodeServices, finish: dict[str, float]) -> float:
    """Earliest end of a streamed consumer: each part from when its producer could have published it."""
    source = node.inputs[node.meta["per_part"]]
    others = max((finish[d] for d in node.deps if d in graph.nodes and d != source), default=0.0)
    src_start, src_end = _start(graph, source, finish), finish.get(source, 0.0)
    leads = services.leads.get(source)
    end = src_end  # the consumer's value is whole once its producer has ended
    for i, cost in services.parts.get(node.name, {}).items():
        if leads is None or (i < len(leads) and leads[i] is None):
            ready = src_start
        else:
            ready = src_start + leads[i] if i < len(leads) else src_end
        end = max(end, max(ready, others) + cost)
    return end


def _start(graph: Any, name: str, finish: dict[str, float]) -> float:
    """Earliest start of ``name``: when its producers are all done."""
    return max((finish[d] for d in graph.nodes[name].deps if d in finish), default=0.0)


def place_searches(traces: Sequence[Any], searches: list[Request]) -> tuple[dict[int, list[tuple[Any, Request]]],
                                                                             list[Request]]:
    """Each search request to the span that made it, ``{trace index: [(span, request)]}``; the rest
    back. Of the spans of any trace that hold it, the one that ended nearest its reply (the service
    holds a reply for its declared latency and the node that waited goes on at once), the shortest
    on a tie. Not the shortest holder: concurrent branches that all began before the first search
    hold each other's searches, and the shortest would take them all. Concurrent searches whose
    replies and branches all end within :data:`MATCH_SLACK_S` go one to a branch (see
    :func:`_nearest_unused_end`)."""
    spans = [(t, s) for t, trace in enumerate(traces) for s in _spans(trace)]
    placed: dict[int, list[tuple[Any, Request]]] = defaultdict(list)
    left, used = [], set()
    for r in sorted(searches, key=lambda r: r.end):
        span = _nearest_unused_end([s for _, s in spans if _holds(s, r.issued, r.end)], r.end, used)
        if span is None:
            left.append(r)
            continue
        used.add(id(span))
        t = next(t for t, s in spans if s is span)
        r.node, r.trace = span.node, t
        placed[t].append((span, r))
    return placed, left


def place_nested_queries(trace_index: int, trace: Any, queries: list[tuple[float, float, float]],
                         by_span: dict[int, list[Request]]) -> list[tuple[float, float, float]]:
    """Each query ``(start, end, critical path)`` that ran inside a span of ``trace`` to the one of them
    that ended nearest it (the node that ran it went on at once; see :func:`place_searches`), as that
    span's work (its critical path at zero load); the rest back."""
    spans, left = _spans(trace), []
    for start, end, cp in queries:
        if (span := _nearest_end([s for s in spans if _holds(s, start, end)], end)) is not None:
            by_span[id(span)].append(Request("query", start, end, service_s=cp, node=span.node,
                                             part=span.part, trace=trace_index))
        else:
            left.append((start, end, cp))
    return left


def search_requests(searches: Sequence[dict[str, Any]] | None) -> list[Request]:
    """The search service's log (``{"start", "end", "latency_s"}``) as requests: each takes at least the
    service's declared latency, whatever the schedule (it holds every reply that long)."""
    return [Request("search", float(s["start"]), float(s["end"]), service_s=float(s["latency_s"]))
            for s in searches or []]


# ---- the call --------------------------------------------------------------------------
def call_lower_bound(traces: Sequence[Any], call: tuple[float, float], rows: Sequence[dict[str, Any]] | None,
                     service: Any, searches: Sequence[dict[str, Any]] | None = None) -> LowerBound:
    """The lower bound of one call: Ayo's ``traces`` of it, the recorder's ``rows`` inside it (may be
    None: no recorder), a service model (see :mod:`ayo_bench.service_model`) and the search service's
    log of the requests inside it (may be None: searches then count 0)."""
    requests = requests_from_traces(traces)
    left = match_rows(requests, list(rows or []))
    price(requests, service)
    top: list[tuple[float, float, float]] = []
    every = list(requests)
    searched, unplaced = place_searches(traces, search_requests(searches))
    nested: list[tuple[float, float, float]] = []  # queries done so far, not yet inside another's node
    # inner queries first: a query run inside another query's node (a sub-question's query engine in
    # its sub-answer) is that node's work, and the rows of its engines go to its own spans first
    for t in sorted(range(len(traces)), key=lambda i: traces[i].end - traces[i].start):
        trace = traces[t]
        by_span, inner, left = assign_to_spans(t, trace, requests, left, service)
        for span, search in searched.get(t, []):
            by_span[id(span)].append(search)
        nested = place_nested_queries(t, trace, nested, by_span)
        every += inner
        services = node_services(trace, by_span, service)
        graph = getattr(trace, "graph", None)
        speculated = used_speculation(trace, t, every, by_span, service)
        cp = graph_critical_path(graph, services, speculated) if graph is not None else \
            max(services.whole.values(), default=0.0)
        top.append((trace.start, trace.end, cp))
        nested.append((trace.start, trace.end, cp))
    outside = [Request("llm", row["start"], row["end"], llm=llm_request(row)) for row in left]
    price(outside, service)
    every += outside
    top += [(r.issued, r.end, r.service_s) for r in outside + unplaced]  # the call's own code made these
    critical = longest_chain(top)
    work = engine_work(every, service)
    busiest = max(work, key=lambda k: work[k], default="")
    bound = max(critical, work.get(busiest, 0.0))
    latency = max(0.0, call[1] - call[0])
    llm = [r for r in every if r.engine.lower().startswith("llm")]
    return LowerBound(latency_s=latency, bound_s=bound, critical_path_s=critical, busiest_engine=busiest,
                      engine_work_s=work, latency_over_bound=latency / bound if bound > 0 else float("nan"),
                      service_model=service_name(service), llm_requests=len(llm),
                      llm_requests_with_tokens=sum(r.llm is not None for r in llm))


def engine_work(requests: Sequence[Request], service: Any) -> dict[str, float]:
    """Each engine's least busy time for the call's required requests, batched in any way."""
    needed = [r for r in requests if r.required]
    llm = [r.llm for r in needed if r.engine.lower().startswith("llm") and r.llm is not None]
    out = {"llm": llm_engine_floor_s(service, llm)} if llm else {}
    texts = sum(r.items for r in needed if r.engine == "embed")
    if texts:
        out["embed"] = embed_engine_floor_s(service, texts)
    return out


def summarize_lower_bounds(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the pairs (rows with ``ayo_s`` and a ``lower_bound``) of the bound, its parts and
    Ayo's latency / bound; empty when no row has a bound above 0."""
    bounded = [r for r in rows if r.get("lower_bound") and r["lower_bound"]["bound_s"] > 0]
    if not bounded:
        return {}
    lbs = [r["lower_bound"] for r in bounded]
    engines = [b["busiest_engine"] for b in lbs]
    over = [r["ayo_s"] / b["bound_s"] for r, b in zip(bounded, lbs, strict=True)]
    return {
        "lower_bound_median_s": statistics.median(b["bound_s"] for b in lbs),
        "lower_bound_critical_path_median_s": statistics.median(b["critical_path_s"] for b in lbs),
        "lower_bound_engine": max(set(engines), key=engines.count),
        "lower_bound_engine_work_median_s": statistics.median(max(b["engine_work_s"].values(), default=0.0)
                                                              for b in lbs),
        "latency_over_bound_median": statistics.median(over), "latency_over_bound_min": min(over),
        "lower_bound_service_model": sorted({b["service_model"] for b in lbs}),
        "lower_bound_llm_requests_with_tokens": sum(b["llm_requests_with_tokens"] for b in lbs),
        "lower_bound_llm_requests": sum(b["llm_requests"] for b in lbs),
    }
