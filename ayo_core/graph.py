"""The primitive dataflow graph: Ayo's IR.

The graph is data (like torch.fx's ``Graph`` or a dask graph): a fixed set of
primitive ops, nodes that name their producers, consumers kept in sync, and
``lint()`` to check the invariants. No scheduling logic lives here; passes
rewrite graphs, the runtime executes them.

A node's ``fn`` is ``async def fn(ctx, **inputs) -> value`` (a plain function is
run in a thread). ``inputs`` maps each keyword argument to the name of the node
whose value it receives. ``after`` holds ordering-only edges (the stock
pipeline's sequential order) that carry no value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Op(StrEnum):
    """The fixed set of primitive operations."""

    INPUT = "input"
    EMBED = "embed"
    INGEST = "ingest"
    SEARCH = "search"
    RERANK = "rerank"
    PREFILL = "prefill"
    PARTIAL_PREFILL = "partial_prefill"
    DECODE = "decode"
    AGGREGATE = "aggregate"
    TRANSFORM = "transform"
    TOOL_CALL = "tool_call"
    OPAQUE = "opaque"
    OUTPUT = "output"


class GraphError(ValueError):
    """A graph breaks an invariant; the message names the nodes and the fix."""


@dataclass(frozen=True)
class Splitter:
    """How stage decomposition splits a splittable node into ``k`` micro-batches.

    ``split(inputs, k)`` returns exactly ``k`` input dicts (some may hold empty
    slices); ``merge(values)`` re-joins the ``k`` results into the node's value.
    Slicing must be decided at run time from the data, never from a size fixed
    at build time, so a graph built for one shape stays correct for any data.

    ``kwargs``/``axis``/``elementwise`` describe the common *contiguous* case
    (built by :meth:`contiguous`): the listed list-valued kwargs are cut into
    contiguous slices ``i*n//k : (i+1)*n//k``. When a node's output has one
    item per input item (``elementwise``), a consumer split along the same
    ``axis`` can take micro-batch ``i`` straight from micro-batch ``i`` of its
    producer (embed -> ingest pipelines micro-batch to micro-batch).
    """

    split: Callable[[dict[str, Any], int], list[dict[str, Any]]]
    merge: Callable[[list[Any]], Any]
    kwargs: tuple[str, ...] = ()
    axis: str | None = None
    elementwise: bool = False
    empty: Callable[[], Any] | None = None

    @staticmethod
    def contiguous(
        kwargs: Sequence[str],
        *,
        merge: Callable[[list[Any]], Any] | None = None,
        axis: str | None = None,
        elementwise: bool = True,
        empty: Callable[[], Any] | None = list,
    ) -> Splitter:
        """Split the list kwargs ``kwargs`` into contiguous slices; merge by concatenation."""
        names = tuple(kwargs)

        def split(inputs: dict[str, Any], k: int) -> list[dict[str, Any]]:
            return [slice_inputs(inputs, names, i, k) for i in range(k)]

        return Splitter(split=split, merge=merge or concat, kwargs=names, axis=axis,
                        elementwise=elementwise, empty=empty)


def contiguous_bounds(n: int, i: int, k: int) -> tuple[int, int]:
    """Bounds of slice ``i`` of ``k`` over ``n`` items (the same ``n`` always gives the same cut)."""
    return (i * n) // k, ((i + 1) * n) // k


def slice_inputs(inputs: Mapping[str, Any], names: Iterable[str], i: int, k: int) -> dict[str, Any]:
    """Copy of ``inputs`` with each kwarg in ``names`` cut to contiguous slice ``i`` of ``k``."""
    out = dict(inputs)
    for name in names:
        if name in out and isinstance(out[name], (list, tuple)):
            seq = out[name]
            lo, hi = contiguous_bounds(len(seq), i, k)
            out[name] = seq[lo:hi]
    return out


def concat(values: list[Any]) -> list[Any]:
    """Merge micro-batch results that are lists by concatenation."""
    out: list[Any] = []
    for value in values:
        out.extend(value)
    return out


@dataclass(frozen=True)
class PrefixSpec:
    """Prefill splitting hint on a DECODE node.

    ``early_inputs`` are the decode's kwargs known before the rest (template,
    question, instructions). ``build(ctx, **early)`` is awaited as soon as
    those exist; it should prefill exactly a token prefix of the final request
    (for example ``ctx.llm.prefill(prompt=...)``) so the engine's prefix cache
    holds it when the full request arrives. Its result is never used.
    """

    early_inputs: tuple[str, ...]
    build: Callable[..., Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "early_inputs", tuple(self.early_inputs))


@dataclass(frozen=True, eq=False)
class Node:
    """One primitive. Frozen: passes make changed copies with :meth:`replace`.

    ``meta`` keys read by the passes and the runtime:
    ``split`` (:class:`Splitter`), ``size`` (item count known at build time),
    ``prefix`` (:class:`PrefixSpec`), ``parts`` (``parser(text) -> list``),
    ``per_part`` (the kwarg this node maps over), ``resources`` (frozenset of
    resource names a node touches, e.g. ``"vector:docs"``; absent = unknown),
    ``optional`` (the query need not wait for it), ``key`` (an INPUT's key in
    the ``inputs`` dict, default its name).
    """

    name: str
    op: Op
    fn: Callable[..., Any] | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    engine: str = "local"
    module: str = ""
    batchable: bool = False
    splittable: bool = False
    streamable: bool = False
    side_effect: bool = False
    cost: float = 0.0
    after: frozenset[str] = frozenset()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.op, Op):
            object.__setattr__(self, "op", Op(self.op))
        if not isinstance(self.after, frozenset):
            object.__setattr__(self, "after", frozenset(self.after))
        if not isinstance(self.inputs, dict):
            object.__setattr__(self, "inputs", dict(self.inputs))

    def replace(self, **changes: Any) -> Node:
        """A copy with ``changes`` applied (``meta`` given here replaces the whole dict)."""
        return dataclasses.replace(self, **changes)

    def with_meta(self, **changes: Any) -> Node:
        """A copy whose meta has ``changes`` merged in."""
        return dataclasses.replace(self, meta={**self.meta, **changes})

    @property
    def deps(self) -> set[str]:
        """Every node this one waits for: data producers and ``after`` edges."""
        return set(self.inputs.values()) | set(self.after)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op.value}, inputs={dict(self.inputs)}, after={sorted(self.after)})"


class Graph:
    """A per-query primitive graph. Nodes keep insertion order; consumers stay in sync."""

    def __init__(self, query_id: str = "q", nodes: Iterable[Node] = (), meta: Mapping[str, Any] | None = None):
        self.query_id = query_id
        self.nodes: dict[str, Node] = {}
        self.meta: dict[str, Any] = dict(meta or {})
        # name -> names that depend on it (data or after). Sets are replaced, never
        # mutated in place, so copies of a graph can share them safely.
        self._succ: dict[str, frozenset[str]] = {}
        self._analysis: dict[Hashable, Any] = {}
        for node in nodes:
            self.add(node)

    # ---- building -------------------------------------------------------------------
    def add(self, node: Node) -> Node:
        """Add ``node``; its producers may be added later (``lint()`` checks they exist)."""
        if node.name in self.nodes:
            raise GraphError(f"node name {node.name!r} is already used in graph {self.query_id!r}; "
                             "give every node a unique name (templates prefix theirs)")
        self.nodes[node.name] = node
        for dep in node.deps:
            self._succ[dep] = self._succ.get(dep, frozenset()) | {node.name}
        self._analysis = {}
        return node

    def remove(self, name: str) -> Node:
        """Remove a node; consumers that still name it are caught by ``lint()``."""
        node = self.nodes.pop(name)
        for dep in node.deps:
            self._succ[dep] = self._succ.get(dep, frozenset()) - {name}
        self._analysis = {}
        return node

    def replace(self, node: Node) -> Node:
        """Swap the node of the same name for ``node`` (edges follow the new node)."""
        self.remove(node.name)
        return self.add(node)

    def input(self, name: str, key: str | None = None, **kw: Any) -> str:
        """Add an INPUT node reading ``inputs[key or name]``; returns its name."""
        meta = {"key": key} if key else {}
        self.add(Node(name, Op.INPUT, meta=meta, **kw))
        return name

    def output(self, source: str, name: str = "output") -> str:
        """Add the OUTPUT node that makes ``source``'s value the graph's value."""
        self.add(Node(name, Op.OUTPUT, inputs={"value": source}))
        return name

    def copy(self, query_id: str | None = None) -> Graph:
        """A cheap copy sharing the (frozen) nodes; ``query_id`` renames the query."""
        g = Graph.__new__(Graph)
        g.query_id = self.query_id if query_id is None else query_id
        g.nodes = dict(self.nodes)
        g.meta = dict(self.meta)
        g._succ = dict(self._succ)
        g._analysis = self._analysis  # same shape, same analysis; invalidated on mutation
        return g

    def for_query(self, query_id: str) -> Graph:
        """The same graph for another query (what the shape cache hands out)."""
        return self.copy(query_id)

    # ---- queries --------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self.nodes

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def __iter__(self):
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def producers(self, name: str) -> set[str]:
        """Every node ``name`` waits for (data inputs and ``after`` edges)."""
        return self.nodes[name].deps

    def data_producers(self, name: str) -> set[str]:
        """The nodes whose values ``name`` receives."""
        return set(self.nodes[name].inputs.values())

    def consumers(self, name: str) -> set[str]:
        """Every node waiting for ``name`` (data or ``after``)."""
        return {c for c in self._succ.get(name, ()) if c in self.nodes}

    def data_consumers(self, name: str) -> set[str]:
        """The nodes receiving ``name``'s value."""
        return {c for c in self.consumers(name) if name in self.nodes[c].inputs.values()}

    def output_name(self) -> str:
        """The node whose value is the graph's value: the OUTPUT node, else the single sink."""
        cached = self._analysis.get("output")
        if cached is not None:
            return cached
        outs = [n.name for n in self.nodes.values() if n.op is Op.OUTPUT]
        if len(outs) > 1:
            raise GraphError(f"graph {self.query_id!r} has several OUTPUT nodes {outs}; keep exactly one")
        if not outs:
            outs = [n for n in self.nodes if not self.consumers(n)]
            if len(outs) != 1:
                raise GraphError(f"graph {self.query_id!r} has no OUTPUT node and {len(outs)} sinks {outs}; "
                                 "add one with graph.output(source)")
        self._analysis["output"] = outs[0]
        return outs[0]

    def topo_order(self) -> list[str]:
        """Node names in a topological order (stable: insertion order breaks ties)."""
        cached = self._analysis.get("topo")
        if cached is not None:
            return cached
        indeg = {n: sum(1 for d in node.deps if d in self.nodes) for n, node in self.nodes.items()}
        ready = [n for n in self.nodes if indeg[n] == 0]
        order: list[str] = []
        pos = {n: i for i, n in enumerate(self.nodes)}
        while ready:
            ready.sort(key=pos.__getitem__, reverse=True)
            n = ready.pop()
            order.append(n)
            for c in self._succ.get(n, ()):
                if c in indeg:
                    indeg[c] -= 1
                    if indeg[c] == 0:
                        ready.append(c)
        if len(order) != len(self.nodes):
            stuck = sorted(n for n in self.nodes if n not in set(order))
            raise GraphError(f"graph {self.query_id!r} has a cycle through {stuck}; "
                             "a node cannot (transitively) wait for itself")
        self._analysis["topo"] = order
        return order

    def depths(self) -> dict[str, int]:
        """Depth of every node: 0 for sources, else 1 + the deepest producer."""
        cached = self._analysis.get("depths")
        if cached is not None:
            return cached
        depth: dict[str, int] = {}
        for n in self.topo_order():
            deps = [depth[d] for d in self.nodes[n].deps if d in depth]
            depth[n] = 1 + max(deps) if deps else 0
        self._analysis["depths"] = depth
        return depth

    def critical_path(self, costs: Mapping[str, float] | None = None) -> tuple[float, list[str]]:
        """Longest path by cost (``costs`` overrides ``node.cost``): ``(seconds, [names])``."""
        finish, best = self.longest_paths(costs)
        if not finish:
            return 0.0, []
        end = max(reversed(finish), key=finish.__getitem__)  # ties: the latest node (the sink side)
        path = [end]
        while best[path[-1]] is not None:
            path.append(best[path[-1]])
        return finish[end], path[::-1]

    def longest_paths(self, costs: Mapping[str, float] | None = None) -> tuple[dict[str, float], dict[str, str | None]]:
        """Earliest finish time of every node with unlimited parallelism, and its critical predecessor."""
        finish: dict[str, float] = {}
        best: dict[str, str | None] = {}
        for n in self.topo_order():
            node = self.nodes[n]
            start, arg = 0.0, None
            for d in node.deps:
                if d in finish and finish[d] >= start:
                    start, arg = finish[d], d
            cost = node.cost if costs is None else costs.get(n, node.cost)
            finish[n] = start + cost
            best[n] = arg
        return finish, best

    def slacks(self, costs: Mapping[str, float] | None = None) -> dict[str, float]:
        """Slack of every node: how much later it could finish without delaying the graph."""
        finish, _ = self.longest_paths(costs)
        if not finish:
            return {}
        total = max(finish.values())
        latest: dict[str, float] = {}
        for n in reversed(self.topo_order()):
            succ = [latest[c] - (self.nodes[c].cost if costs is None else costs.get(c, self.nodes[c].cost))
                    for c in self.consumers(n)]
            latest[n] = min(succ) if succ else total
        return {n: max(0.0, latest[n] - finish[n]) for n in finish}

    # ---- invariants -----------------------------------------------------------------
    def lint(self) -> None:
        """Check the invariants; raise :class:`GraphError` listing every problem."""
        problems = []
        for name, node in self.nodes.items():
            problems.extend(_node_problems(self, name, node))
        for dep, succs in self._succ.items():
            for c in succs:
                if c in self.nodes and dep not in self.nodes[c].deps:
                    problems.append(f"consumer map out of sync: {c!r} listed under {dep!r}")
        for name, node in self.nodes.items():
            for dep in node.deps:
                if name not in self._succ.get(dep, ()):
                    problems.append(f"consumer map out of sync: {name!r} missing under {dep!r}")
        if not problems:
            try:
                self.topo_order()
                self.output_name()
            except GraphError as exc:
                problems.append(str(exc))
        if problems:
            raise GraphError(f"graph {self.query_id!r} fails lint:\n  - " + "\n  - ".join(problems))

    def signature(self) -> tuple:
        """A hashable description of the graph's shape (names, ops, edges), for caches and tests."""
        return tuple((n.name, n.op.value, tuple(sorted(n.inputs.items())), tuple(sorted(n.after)))
                     for n in self.nodes.values())

    def __repr__(self) -> str:
        return f"Graph({self.query_id!r}, {len(self.nodes)} nodes)"

    def format(self) -> str:
        """A readable listing, one node a line in topological order."""
        lines = [f"graph {self.query_id} ({len(self.nodes)} nodes)"]
        for n in self.topo_order():
            node = self.nodes[n]
            ins = ", ".join(f"{k}={v}" for k, v in node.inputs.items())
            after = f" after {sorted(node.after)}" if node.after else ""
            lines.append(f"  {n} = {node.op.value}[{node.engine}]({ins}){after}  # {node.module}")
        return "\n".join(lines)


