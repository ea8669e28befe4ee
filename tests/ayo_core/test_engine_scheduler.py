"""Engine schedulers: plans as values, merging, limits, states, policies by name and their ordering."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime import (
    EngineRequest,
    Engines,
    EngineScheduler,
    QueueFull,
    RequestState,
    Runtime,
    SchedulerConfig,
    get_policy,
    reference_run,
)
from ayo_core.runtime.errors import IllegalTransition
from ayo_core.runtime.fakes import FakeEmbedding, FakeLLM, LatencyModel, fake_engines
from ayo_core.runtime.states import NodeState, node_transition, request_transition
from ayo_core.templates.examples import advanced_rag_graph, example_inputs, example_responder, naive_rag_graph


def req(method="aembed", args=(["a"],), **kw) -> EngineRequest:
    return EngineRequest("embed", method, args, {}, **kw)


def test_unknown_policy_lists_valid_ones():
    with pytest.raises(ValueError, match="fifo, depth, critical_path"):
        get_policy("shortest")
    with pytest.raises(ValueError, match="valid policies"):
        Runtime(policy="nope")


def test_step_returns_a_plan_and_merges_compatible_requests():
    s = EngineScheduler("embed", FakeEmbedding(), "fifo")
    reqs = [req(args=([f"t{i}", "x"],), query_id=f"q{i}") for i in range(3)]
    for r in reqs:
        s.submit_nowait(r)
    plan = s.step_nowait()
    assert len(plan.batches) == 1 and plan.waiting == 0 and plan.running_batches == 1
    batch = plan.batches[0]
    assert batch.requests == tuple(reqs) and batch.merge_param == "texts"
    assert all(r.state is RequestState.RUNNING for r in reqs) and reqs[0].items == 2
    assert s.step_nowait().batches == ()  # max_inflight=1 for embed: nothing more until it finishes
    s.finish_nowait(batch.id, [[1], [2], [3]])
    assert [r.state for r in reqs] == [RequestState.FINISHED] * 3
    stats = s.statistics()
    assert (stats.submitted, stats.finished, stats.batches, stats.merged_requests) == (3, 3, 1, 2)


def test_a_request_asking_for_its_own_shape_is_never_merged():
    """The embedding engine's ``batch_size`` asks for stock's exact vectors (one encode of that shape):
    concurrent queries' requests with it run one engine call each, those without it still merge."""
    class ShapedFake(FakeEmbedding):  # a fake engine (scheduler unit test) whose aembed takes batch_size
        ALONE_WHEN = ("batch_size",)  # as the local EmbeddingEngine declares

        async def aembed(self, texts: list[str], batch_size: int | None = None) -> list[list[float]]:
            return await super().aembed(texts)

    s = EngineScheduler("embed", ShapedFake(), "fifo")
    exact = [EngineRequest("embed", "aembed", ([f"q{i}"],), {"batch_size": 10}, query_id=f"q{i}") for i in range(3)]
    loose = [req(args=([f"t{i}"],), query_id=f"l{i}") for i in range(2)]
    for r in [*exact, *loose]:
        s.submit_nowait(r)
    sizes = []
    while s.statistics().finished < 5:
        plan = s.step_nowait()
        for batch in plan.batches:
            sizes.append(len(batch.requests))
            s.finish_nowait(batch.id, [[0.0]] * sum(len(r.args[0]) for r in batch.requests))
    assert sizes == [1, 1, 1, 2]
    ShapedFake.ALONE_WHEN = ()  # an engine that declares nothing (a remote embedding server's): merged
    s = EngineScheduler("embed", ShapedFake(), "fifo")
    for r in exact:
        s.submit_nowait(EngineRequest("embed", "aembed", r.args, r.kwargs, query_id=r.query_id))
    assert [len(b.requests) for b in s.step_nowait().batches] == [3]


def test_micro_batches_of_one_split_node_are_not_re_merged():
    s = EngineScheduler("embed", FakeEmbedding(), "fifo", SchedulerConfig(max_inflight=4, merge={"aembed": "texts"}))
    parts = [req(query_id="q", split_group="index.embed") for _ in range(3)]
    other = req(query_id="q2", split_group="index.embed")
    for r in [*parts, other]:
        s.submit_nowait(r)
    plan = s.step_nowait()
    assert [len(b.requests) for b in plan.batches] == [2, 1, 1]
    assert plan.batches[0].requests == (parts[0], other)


def test_max_batch_items_and_bounded_queue():
    s = EngineScheduler("embed", FakeEmbedding(), "fifo",
                        SchedulerConfig(max_inflight=8, max_batch_items=3, max_queue=3, merge={"aembed": "texts"}))
    for _ in range(3):
        s.submit_nowait(req(args=(["a", "b"],)))
    with pytest.raises(QueueFull, match="queue is full"):
        s.submit_nowait(req())
    plan = s.step_nowait()
    assert [sum(r.items for r in b.requests) for b in plan.batches] == [2, 2, 2]


