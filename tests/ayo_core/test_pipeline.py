"""``ayo_core.pipeline``: capture once, lower, optimize cached by shape key, run, errors, trace, explain."""

from __future__ import annotations

import pytest

from ayo_core.graph import Graph
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.runtime import QueryTimeout, Runtime
from ayo_core.runtime.fakes import fake_engines
from ayo_core.templates import Transform
from ayo_core.templates.examples import EXAMPLES, example_inputs, example_responder


class UserError(Exception):
    pass


def lower_one(plan: dict, call: object) -> Graph:
    """A one-node graph applying ``plan["fn"]``; ``call`` names the node (a per-call detail)."""
    plan["lowered"] += 1
    g = Graph()
    g.input("x")
    g.output(Transform(plan["fn"], "user", takes_ctx=False).build(g, f"apply_{call or 'x'}", {"value": "x"}))
    return g


def pipeline(fn, **kw) -> tuple[OptimizedPipeline, dict]:
    plan = {"fn": fn, "lowered": 0, "captured": 0}

    def capture() -> dict:
        plan["captured"] += 1
        return plan

    rt = Runtime(fake_engines("gpu", example_responder), inline_sync=True)
    return OptimizedPipeline(capture, lower_one, kw.pop("options", Options()), runtime=lambda: rt, **kw), plan


async def test_static_pipeline_captures_and_lowers_once_and_copies_per_query(vclock):
    p, plan = pipeline(lambda value: value + 1, static=True, query_prefix="t")
    assert plan == {**plan, "captured": 1, "lowered": 1} and p.template is not None
    assert [await p.run({"x": i}) for i in range(3)] == [1, 2, 3]
    assert plan["lowered"] == 1 and p.statistics()["cache_hits"] >= 3
    assert p.last_trace.query_id.startswith("t") and p.last_trace.status == "done"
    assert "capture" not in p.last_trace.overhead or p.last_trace.overhead["capture"] == 0.0


async def test_first_query_carries_the_capture_overhead(vclock):
    p, _ = pipeline(lambda value: value, static=True)
    await p.run({"x": 0})
    assert p.last_trace.overhead["capture"] == p.capture_s > 0


async def test_a_graph_built_for_explain_before_any_query_leaves_the_capture_to_the_first_query(vclock):
    p, _ = pipeline(lambda value: value, shape_key=lambda call: None)
    p.graph("x")  # what OptimizedChatEngine.explain() builds before a first turn
    await p.run({"x": 0}, call="x")
    assert p.last_trace.overhead["capture"] == p.capture_s > 0


async def test_shape_key_caches_per_shape_and_none_lowers_per_call(vclock):
    p, plan = pipeline(lambda value: value * 2, shape_key=lambda call: call)
    for call in ("a", "b", "a", "a"):
        assert await p.run({"x": 2}, call) == 4
    assert plan["lowered"] == 2 and p.statistics()["shapes"] == 2
    q, plan2 = pipeline(lambda value: value * 2)  # no key: every call lowered for itself
    for call in ("a", "a"):
        assert await q.run({"x": 1}, call) == 2
    assert plan2["lowered"] == 2 and q.statistics()["shapes"] == 0
    assert q.last_graph is not None and "overhead" in q.last_graph.meta


async def test_a_node_failure_comes_out_as_the_users_exception_with_its_cause(vclock):
    def fail(value):
        try:
            raise KeyError("inner")
        except KeyError as exc:
            raise UserError("boom") from exc

    p, _ = pipeline(fail, static=True)
    with pytest.raises(UserError, match="boom") as info:
        await p.run({"x": 1})
    assert isinstance(info.value.__cause__, KeyError)
    assert any("raised in Ayo node" in note for note in getattr(info.value, "__notes__", []))


async def test_timeout_and_passes_options(vclock):
    p, _ = pipeline(lambda value: value, options=Options(passes=False), static=True)
    assert p.template.meta.get("passes", []) == []
    graph = EXAMPLES["advanced_rag"]()
    rt = Runtime(fake_engines("gpu", example_responder), inline_sync=True)
    slow = OptimizedPipeline(lambda: graph, lambda g, call: g, Options(timeout=1e-6), runtime=lambda: rt, static=True)
    with pytest.raises(QueryTimeout):
        await slow.run(example_inputs())
    assert Options(passes=["prune"]).pass_list() == ["prune"] and Options().pass_list() is None


def test_explain_names_the_graph_and_trace(vclock):
    p, _ = pipeline(lambda value: value, static=True)
    text = str(p.explain("Ayo plan for test", modules=[("user", "Transform")]))
    assert "Ayo plan for test" in text and "user" in text