def _node_problems(g: Graph, name: str, node: Node) -> list[str]:
    problems = []
    if name != node.name:
        problems.append(f"node stored under {name!r} is named {node.name!r}")
    for kw, src in node.inputs.items():
        if src not in g.nodes:
            problems.append(f"node {name!r} input {kw!r} names missing producer {src!r}; add it or fix the name")
    for src in node.after:
        if src not in g.nodes:
            problems.append(f"node {name!r} is ordered after missing node {src!r}")
    if node.op is Op.INPUT and node.inputs:
        problems.append(f"INPUT node {name!r} has inputs {dict(node.inputs)}; inputs come from run(inputs=...)")
    if node.op is Op.OUTPUT and len(node.inputs) != 1:
        problems.append(f"OUTPUT node {name!r} must have exactly one input, has {dict(node.inputs)}")
    if node.op not in (Op.INPUT, Op.OUTPUT) and node.fn is None:
        problems.append(f"node {name!r} ({node.op.value}) has no fn")
    per_part = node.meta.get("per_part")
    if per_part is not None and per_part not in node.inputs:
        problems.append(f"node {name!r} maps over kwarg {per_part!r} (meta per_part) that is not among its inputs")
    split = node.meta.get("split")
    if split is not None and not isinstance(split, Splitter):
        problems.append(f"node {name!r} meta['split'] must be a Splitter, got {type(split).__name__}")
    prefix = node.meta.get("prefix")
    if prefix is not None:
        missing = [kw for kw in prefix.early_inputs if kw not in node.inputs]
        if missing:
            problems.append(f"node {name!r} PrefixSpec names early inputs {missing} it does not have")
    return problems
