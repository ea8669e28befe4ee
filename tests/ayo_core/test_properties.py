"""Property tests on random DAGs: lint holds and every pass (and all of them) preserves results.

A random graph mixes pure nodes, writers and readers of shared logs (side
effects on resources "a", "b" or unknown ones), splittable list nodes,
streaming producers with per-part consumers, and nodes that grow the graph.
The stock order is a chain of ``after`` edges. Results — the value of every
node and the order of writes per log — must equal the reference
interpreter's on the unoptimized graph.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ayo_core.graph import Graph, Node, Op, Splitter
from ayo_core.passes import PASSES, optimize_graph
from ayo_core.runtime import Expand, Runtime, reference_run
from ayo_core.runtime.clock import run_virtual

KINDS = ("pure", "writer", "reader", "list", "split", "stream", "per_part", "grow")
LISTY = {"list", "split", "stream", "per_part"}


@dataclass(frozen=True)
class Spec:
    kind: str
    inputs: tuple[int, ...]
    resource: str | None
    sleep: float
    size: int | None


def h(*values: object) -> int:
    return zlib.crc32(repr(values).encode()) % 1000


@st.composite
def dags(draw) -> tuple[list[Spec], list[int]]:
    n = draw(st.integers(2, 10))
    specs: list[Spec] = []
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        listy = [j for j in range(i) if specs[j].kind in LISTY]
        if kind in ("split", "per_part") and not listy:
            kind = "pure"
        first = (draw(st.sampled_from(listy)),) if kind in ("split", "per_part") else ()
        others = tuple(draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True))) if i else ()
        specs.append(Spec(kind, first + tuple(j for j in others if j not in first),
                          draw(st.sampled_from(["a", "b", None])), draw(st.sampled_from([0.0, 0.001, 0.01])),
                          draw(st.sampled_from([None, 2, 40]))))
    items = draw(st.lists(st.integers(0, 9), max_size=6))
    return specs, items


def build(specs: list[Spec], logs: dict[str, list]) -> Graph:
    g = Graph("prop")
    g.input("items")
    names = [f"n{i}" for i in range(len(specs))]
    for i, spec in enumerate(specs):
        g.add(make_node(names[i], spec, [names[j] for j in spec.inputs], logs,
                        after=frozenset({names[i - 1]} if i else ())))
    g.add(Node("all", Op.AGGREGATE, fn=lambda ctx, **kw: dict(sorted(kw.items())), inputs={n: n for n in names},
               after=frozenset({names[-1]})))
    g.output("all")
    return g


def make_node(name: str, spec: Spec, deps: list[str], logs: dict[str, list], after: frozenset) -> Node:
    inputs = {f"i{k}": d for k, d in enumerate(deps)}
    touched = ["a", "b"] if spec.resource is None else [spec.resource]
    meta = {} if spec.resource is None else {"resources": frozenset({spec.resource})}

    async def pause():
        if spec.sleep:
            await asyncio.sleep(spec.sleep)

    if spec.kind == "pure":
        async def fn(ctx, **kw):
            await pause()
            return h(name, sorted(kw.items()))
        return Node(name, Op.TRANSFORM, fn=fn, inputs=inputs, after=after, meta={"resources": frozenset()})
    if spec.kind == "writer":
        async def fn(ctx, **kw):
            await pause()
            value = h(name, sorted(kw.items()))
            for r in touched:
                logs[r].append((name, value))
            return value
        return Node(name, Op.TOOL_CALL, fn=fn, inputs=inputs, after=after, side_effect=True, meta=meta)
    if spec.kind == "reader":
        async def fn(ctx, **kw):
            await pause()
            return h(name, [list(logs[r]) for r in touched], sorted(kw.items()))
        return Node(name, Op.SEARCH, fn=fn, inputs=inputs, after=after, meta=meta)
    if spec.kind == "list":
        def fn(ctx, items, **kw):
            return [x + h(name, sorted(kw.items())) for x in items]
        return Node(name, Op.TRANSFORM, fn=fn, inputs={**inputs, "items": "items"}, after=after,
                    meta={"resources": frozenset()})
    if spec.kind == "split":
        async def fn(ctx, i0, **kw):
            await pause()
            return [x * 3 + h(name, sorted(kw.items())) for x in i0]
        size = {} if spec.size is None else {"size": spec.size}
        return Node(name, Op.EMBED, fn=fn, inputs=inputs, after=after, batchable=True, splittable=True,
                    meta={"split": Splitter.contiguous(["i0"], axis="items"), "resources": frozenset(), **size})
    if spec.kind == "stream":
        async def fn(ctx, items, **kw):
            out = []
            for x in items:
                await pause()
                out.append(x + 1)
                ctx.emit(x + 1)
            return out
        return Node(name, Op.DECODE, fn=fn, inputs={**inputs, "items": "items"}, after=after, streamable=True,
                    meta={"resources": frozenset()})
    if spec.kind == "per_part":
        async def fn(ctx, i0, **kw):
            await pause()
            return h(name, i0, sorted(kw.items()))
        return Node(name, Op.TRANSFORM, fn=fn, inputs=inputs, after=after,
                    meta={"per_part": "i0", "resources": frozenset()})

    def grow(ctx, **kw):
        a = Node(f"{name}.a", Op.TRANSFORM, fn=lambda c, **v: h(name, "a", sorted(v.items())),
                 inputs=dict(ctx.node.inputs))
        b = Node(f"{name}.b", Op.AGGREGATE, fn=lambda c, a: a + 1, inputs={"a": a.name})
        return Expand([a, b], b.name)
    return Node(name, Op.TRANSFORM, fn=grow, inputs=inputs, after=after, meta={"resources": frozenset()})


def run_both(specs, items, passes) -> tuple:
    async def main():
        logs_ref: dict[str, list] = {"a": [], "b": []}
        graph = build(specs, logs_ref)
        graph.lint()
        expected, _ = await reference_run(graph, {"items": items})
        logs_opt: dict[str, list] = {"a": [], "b": []}
        optimized = optimize_graph(build(specs, logs_opt), passes, debug=True)
        value, _ = await Runtime(inline_sync=True).run(optimized, {"items": items})
        return (expected, logs_ref), (value, logs_opt)
    return run_virtual(main)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(dags())
def test_all_passes_preserve_results(dag):
    specs, items = dag
    ref, opt = run_both(specs, items, None)
    assert opt == ref


@SETTINGS
@given(dags(), st.sampled_from(list(PASSES)))
def test_each_pass_preserves_results_and_lints(dag, name):
    specs, items = dag
    graph = build(specs, {"a": [], "b": []})
    out, changed = PASSES[name](graph)
    out.lint()
    if not changed:
        assert out.signature() == graph.signature()
    ref, opt = run_both(specs, items, [name])
    assert opt == ref


@SETTINGS
@given(dags())
def test_runtime_without_passes_matches_reference(dag):
    specs, items = dag
    ref, opt = run_both(specs, items, [])
    assert opt == ref
