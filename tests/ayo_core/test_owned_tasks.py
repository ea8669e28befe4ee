"""Background tasks a node starts with ``start_owned`` belong to its query: listed in its trace,
cancelled when it ends (done, failed or cancelled) if still running; outside a query they are plain
tasks. Scheduler tests on plain transform nodes (no engine)."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime import NodeFailed, Runtime
from ayo_core.runtime.owned import start_owned


def starter_graph(started: list[asyncio.Future], awaited: bool, fail: bool = False, hang: bool = False) -> Graph:
    """``start`` starts a short and a never-ending owned task; ``use`` awaits the short one (if ``awaited``)."""
    async def short() -> str:
        await asyncio.sleep(0.01)
        return "searched"

    async def start(ctx, x):
        started.append(start_owned(short(), "search: short"))
        started.append(start_owned(asyncio.sleep(3600), "search: forever"))
        return x

    async def use(ctx, x):
        if fail:
            raise ValueError("the step after failed")
        if hang:
            await asyncio.sleep(3600)
        return (await started[0]) if awaited else x

    g = Graph("q")
    g.input("x")
    g.add(Node("start", Op.TRANSFORM, fn=start, inputs={"x": "x"}))
    g.add(Node("use", Op.TRANSFORM, fn=use, inputs={"x": "start"}))
    g.output("use")
    return g


async def test_owned_tasks_are_in_the_trace_and_cancelled_when_the_query_ends():
    started: list[asyncio.Future] = []
    value, trace = await Runtime().run(starter_graph(started, awaited=True), {"x": "q"})
    assert value == "searched"
    short, forever = started
    assert short.result() == "searched" and forever.cancelled()  # nothing outlives the query
    assert [(t.node, t.name, t.status) for t in trace.tasks] == [
        ("start", "search: short", "done"), ("start", "search: forever", "cancelled")]
    assert all(t.end >= t.start for t in trace.tasks)
    assert trace.summary()["owned_tasks"] == 2
    assert [e["name"] for e in trace.chrome_events() if e.get("cat") == "task"] == ["search: short", "search: forever"]


async def test_a_failed_query_cancels_its_owned_tasks():
    started: list[asyncio.Future] = []
    with pytest.raises(NodeFailed, match="the step after failed"):
        await Runtime().run(starter_graph(started, awaited=False, fail=True), {"x": "q"})
    assert started[1].cancelled()


async def test_a_cancelled_query_cancels_its_owned_tasks():
    started: list[asyncio.Future] = []
    g = starter_graph(started, awaited=False, hang=True)
    run = asyncio.ensure_future(Runtime().run(g, {"x": "q"}))
    while len(started) < 2:
        await asyncio.sleep(0.005)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert started[1].cancelled()


async def test_outside_a_query_it_is_a_plain_task():
    task = start_owned(asyncio.sleep(0, result="plain"), "nobody's")
    assert await task == "plain"


async def test_each_query_owns_only_its_own_tasks():
    first: list[asyncio.Future] = []
    second: list[asyncio.Future] = []
    rt = Runtime()
    (_, t1), (_, t2) = await asyncio.gather(rt.run(starter_graph(first, awaited=True), {"x": "a"}),
                                            rt.run(starter_graph(second, awaited=True), {"x": "b"}))
    assert len(t1.tasks) == len(t2.tasks) == 2
    assert {t.query for t in t1.tasks} == {t1.query_id} != {t.query for t in t2.tasks}
