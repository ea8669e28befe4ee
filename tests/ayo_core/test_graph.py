"""Graph IR: building, consumers kept in sync, lint, order, depth, critical path."""

from __future__ import annotations

import pytest

from ayo_core.graph import Graph, GraphError, Node, Op, Splitter, concat, contiguous_bounds, slice_inputs


def fn(ctx, **kw):
    return sum(kw.values()) if kw else 1


def diamond() -> Graph:
    g = Graph("d")
    g.input("x")
    g.add(Node("a", Op.TRANSFORM, fn=fn, inputs={"x": "x"}, cost=1.0))
    g.add(Node("b", Op.TRANSFORM, fn=fn, inputs={"x": "x"}, cost=3.0))
    g.add(Node("c", Op.AGGREGATE, fn=fn, inputs={"a": "a", "b": "b"}, cost=0.5))
    g.output("c")
    return g


def test_producers_consumers_and_lint():
    g = diamond()
    g.lint()
    assert g.producers("c") == {"a", "b"}
    assert g.consumers("x") == {"a", "b"}
    assert g.data_consumers("c") == {"output"}
    assert g.output_name() == "output"
    assert len(g) == 5 and "a" in g and g["a"].op is Op.TRANSFORM


def test_topo_depth_critical_path_slack():
    g = diamond()
    order = g.topo_order()
    assert order.index("x") < order.index("a") < order.index("c") < order.index("output")
    assert g.depths() == {"x": 0, "a": 1, "b": 1, "c": 2, "output": 3}
    length, path = g.critical_path()
    assert length == pytest.approx(3.5)
    assert path == ["x", "b", "c", "output"]
    slacks = g.slacks()
    assert slacks["b"] == pytest.approx(0.0) and slacks["a"] == pytest.approx(2.0)
    assert g.critical_path({"a": 10.0})[1] == ["x", "a", "c", "output"]


def test_after_edges_count_as_dependencies():
    g = diamond()
    g.replace(g["b"].replace(after={"a"}))
    assert g.producers("b") == {"x", "a"}
    assert "b" in g.consumers("a") and g.data_consumers("a") == {"c"}
    assert g.topo_order().index("a") < g.topo_order().index("b")
    g.lint()


def test_duplicate_name_rejected():
    g = diamond()
    with pytest.raises(GraphError, match="already used"):
        g.add(Node("a", Op.TRANSFORM, fn=fn))


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g.add(Node("z", Op.TRANSFORM, fn=fn, inputs={"v": "missing"})), "missing producer"),
    (lambda g: g.replace(g["a"].replace(after={"c"})), "cycle"),
    (lambda g: g.output("a", name="output2"), "several OUTPUT"),
    (lambda g: g.add(Node("nofn", Op.DECODE, inputs={"x": "x"})), "has no fn"),
    (lambda g: g.add(Node("pp", Op.TRANSFORM, fn=fn, inputs={"x": "x"}, meta={"per_part": "y"})), "per_part"),
    (lambda g: g.add(Node("sp", Op.EMBED, fn=fn, inputs={"x": "x"}, meta={"split": 3})), "Splitter"),
])
def test_lint_reports_broken_invariants(mutate, message):
    g = diamond()
    mutate(g)
    with pytest.raises(GraphError, match=message):
        g.lint()


def test_copy_shares_nothing_mutable():
    g = diamond()
    g.topo_order()
    h = g.copy("other")
    h.add(Node("d", Op.TRANSFORM, fn=fn, inputs={"c": "c"}))
    assert "d" not in g and g.consumers("c") == {"output"}
    assert h.consumers("c") == {"output", "d"} and h.query_id == "other"
    assert "d" not in g.topo_order()
    g.lint()
    h.lint()


def test_remove_keeps_consumers_in_sync():
    g = diamond()
    g.remove("output")
    assert g.consumers("c") == set()
    assert g.output_name() == "c"  # the single sink stands in for a missing OUTPUT node


def test_node_is_frozen_and_normalised():
    n = Node("n", "decode", fn=fn, after=["a"])
    assert n.op is Op.DECODE and n.after == frozenset({"a"})
    with pytest.raises(AttributeError):
        n.name = "m"
    assert n.with_meta(k=1).meta == {"k": 1} and n.meta == {}


def test_contiguous_splitter_slices_and_merges():
    s = Splitter.contiguous(["xs"])
    parts = s.split({"xs": list(range(10)), "q": "same"}, 3)
    assert [p["xs"] for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert all(p["q"] == "same" for p in parts)
    assert s.merge([p["xs"] for p in parts]) == list(range(10))
    assert contiguous_bounds(2, 2, 3) == (1, 2)
    assert slice_inputs({"xs": [1]}, ["xs"], 0, 2) == {"xs": []}
    assert concat([[1], [], [2, 3]]) == [1, 2, 3]


def test_format_and_signature():
    g = diamond()
    text = g.format()
    assert "c = aggregate[local](a=a, b=b)" in text
    assert g.signature() == diamond().signature()