def test_state_machines_reject_illegal_transitions():
    assert request_transition(RequestState.WAITING, RequestState.RUNNING) is RequestState.RUNNING
    with pytest.raises(IllegalTransition):
        request_transition(RequestState.FINISHED, RequestState.RUNNING)
    with pytest.raises(IllegalTransition):
        node_transition(NodeState.DONE, NodeState.RUNNING)
    assert list(RequestState) == sorted(RequestState)


def test_cancel_waiting_request_dequeues_it():
    s = EngineScheduler("llm", FakeLLM(), "fifo", SchedulerConfig(max_inflight=1))
    a, b = req("complete", ("x",)), req("complete", ("y",))
    s.submit_nowait(a)
    s.submit_nowait(b)
    s.step_nowait()
    s.cancel_nowait(b)
    assert b.state is RequestState.CANCELLED and s.statistics().waiting == 0


@pytest.mark.parametrize("policy, field, values, expected", [
    ("fifo", "seq", None, [0, 1, 2, 3]),
    ("depth", "depth", [3, 0, 2, 1], [1, 3, 2, 0]),
    ("critical_path", "slack", [0.5, 0.0, 2.0, 0.1], [1, 3, 0, 2]),
])
def test_policy_ordering_property(policy, field, values, expected):
    s = EngineScheduler("llm", FakeLLM(), policy, SchedulerConfig(max_inflight=1))
    reqs = []
    for i in range(4):
        r = req("complete", (f"p{i}",), query_id=f"q{i}")
        if values is not None:
            setattr(r, field, values[i])
        reqs.append(r)
        s.submit_nowait(r)
    order = []
    for _ in range(4):
        (batch,) = s.step_nowait().batches
        order.append(reqs.index(batch.requests[0]))
        s.finish_nowait(batch.id, ["ok"])
    assert order == expected


def test_policies_derive_engine_priorities():
    r = req("complete", ("p",), depth=3, slack=0.25)
    assert get_policy("fifo").priority(r) == 0
    assert get_policy("depth").priority(r) == 3
    assert get_policy("critical_path").priority(r) == 250


async def test_priority_is_passed_to_engines_that_take_it(vclock):
    llm = FakeLLM()
    rt = Runtime(Engines(llm=llm, embed=FakeEmbedding()), policy="depth")

    async def call(ctx, x):
        return (await ctx.llm.complete(x, max_tokens=2)).text

    g = Graph("p")
    g.input("x")
    g.add(Node("a", Op.TRANSFORM, fn=lambda c, x: x, inputs={"x": "x"}))
    g.add(Node("d", Op.DECODE, fn=call, inputs={"x": "a"}, engine="llm"))
    g.output("d")
    await rt.run(g, {"x": "hi"})
    assert llm.calls[0].priority == 2  # depth of d


async def concurrent_queries(policy: str, n: int = 4):
    rt = Runtime(fake_engines("gpu", example_responder), policy=policy, inline_sync=True)
    jobs = [(advanced_rag_graph(f"q{i}", n_chunks=16), example_inputs(f"question {i}", n_chunks=16)) for i in range(n)]
    jobs += [(naive_rag_graph(f"n{i}"), example_inputs(f"other {i}", n_chunks=16)) for i in range(n)]
    return rt, jobs, await rt.run_many(jobs)


@pytest.mark.parametrize("policy", ["fifo", "depth", "critical_path"])
async def test_each_policy_gives_reference_results_under_concurrency(vclock, policy):
    from ayo_core.passes import optimize_graph

    rt, jobs, results = await concurrent_queries(policy)
    for (graph, inputs), result in zip(jobs, results, strict=True):
        # every query indexes its own documents into a fresh store in the reference run
        expected, _ = await reference_run(graph, inputs, fake_engines("gpu", example_responder), inline_sync=True)
        assert not isinstance(result, BaseException), result
        if graph.query_id.startswith("n"):
            continue  # naive queries share the "docs" collection with the others at run time
        del expected
    # same queries, each alone on fresh engines, optimized: identical answers to the reference
    for graph, inputs in jobs[:2]:
        expected, _ = await reference_run(graph, inputs, fake_engines("gpu", example_responder), inline_sync=True)
        value, _ = await Runtime(fake_engines("gpu", example_responder), policy=policy, inline_sync=True).run(
            optimize_graph(graph), inputs)
        assert value == expected
    stats = rt.statistics()
    assert stats["embed"].merged_requests > 0  # embed calls of different queries shared engine calls


