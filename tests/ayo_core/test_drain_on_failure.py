"""A graph marked ``drain_on_failure`` lets the work that does not need a failed node finish before the
failure is raised (as LangChain's sync ``RunnableParallel`` does); without the mark a failure cancels
everything at once. Scheduler tests on plain transform nodes (no engine)."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime import Expand, NodeFailed, Runtime


def sibling_graph(finished: list[str], drain: bool, optional_extra: bool = False) -> Graph:
    async def boom(ctx, x):
        raise ValueError("no documents")

    async def slow(ctx, x):
        await asyncio.sleep(0.05)
        finished.append("slow")
        return x

    async def then(ctx, x):  # a second step of the surviving branch: it runs too
        finished.append("then")
        return x

    async def join(ctx, a, b):
        finished.append("join")  # needs the failed node: never runs
        return a + b

    g = Graph("q", meta={"drain_on_failure": drain})
    g.input("x")
    g.add(Node("boom", Op.TRANSFORM, fn=boom, inputs={"x": "x"}))
    g.add(Node("slow", Op.TRANSFORM, fn=slow, inputs={"x": "x"}))
    g.add(Node("then", Op.TRANSFORM, fn=then, inputs={"x": "slow"}))
    g.add(Node("join", Op.AGGREGATE, fn=join, inputs={"a": "boom", "b": "then"}))
    if optional_extra:
        async def never_ends(ctx, x):
            await asyncio.sleep(3600)

        g.add(Node("extra", Op.TRANSFORM, fn=never_ends, inputs={"x": "x"}, meta={"optional": True}))
    g.output("join")
    return g


async def test_draining_runs_the_independent_branch_to_its_end():
    finished: list[str] = []
    with pytest.raises(NodeFailed, match="no documents") as info:
        await Runtime().run(sibling_graph(finished, drain=True), {"x": "q"})
    assert info.value.node == "boom"
    assert finished == ["slow", "then"]  # both steps of the other branch, not the join


async def test_without_the_mark_a_failure_cancels_at_once():
    finished: list[str] = []
    with pytest.raises(NodeFailed, match="no documents"):
        await Runtime().run(sibling_graph(finished, drain=False), {"x": "q"})
    await asyncio.sleep(0.1)
    assert finished == []


async def test_draining_cancels_optional_nodes_instead_of_waiting():
    finished: list[str] = []
    with pytest.raises(NodeFailed):
        await asyncio.wait_for(Runtime().run(sibling_graph(finished, drain=True, optional_extra=True), {"x": "q"}), 5)
    assert finished == ["slow", "then"]


def expanded_beside(plan, sibling) -> Graph:
    """``plan`` (a step that expands) and ``sibling`` side by side, draining; join needs both."""
    g = Graph("q", meta={"drain_on_failure": True})
    g.input("x")
    g.add(Node("plan", Op.TRANSFORM, fn=plan, inputs={"x": "x"}))
    g.add(Node(sibling.__name__, Op.TRANSFORM, fn=sibling, inputs={"x": "x"}))
    g.add(Node("join", Op.AGGREGATE, fn=lambda c, a, b: (a, b), inputs={"a": "plan", "b": sibling.__name__}))
    g.output("join")
    return g


async def test_a_failure_inside_an_expansion_does_not_hang_its_expanded_node():
    finished: list[str] = []

    async def slow(ctx, x):
        await asyncio.sleep(0.05)
        finished.append("slow")
        return x

    def plan(ctx, x):
        async def inner_boom(ctx, x):
            raise ValueError("inner")

        return Expand([Node("inner", Op.TRANSFORM, fn=inner_boom, inputs={"x": "x"})], "inner")

    with pytest.raises(NodeFailed, match="inner"):
        await asyncio.wait_for(Runtime().run(expanded_beside(plan, slow), {"x": "q"}), 5)
    assert finished == ["slow"]


def two_failing_steps(delays: tuple[float, float]) -> Graph:
    """Steps a and b (in the graph's order) fail after ``delays``; join needs both."""
    def fails(msg: str, delay: float):
        async def fn(ctx, x):
            await asyncio.sleep(delay)
            raise ValueError(msg)

        return fn

    g = Graph("q", meta={"drain_on_failure": True})
    g.input("x")
    g.add(Node("a", Op.TRANSFORM, fn=fails("a's error", delays[0]), inputs={"x": "x"}))
    g.add(Node("b", Op.TRANSFORM, fn=fails("b's error", delays[1]), inputs={"x": "x"}))
    g.add(Node("join", Op.AGGREGATE, fn=lambda c, a, b: (a, b), inputs={"a": "a", "b": "b"}))
    g.output("join")
    return g


@pytest.mark.parametrize("delays", [(0.0, 0.05), (0.05, 0.0)])
async def test_draining_raises_the_first_failing_step_in_order_not_in_time(delays: tuple[float, float]):
    """Stock's sync parallel raises its first failing branch's error, a batch its first failing input's,
    whichever failed first: the failure raised is the earliest node's in the graph (its lowering's order)."""
    with pytest.raises(NodeFailed, match="a's error") as info:
        await asyncio.wait_for(Runtime().run(two_failing_steps(delays), {"x": "q"}), 5)
    assert info.value.node == "a"


async def test_a_failure_an_expansion_grew_stands_where_its_expanded_node_stands():
    """The graph lists an expansion's nodes last; the first branch's expanded step still comes first."""
    def plan(ctx, x):
        async def inner(ctx, x):
            await asyncio.sleep(0.05)
            raise ValueError("the first branch's error")

        return Expand([Node("inner", Op.TRANSFORM, fn=inner, inputs={"x": "x"})], "inner")

    async def second(ctx, x):
        raise ValueError("the second branch's error")

    with pytest.raises(NodeFailed, match="the first branch's error"):
        await asyncio.wait_for(Runtime().run(expanded_beside(plan, second), {"x": "q"}), 5)
