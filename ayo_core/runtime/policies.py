"""Engine-scheduler policies, swappable by name (like dask's ``named_schedulers``).

A policy orders an engine's waiting requests (``key``: smaller runs first) and
derives the ``priority`` handed to engines that take one (vLLM with
``--scheduling-policy priority``: lower value is served first). Requests carry
the application view: query id, node, depth in the query's graph, slack on
the query's critical path, and when the query started.

- ``fifo``: arrival order; every priority 0 (the engine's own order).
- ``depth``: the paper's topology-aware batching: requests from shallower
  nodes first (upstream work unblocks the most downstream work), so requests
  of the same depth from different queries meet in one batch; then older
  queries first.
- ``critical_path``: least slack first (a node on its query's critical path
  has slack 0), then older queries first; slack comes from estimated costs
  refined by measured durations (:class:`CostModel`).
- ``program``: least attained service per *query* first (the program-level
  scheduling of workflow-aware LLM schedulers), then least slack, so a short
  query is not stuck behind a long one under load (:class:`ProgramPolicy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ayo_core.graph import Graph, Node, Op

if TYPE_CHECKING:
    from ayo_core.runtime.engine_scheduler import EngineRequest


class Policy(Protocol):
    name: str

    def key(self, req: EngineRequest) -> tuple: ...

    def priority(self, req: EngineRequest) -> int: ...


class FifoPolicy:
    name = "fifo"

    def key(self, req: EngineRequest) -> tuple:
        return (req.seq,)

    def priority(self, req: EngineRequest) -> int:
        return 0


class DepthPolicy:
    name = "depth"

    def key(self, req: EngineRequest) -> tuple:
        return (req.depth, req.query_start, req.seq)

    def priority(self, req: EngineRequest) -> int:
        return req.depth


class CriticalPathPolicy:
    name = "critical_path"

    def key(self, req: EngineRequest) -> tuple:
        return (round(req.slack, 6), req.query_start, req.seq)

    def priority(self, req: EngineRequest) -> int:
        return int(req.slack * 1000)  # milliseconds of slack: vLLM wants an int


# Slack weighs a tenth of attained service: service received decides, the critical path breaks ties.
SLACK_WEIGHT = 0.1


def attained_service(req: EngineRequest) -> float:
    """Engine seconds the request's query has received so far (from its trace).

    Summed incrementally: a trace only grows, so the sum is cached on the trace with the
    number of calls it covers (the policy ranks every waiting request at every step).
    """
    trace = req.trace
    if trace is None:
        return 0.0
    calls = trace.engine_calls
    done, total = getattr(trace, "_ayo_attained", (0, 0.0))
    if done > len(calls):
        done, total = 0, 0.0
    for c in calls[done:]:
        total += c.end - c.start
    trace._ayo_attained = (len(calls), total)  # type: ignore[attr-defined]  # our own cache on our own Trace
    return total


class ProgramPolicy:
    """``program``: least attained service per *query* first, then least critical-path slack.

    A query that has already received much engine time (a long agent loop, a tree summary)
    yields to queries that received little, so short queries finish first under load
    without starving anyone forever (a waiting query attains nothing, a running one does).
    """

    name = "program"

    def key(self, req: EngineRequest) -> tuple:
        return (round(attained_service(req), 3), round(req.slack, 6), req.query_start, req.seq)

    def priority(self, req: EngineRequest) -> int:
        return int(1000 * (attained_service(req) + SLACK_WEIGHT * req.slack))  # ms: vLLM wants an int


POLICIES: dict[str, Any] = {"fifo": FifoPolicy, "depth": DepthPolicy, "critical_path": CriticalPathPolicy,
                            "program": ProgramPolicy}


def get_policy(policy: str | Policy) -> Policy:
    """The policy named ``policy`` (or ``policy`` itself if it is already one)."""
    if not isinstance(policy, str):
        return policy
    try:
        return POLICIES[policy]()
    except KeyError:
        raise ValueError(f"unknown scheduling policy {policy!r}; valid policies: {', '.join(POLICIES)}") from None


# The slack (ms) range mapped below the server's default priority 0 by NeverBelowDefault.
PRIORITY_SPAN = 60_000


class NeverBelowDefault:
    """A named policy whose engine priorities never rank Ayo's requests behind foreign traffic.

    vLLM serves lower ``priority`` first and every client that sets none sends 0. The core
    policies map slack (or depth) to priorities >= 0, so on a server shared with other
    clients a request with any slack waits for all their requests: we measured a query
    expansion starved for 40 s behind another app's load. Shifting by ``PRIORITY_SPAN``
    keeps the policy's order among Ayo's requests (critical path first) while nothing of
    ours is worse than the default; background work with more slack than the span sits
    at the default. Every shared runtime (:mod:`ayo_core.runtime.shared`) uses it.
    """

    def __init__(self, policy: str | Policy) -> None:
        self.base = get_policy(policy)
        self.name = self.base.name

    def key(self, req: EngineRequest) -> tuple:
        return self.base.key(req)

    def priority(self, req: EngineRequest) -> int:
        return min(0, int(self.base.priority(req)) - PRIORITY_SPAN)


# Rough seconds per op when neither the node nor measurements give a cost: only the
# ratios matter (they rank slack), and measurements replace them after one query.
DEFAULT_OP_COST = {
    Op.DECODE: 0.5, Op.PREFILL: 0.1, Op.PARTIAL_PREFILL: 0.05, Op.EMBED: 0.02, Op.INGEST: 0.01,
    Op.SEARCH: 0.01, Op.RERANK: 0.05, Op.TOOL_CALL: 0.05, Op.OPAQUE: 0.1,
}


class CostModel:
    """Per-node cost estimates: ``node.cost`` or an op default, replaced by measured durations (EWMA).

    Keyed by node name, which is stable across queries built from the same templates.
    """

    def __init__(self, alpha: float = 0.3):
        self.alpha = alpha
        self.measured: dict[str, float] = {}

    def observe(self, node: str, seconds: float) -> None:
        old = self.measured.get(node)
        self.measured[node] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds

    def estimate(self, node: Node) -> float:
        if node.name in self.measured:
            return self.measured[node.name]
        if node.cost:
            return node.cost
        return DEFAULT_OP_COST.get(node.op, 0.001)

    def costs(self, graph: Graph) -> dict[str, float]:
        return {n.name: self.estimate(n) for n in graph.nodes.values()}

    def analyse(self, graph: Graph) -> tuple[Mapping[str, int], Mapping[str, float]]:
        """Depth and slack of every node of ``graph`` under the current estimates.

        A node that only warms a cache for another (``meta["warms"]``, e.g. a
        partial prefill) is useful only if it finishes before that node starts:
        its slack is measured against that start, not against the graph's end.
        """
        costs = self.costs(graph)
        slacks = graph.slacks(costs)
        warms = [(n.name, n.meta["warms"]) for n in graph.nodes.values() if n.meta.get("warms") in graph.nodes]
        if warms:
            finish, _ = graph.longest_paths(costs)
            for hint, target in warms:
                slacks[hint] = max(0.0, slacks[target] + finish[target] - costs[target] - finish[hint])
        return graph.depths(), slacks
