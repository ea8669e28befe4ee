"""The core speculation (``ayo_core.templates.speculation``): a consumer started on a stable guess from
the producer's partial output, used only when the final input has the same key."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from ayo_core.graph import Graph
from ayo_core.templates.speculation import Speculation, SpeculationBoard, SpeculationHooks, attach_speculation
from ayo_core.trace import Trace


def guess(state: Any, finished: list[str]) -> list[str] | None:
    """The words of the finished lines so far, once there are at least ``state`` of them."""
    words = [w for text in finished for w in text.split()]
    return words[:state] if len(words) >= state else None


def make_board(ran: list, kept: list) -> SpeculationBoard:
    async def run(ctx: Any, state: Any, words: list[str]) -> str:
        ran.append(list(words))
        await asyncio.sleep(0.01)
        return "+".join(words)

    async def keep(value: str) -> str:
        kept.append(value)
        return value.upper()

    return SpeculationBoard(SpeculationHooks(guess=guess, key=tuple, run=run, keep=keep), "synth", "synthesizer")


def ctx_for(query_id: str) -> Any:
    return SimpleNamespace(query_id=query_id, node=SimpleNamespace(engine="llm"), trace=Trace(query_id))


async def test_a_stable_guess_starts_once_and_a_matching_final_input_uses_it() -> None:
    ran, kept = [], []
    board = make_board(ran, kept)
    parts = [["p0"], ["p1"]]
    spec = board.open("q1", parts, state=2)
    ctx = ctx_for("q1")
    cb0, cb1 = spec.stream_cb(ctx, parts[0]), spec.stream_cb(ctx, parts[1])
    cb0("a b\n")  # guess (a, b): stable once
    cb1("partial")  # no newline: nothing new
    cb1(" c\n")  # guess still (a, b): stable twice -> starts
    await asyncio.sleep(0)
    assert ran == [["a", "b"]] and spec.starts == 1
    used, value = await board.take(board.pop("q1", cancel=False), ["a", "b"])
    assert used and value == "A+B" and kept == ["a+b"] and (board.hits, board.misses) == (1, 0)
    assert [s.node for s in ctx.trace.nodes] == ["synth.speculative"]
    # what the run read, per part: the deltas through its last finished line (the lower bound's)
    assert ctx.trace.nodes[0].read_deltas == [1, 2]


async def test_a_different_final_input_cancels_the_run_and_counts_a_miss() -> None:
    ran, kept = [], []
    board = make_board(ran, kept)
    spec = board.open("q2", [["p"]], state=1)
    spec.stream_cb(ctx_for("q2"), spec.parts[0])("x\ny\n")
    spec.on_delta(0, "\n")
    await asyncio.sleep(0)
    task = spec.task
    assert ran == [["x"]] and task is not None
    used, value = await board.take(spec, ["z"])
    assert not used and value is None and kept == [] and (board.hits, board.misses) == (0, 1)
    await asyncio.sleep(0)
    assert task.cancelled()


async def test_no_guess_no_start_and_no_miss() -> None:
    board = make_board([], [])
    spec = board.open("q3", [["p"]], state=5)
    spec.stream_cb(ctx_for("q3"), spec.parts[0])("one two\n")
    assert spec.task is None
    assert await board.take(spec, ["one"]) == (False, None) and board.misses == 0
    assert await board.take(None, ["one"]) == (False, None)


async def test_a_changed_guess_restarts_at_most_max_starts_times() -> None:
    starts: list[Any] = []

    async def start(ctx: Any, g: Any) -> Any:
        starts.append(g)
        await asyncio.sleep(1)

    spec = Speculation([["p"]], lambda finished: finished[0].split()[-1:] or None, tuple, start, max_starts=2,
                       stable=1)
    spec.ctx = object()
    for line in ("a\n", "b\n", "c\n"):
        spec.on_delta(0, line)
    await asyncio.sleep(0)
    assert spec.starts == 2 and spec.key == ("b",)  # "c" came after the last allowed start
    assert starts == [["b"]]  # the run on "a" was cancelled (replaced) before it began
    spec.cancel()


def test_attach_records_the_optimization() -> None:
    g = Graph("s")
    board = make_board([], [])
    attach_speculation(g, board, producer="rerank.merge")
    assert g.meta["speculation"] is board
    assert g.meta["optimizations"][0]["name"] == "speculation" and g.meta["optimizations"][0]["node"] == "synth"


async def test_a_speculative_run_started_in_a_node_is_owned_by_its_query() -> None:
    """Started inside a running node, the run is that query's task: in its trace, and cancelled when
    the query ends without taking it (nothing outlives the query)."""
    from ayo_core.graph import Node, Op
    from ayo_core.runtime import Runtime

    async def run(ctx: Any, state: Any, words: list[str]) -> str:
        await asyncio.sleep(3600)
        return "never"

    async def keep(value: str) -> str:
        return value

    board = SpeculationBoard(SpeculationHooks(guess=guess, key=tuple, run=run, keep=keep), "synth", "synthesizer")

    async def produce(ctx: Any, x: str) -> str:
        parts = [["p0"]]
        spec = board.open(ctx.query_id, parts, state=1)
        cb = spec.stream_cb(ctx, parts[0])
        cb("a\n")
        cb("b\n")  # the guess (a,) is stable twice: the run starts
        await asyncio.sleep(0)
        return x

    g = Graph("q")
    g.input("x")
    g.add(Node("produce", Op.TRANSFORM, fn=produce, inputs={"x": "x"}))
    g.output("produce")
    _, trace = await Runtime().run(g, {"x": "q"})
    assert [(t.node, t.name, t.status) for t in trace.tasks] == [("produce", "speculation #1", "cancelled")]
