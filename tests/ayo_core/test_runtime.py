"""Reference interpreter and graph scheduler: results, streaming, growth, failures, timeouts, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.graph import Graph, Node, Op
from ayo_core.passes import optimize_graph
from ayo_core.runtime import (
    AyoError,
    Engines,
    Expand,
    MissingEngine,
    NodeFailed,
    QueryTimeout,
    Runtime,
    reference_run,
)
from ayo_core.runtime.fakes import FakeLLM, LatencyModel, fake_engines
from ayo_core.templates.examples import EXAMPLES, example_inputs, example_responder


def engines() -> Engines:
    return fake_engines("gpu", example_responder)


def assert_engines_idle(rt: Runtime) -> None:
    for kind, stats in rt.statistics().items():
        assert stats.waiting == 0 and stats.running_requests == 0 and stats.running_batches == 0, (kind, stats)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
async def test_runtime_matches_reference_on_examples(vclock, name):
    inputs = example_inputs(n_chunks=48 if name == "advanced_rag" else 16)
    graph = EXAMPLES[name]()
    expected, ref_trace = await reference_run(graph, inputs, engines(), inline_sync=True)
    rt = Runtime(engines(), inline_sync=True)
    for g in (graph, optimize_graph(graph)):
        value, trace = await rt.run(g, inputs)
        assert value == expected
        assert trace.status == "done" and trace.latency <= ref_trace.latency + 1e-9
    assert_engines_idle(rt)


async def test_reference_is_sequential(vclock):
    graph = EXAMPLES["advanced_rag"]()
    _, trace = await reference_run(graph, example_inputs(), engines(), inline_sync=True)
    spans = sorted(trace.nodes, key=lambda s: s.start)
    for a, b in zip(spans, spans[1:], strict=False):
        assert a.end <= b.start + 1e-12, (a, b)


def streaming_graph(parse_calls: list | None = None) -> Graph:
    async def gen(ctx, q):
        result = await ctx.llm.complete(q, max_tokens=6, stream_cb=ctx.stream_cb)
        return result.text

    async def per(ctx, part, q):
        await asyncio.sleep(0.001)
        return f"{q}:{part.upper()}"

    g = Graph("s")
    g.input("q")
    g.add(Node("d", Op.DECODE, fn=gen, inputs={"q": "q"}, engine="llm", streamable=True,
               meta={"parts": str.split}))
    g.add(Node("p", Op.TRANSFORM, fn=per, inputs={"part": "d", "q": "q"}, meta={"per_part": "part"}))
    g.output("p")
    return g


async def test_pipelined_consumer_runs_per_part_while_decoding(vclock):
    graph = streaming_graph()
    expected, _ = await reference_run(graph, {"q": "hello"}, engines())
    optimized = optimize_graph(graph, ["decode_pipelining"])
    assert optimized["p"].meta["pipelined"] is True
    value, trace = await Runtime(engines()).run(optimized, {"q": "hello"})
    assert value == expected and len(value) == 6
    decode = trace.spans_of("d")[0]
    parts = sorted((s for s in trace.spans_of("p")), key=lambda s: s.part)
    assert [s.part for s in parts] == list(range(6))
    assert parts[0].start < decode.end  # the first part was consumed while decoding went on
    assert parts[-1].start >= decode.end - 1e-9  # the last part is only final at the end


async def test_unpipelined_per_part_waits_for_producer(vclock):
    value, trace = await Runtime(engines()).run(streaming_graph(), {"q": "hello"})
    decode = trace.spans_of("d")[0]
    assert all(s.start >= decode.end for s in trace.spans_of("p"))
    assert len(value) == 6


async def test_stream_reconciles_parts_that_change_at_the_end(vclock):
    # a parser that revises an earlier part once the text is final: the consumer must recompute it
    def parser(text):
        parts = text.split()
        return [p + "!" for p in parts] if len(parts) >= 6 else parts

    graph = streaming_graph()
    graph.replace(graph["d"].with_meta(parts=parser))
    expected, _ = await reference_run(graph, {"q": "x"}, engines())
    value, _ = await Runtime(engines()).run(optimize_graph(graph), {"q": "x"})
    assert value == expected and all(v.endswith("!") for v in value)


def growing_graph(n_key: str = "n") -> Graph:
    def plan(ctx, n):
        nodes = [Node(f"leaf{i}", Op.TRANSFORM, fn=lambda c, n, i=i: i * n, inputs={"n": "n"}) for i in range(n)]
        nodes.append(Node("join", Op.AGGREGATE, fn=lambda c, **kw: sorted(kw.values()),
                          inputs={f"v{i}": f"leaf{i}" for i in range(n)}))
        return Expand(nodes, "join")

    g = Graph("grow")
    g.input("n", key=n_key)
    g.add(Node("plan", Op.TRANSFORM, fn=plan, inputs={"n": "n"}))
    g.add(Node("after_plan", Op.TRANSFORM, fn=lambda c, xs: sum(xs), inputs={"xs": "plan"}))
    g.output("after_plan")
    return g


@pytest.mark.parametrize("n", [1, 3, 7])
async def test_expand_grows_the_graph(n):
    expected, ref_trace = await reference_run(growing_graph(), {"n": n})
    value, trace = await Runtime().run(growing_graph(), {"n": n})
    assert value == expected == sum(i * n for i in range(n))
    assert {f"leaf{i}" for i in range(n)} <= set(trace.graph.nodes)
    assert trace.graph.meta["expansions"] == {"plan": "join"}
    assert "join" in trace.graph["after_plan"].after
    trace.graph.lint()


async def test_expand_cannot_depend_on_the_expanding_node():
    g = Graph("bad")
    g.input("x")
    g.add(Node("e", Op.TRANSFORM, fn=lambda c, x: Expand([Node("y", Op.TRANSFORM, fn=lambda c, e: e,
                                                               inputs={"e": "e"})], "y"), inputs={"x": "x"}))
    g.output("e")
    for run in (lambda: reference_run(g, {"x": 1}), lambda: Runtime().run(g, {"x": 1})):
        with pytest.raises(NodeFailed, match="depends on 'e'"):
            await run()


def failing_graph(query: str) -> Graph:
    async def boom(ctx, x):
        await asyncio.sleep(0.01)
        if x == "bad":
            raise ValueError("broken input")
        return x

    async def slow(ctx, x):
        await asyncio.sleep(1.0)
        return x

    g = Graph(query)
    g.input("x")
    g.add(Node("boom", Op.TRANSFORM, fn=boom, inputs={"x": "x"}, module="retriever"))
    g.add(Node("slow", Op.DECODE, fn=slow, inputs={"x": "x"}, engine="llm", module="synth"))
    g.add(Node("join", Op.AGGREGATE, fn=lambda c, a, b: a + b, inputs={"a": "boom", "b": "slow"}))
    g.output("join")
    return g


async def test_failure_names_node_and_module_and_spares_other_queries(vclock):
    rt = Runtime(engines())
    results = await rt.run_many([(failing_graph("q-bad"), {"x": "bad"}), (failing_graph("q-ok"), {"x": "ok"})])
    assert isinstance(results[0], NodeFailed)
    assert "node 'boom'" in str(results[0]) and "module 'retriever'" in str(results[0])
    assert "broken input" in str(results[0]) and isinstance(results[0].__cause__, ValueError)
    assert results[1][0] == "okok"
    with pytest.raises(NodeFailed, match="node 'boom'"):
        await reference_run(failing_graph("r"), {"x": "bad"})


async def test_timeout_releases_everything(vclock):
    llm = FakeLLM(LatencyModel(per_token=0.1), max_concurrency=1)
    rt = Runtime(Engines(llm=llm))

    async def call(ctx, x):
        return (await ctx.llm.complete(x, max_tokens=50)).text

    def graph(q):
        g = Graph(q)
        g.input("x")
        for i in range(3):  # three requests: one runs, two wait at the fake engine's single slot
            g.add(Node(f"c{i}", Op.DECODE, fn=call, inputs={"x": "x"}, engine="llm"))
        g.add(Node("j", Op.AGGREGATE, fn=lambda c, **kw: kw, inputs={f"v{i}": f"c{i}" for i in range(3)}))
        g.output("j")
        return g

    with pytest.raises(QueryTimeout, match="exceeded its timeout of 0.5s") as info:
        await rt.run(graph("slow"), {"x": "go"}, timeout=0.5)
    assert set(info.value.running) >= {"c0"}
    assert_engines_idle(rt)
    assert llm.active == 0 and not llm._waiters
    assert rt.statistics()["llm"].cancelled == 3
    value, _ = await rt.run(graph("after"), {"x": "go"})  # the runtime is still usable
    assert set(value) == {"v0", "v1", "v2"}


async def test_caller_cancellation_releases_everything(vclock):
    llm = FakeLLM(LatencyModel(per_token=0.1), max_concurrency=1)
    rt = Runtime(Engines(llm=llm))
    task = asyncio.ensure_future(rt.run(failing_graph("c"), {"x": "ok"}))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_engines_idle(rt)
    assert all(t.done() for t in asyncio.all_tasks() if t.get_name().startswith("c:"))


async def test_missing_input_and_missing_engine_errors():
    with pytest.raises(AyoError, match="needs input 'x'"):
        await Runtime().run(failing_graph("m"), {})
    g = Graph("e")
    g.input("x")

    async def needs_llm(ctx, x):
        return await ctx.llm.complete(x)

    g.add(Node("d", Op.DECODE, fn=needs_llm, inputs={"x": "x"}, engine="llm"))
    with pytest.raises(NodeFailed, match="needs a 'llm' engine") as info:
        await Runtime().run(g, {"x": "1"})
    assert isinstance(info.value.cause, MissingEngine)


async def test_optional_nodes_do_not_hold_the_query(vclock):
    async def slow(ctx, x):
        await asyncio.sleep(10)

    g = Graph("o")
    g.input("x")
    g.add(Node("hint", Op.PARTIAL_PREFILL, fn=slow, inputs={"x": "x"}, meta={"optional": True}))
    g.add(Node("y", Op.TRANSFORM, fn=lambda c, x: x * 2, inputs={"x": "x"}))
    g.output("y")
    value, trace = await Runtime().run(g, {"x": 2})
    assert value == 4 and trace.latency < 1
    assert trace.spans_of("hint")[0].status == "cancelled"


async def test_sync_node_fns_run_in_threads():
    import threading

    main = threading.get_ident()
    g = Graph("t")
    g.input("x")
    g.add(Node("y", Op.TRANSFORM, fn=lambda c, x: (x, threading.get_ident() != main), inputs={"x": "x"}))
    g.output("y")
    assert (await Runtime().run(g, {"x": 1}))[0] == (1, True)
    assert (await Runtime(inline_sync=True).run(g, {"x": 1}))[0] == (1, False)


async def test_streaming_engine_methods_go_through_the_scheduler(vclock):
    async def stream(ctx, q):
        return [d async for d in ctx.llm.stream_complete(q, max_tokens=4)]

    g = Graph("st")
    g.input("q")
    g.add(Node("s", Op.DECODE, fn=stream, inputs={"q": "q"}, engine="llm"))
    g.output("s")
    rt = Runtime(engines())
    value, trace = await rt.run(g, {"q": "x"})
    ref, _ = await reference_run(g, {"q": "x"}, engines())
    assert value == ref and len(value) == 4
    assert rt.statistics()["llm"].finished == 1 and trace.engine_calls[0].method == "stream_complete"