async def test_embed_requests_from_different_queries_share_a_call(vclock):
    emb = FakeEmbedding(LatencyModel(fixed=0.01))
    rt = Runtime(Engines(embed=emb))

    async def embed(ctx, x):
        return (await ctx.embed.aembed([x]))[0]

    def graph(q):
        g = Graph(q)
        g.input("x")
        g.add(Node("e", Op.EMBED, fn=embed, inputs={"x": "x"}, engine="embed"))
        g.output("e")
        return g

    results = await asyncio.gather(*(rt.run(graph(f"q{i}"), {"x": f"text {i}"}) for i in range(5)))
    assert [v for v, _ in results] == [emb.embed([f"text {i}"])[0] for i in range(5)]
    assert [n for n, _, _ in emb.calls] == [5]  # requests arriving together share one engine call
    assert len({t.engine_calls[0].batch_id for _, t in results}) == 1
    assert all(t.engine_calls[0].batch_requests == 5 for _, t in results)


async def test_fake_llm_serves_waiting_requests_by_priority(vclock):
    llm = FakeLLM(LatencyModel(per_token=0.01), max_concurrency=1)
    order = []

    async def call(p, prio):
        await llm.complete(p, max_tokens=1, priority=prio)
        order.append(p)

    await asyncio.gather(call("first", 5), call("low", 9), call("high", 0), call("mid", 4))
    assert order == ["first", "high", "mid", "low"]


async def test_critical_path_policy_favours_the_critical_branch(vclock):
    """Two branches compete for one LLM slot; the long branch is on the critical path."""
    llm = FakeLLM(LatencyModel(per_token=0.01), max_concurrency=1)

    async def call(ctx, x, n):
        return (await ctx.llm.complete(x, max_tokens=n)).text

    def graph():
        g = Graph("cp")
        g.input("x")
        g.add(Node("short", Op.DECODE, fn=lambda c, x: call(c, x, 2), inputs={"x": "x"}, engine="llm", cost=0.02))
        g.add(Node("long", Op.DECODE, fn=lambda c, x: call(c, x, 50), inputs={"x": "x"}, engine="llm", cost=0.5))
        g.add(Node("tail", Op.DECODE, fn=lambda c, y: call(c, y, 50), inputs={"y": "long"}, engine="llm", cost=0.5))
        g.add(Node("j", Op.AGGREGATE, fn=lambda c, a, b: (a, b), inputs={"a": "short", "b": "tail"}))
        g.output("j")
        return g

    latency = {}
    for policy in ("fifo", "critical_path"):
        llm.calls.clear()
        rt = Runtime(Engines(llm=llm), policy=policy, configs={"llm": SchedulerConfig(max_inflight=1)},
                     inline_sync=True)
        _, trace = await rt.run(graph(), {"x": "go"})
        latency[policy] = trace.latency
        first = min(("short", "long"), key=lambda n: trace.spans_of(n)[0].end)
        assert first == ("short" if policy == "fifo" else "long")
    assert latency["critical_path"] <= latency["fifo"] + 1e-9


class _PoisonedFake(FakeEmbedding):
    """Fake engine (scheduler unit test): a call whose texts contain "POISON" raises."""

    async def aembed(self, texts, **kw):
        if any("POISON" in t for t in texts):
            raise RuntimeError(f"bad input among {len(texts)} texts")
        return await super().aembed(texts, **kw)


async def test_a_failing_merged_call_fails_only_the_request_that_caused_it(vclock):
    emb = _PoisonedFake(LatencyModel(fixed=0.01))
    s = EngineScheduler("embed", emb, "fifo")
    texts = [["a", "b"], ["POISON c"], ["d"]]
    futs = [asyncio.ensure_future(s.submit(req(args=(t,), query_id=f"q{i}"))) for i, t in enumerate(texts)]
    out = await asyncio.gather(*futs, return_exceptions=True)
    assert out[0] == emb.embed(["a", "b"]) and out[2] == emb.embed(["d"])
    assert isinstance(out[1], RuntimeError) and "among 1 texts" in str(out[1])  # its own call's error
    stats = s.statistics()
    assert (stats.merged_requests, stats.finished, stats.failed) == (2, 2, 1)


async def test_a_batch_cancelled_before_its_call_started_frees_its_slot(vclock):
    """Every request of a batch cancelled in the loop iteration its call task was created in: the task
    never runs, yet the batch must leave ``running`` (embed has one slot: a leak would hang it)."""
    emb = FakeEmbedding(LatencyModel(fixed=0.01))
    s = EngineScheduler("embed", emb, "fifo")
    callers = [asyncio.ensure_future(s.submit(req(args=([t],), query_id=f"q{i}"))) for i, t in enumerate("ab")]
    await asyncio.sleep(0)  # the callers submit; the pump is scheduled, not run yet
    assert s._pump_scheduled and not s._tasks
    for c in callers:  # their cancellation runs after the pump made the task, before the task's first step
        c.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    await asyncio.sleep(0.1)
    stats = s.statistics()
    assert (stats.running_requests, stats.running_batches, stats.cancelled) == (0, 0, 2)
    assert await asyncio.wait_for(s.submit(req(args=(["c"],), query_id="q3")), 5) == emb.embed(["c"])
