"""The lower bound of ``ayo_bench.lower_bound`` on fake engines whose best schedule is known.

Fake engines (``ayo_core.runtime.fakes``, ``fake_serving``) on a virtual clock: their service
times are exact, so a chain's only schedule must meet the bound, an engine that cannot batch must
take its total work, and no schedule (Ayo's runtime, the sequential reference interpreter) may
beat the bound. The LLM fakes here also write recorder rows (what ``ayo_bench.recorder`` writes
for a real server): the bound reads token counts only from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ayo_bench.lower_bound import call_lower_bound, longest_chain
from ayo_bench.service_model import (
    FakeEnginesServiceModel,
    LLMRequest,
    MeasuredServiceModel,
    StepServiceModel,
    embed_engine_floor_s,
    step_engine_floor_s,
)
from ayo_core.graph import Graph, Node, Op
from ayo_core.passes import optimize_graph
from ayo_core.runtime import Runtime, reference_run
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.context import Engines
from ayo_core.runtime.fake_serving import ServingFakeLLM, StepModel
from ayo_core.runtime.fakes import FakeEmbedding, FakeLLM, LatencyModel

STEP = StepModel(fixed=0.004, step_base=0.012, per_sequence=0.001, per_context_token=1e-5, per_prefill_token=2e-4,
                 prefill_chunk=64)
ROOFLINE = StepModel(fixed=0.004, step_base=0.012, per_sequence=0.001, per_context_token=1e-5, per_prefill_token=0.0,
                     prefill_chunk=64, token_roofline_s=4e-4)  # big batches and prefill chunks are compute-bound
SERIAL = LatencyModel(fixed=0.003, per_token=0.01, per_prompt_token=0.001, batch_efficiency=0.9)
WIDE = LatencyModel(fixed=0.003, per_token=0.01, per_prompt_token=0.001, batch_efficiency=1.0)  # no slowdown


class Recorded:
    """Mixin: each request leaves a recorder-shaped row (start, end, token counts), on the loop's clock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: list[dict[str, Any]] = []

    async def _generate(self, method: str, prompt: str, max_tokens: int, priority: int, stream_cb: Any) -> Any:
        start = asyncio.get_running_loop().time()
        result = await super()._generate(method, prompt, max_tokens, priority, stream_cb)  # type: ignore[misc]
        self.rows.append({"path": "/v1/completions", "start": start, "end": asyncio.get_running_loop().time(),
                          "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                          "cached_tokens": result.cached_tokens})
        return result


class RecordedServingLLM(Recorded, ServingFakeLLM):
    pass


class RecordedFakeLLM(Recorded, FakeLLM):
    pass


def llm_node(name: str, words: int, tokens: int, deps: tuple[str, ...] = ()) -> Node:
    async def fn(ctx: Any, **inputs: Any) -> str:
        prompt = " ".join(f"{name}w{i}" for i in range(words))  # distinct words: no shared cached prefix
        return (await ctx.llm.complete(prompt, max_tokens=tokens)).text

    return Node(name, Op.DECODE, fn=fn, inputs={f"i{k}": d for k, d in enumerate(deps)}, engine="llm")


def embed_node(name: str, texts: int) -> Node:
    async def fn(ctx: Any, **inputs: Any) -> list:
        return await ctx.embed.aembed([f"text {i}" for i in range(texts)])

    return Node(name, Op.EMBED, fn=fn, engine="embed")


def graph_of(nodes: list[Node], output: str) -> Graph:
    g = Graph("q", nodes)
    g.output(output)
    return g


def bound_of_run(graph: Graph, engines: Engines, service: Any, sequential: bool = False) -> Any:
    """Run ``graph`` (Ayo's runtime, or the sequential reference interpreter) in virtual time; its bound."""
    async def main() -> Any:
        if sequential:
            _, trace = await reference_run(graph, {}, engines)
        else:
            _, trace = await Runtime(engines, inline_sync=True).run(graph, {})
        return call_lower_bound([trace], (trace.start, trace.end), engines.llm.rows, service)

    return run_virtual(main)


def test_a_chain_meets_its_bound_exactly() -> None:
    g = graph_of([llm_node("a", 30, 5), llm_node("b", 200, 12, ("a",)), llm_node("c", 10, 1, ("b",))], "c")
    engines = Engines(llm=RecordedServingLLM(STEP))
    b = bound_of_run(g, engines, StepServiceModel(STEP))
    assert b.llm_requests == b.llm_requests_with_tokens == 3
    assert b.critical_path_s == pytest.approx(b.latency_s, rel=1e-9)  # the only schedule
    assert b.bound_s == pytest.approx(b.latency_s, rel=1e-9) and b.latency_over_bound == pytest.approx(1.0)
    assert b.engine_work_s["llm"] < b.bound_s  # fixed per request is no engine time


def test_a_fan_out_on_an_engine_that_cannot_batch_is_bounded_by_its_total_work() -> None:
    g = graph_of([llm_node(f"f{i}", 20 + 10 * i, 4 + i) for i in range(4)]
                 + [Node("join", Op.AGGREGATE, fn=lambda ctx, **kw: len(kw), inputs={f"x{i}": f"f{i}" for i in range(4)})],
                 "join")
    engines = Engines(llm=RecordedFakeLLM(SERIAL, max_concurrency=1))
    service = FakeEnginesServiceModel(SERIAL, llm_slots=1)
    b = bound_of_run(g, engines, service)
    alone = [service.llm_alone_s(20 + 10 * i, 0, 4 + i) for i in range(4)]
    assert b.busiest_engine == "llm" and b.engine_work_s["llm"] == pytest.approx(sum(alone))
    assert b.critical_path_s == pytest.approx(max(alone))  # unlimited engines: all four at once
    assert b.bound_s == pytest.approx(b.latency_s, rel=1e-9)  # one slot: every schedule takes the sum


def test_a_diamond_is_bounded_by_its_critical_path() -> None:
    embed_model = LatencyModel(fixed=0.01, per_item=0.002, batch_efficiency=0.5)
    wide = WIDE
    g = graph_of([embed_node("e", 8), llm_node("long", 50, 20, ("e",)), llm_node("short", 10, 2, ("e",)),
                  llm_node("final", 30, 6, ("long", "short"))], "final")
    engines = Engines(llm=RecordedFakeLLM(wide, max_concurrency=8), embed=FakeEmbedding(embed_model))
    service = FakeEnginesServiceModel(wide, llm_slots=8, embed=embed_model)
    b = bound_of_run(g, engines, service)
    path = embed_model.items_cost(8) + service.llm_alone_s(50, 0, 20) + service.llm_alone_s(30, 0, 6)
    assert b.critical_path_s == pytest.approx(path) and b.bound_s == b.critical_path_s
    assert max(b.engine_work_s.values()) < b.critical_path_s
    assert b.latency_s == pytest.approx(path)  # ample engines: Ayo's schedule is the best one


def test_a_batching_engine_can_beat_the_sum_of_its_requests_and_the_bound_allows_it() -> None:
    # eight short requests together on a serving engine take far less than eight alone: the old
    # "stock model" style sum would exceed the latency; the engine floor must not
    g = graph_of([llm_node(f"f{i}", 16, 24) for i in range(8)]
                 + [Node("join", Op.AGGREGATE, fn=lambda ctx, **kw: 0, inputs={f"x{i}": f"f{i}" for i in range(8)})], "join")
    service = StepServiceModel(STEP)
    b = bound_of_run(g, Engines(llm=RecordedServingLLM(STEP)), service)
    assert 8 * service.llm_alone_s(16, 0, 24) > b.latency_s >= b.bound_s
    assert b.latency_over_bound >= 1.0


def test_step_model_alone_time_is_the_serving_fakes_time_alone() -> None:
    for model, words, tokens in ((m, w, t) for m in (STEP, ROOFLINE)
                                 for w, t in ((1, 1), (5, 0), (63, 3), (64, 3), (65, 9), (300, 17))):
        async def main(model: StepModel = model, words: int = words, tokens: int = tokens) -> float:
            llm = ServingFakeLLM(model)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await llm.complete(" ".join(f"w{i}" for i in range(words)), max_tokens=tokens)
            return loop.time() - t0

        assert StepServiceModel(model).llm_alone_s(words, 0, tokens) == pytest.approx(run_virtual(main), rel=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 150), st.integers(0, 30)), min_size=1, max_size=12),
       st.sampled_from([STEP, ROOFLINE]))
def test_the_step_engine_floor_never_exceeds_the_engines_busy_time(shapes: list[tuple[int, int]],
                                                                   model: StepModel) -> None:
    async def main() -> tuple[float, list[LLMRequest]]:
        llm = ServingFakeLLM(model)
        results = await asyncio.gather(*(llm.complete(" ".join(f"p{k}w{i}" for i in range(w)), max_tokens=n)
                                         for k, (w, n) in enumerate(shapes)))
        return llm.busy_s, [LLMRequest(r.prompt_tokens, r.cached_tokens, r.completion_tokens) for r in results]

    busy, requests = run_virtual(main)
    assert step_engine_floor_s(model, requests) <= busy + 1e-9


@st.composite
def llm_dags(draw: Any) -> list[tuple[int, int, tuple[int, ...]]]:
    n = draw(st.integers(1, 8))
    return [(draw(st.integers(1, 120)), draw(st.integers(0, 16)),
             tuple(draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True))) if i else ()) for i in range(n)]


def streamed_parts_graph(parts: Any = str.split, final: Any = None) -> Graph:
    """A decode whose words stream to a per-part LLM consumer, as decode pipelining marks it; the
    consumer's answer grows with the word. ``final``: the decode's value from its text (its parts)."""
    async def gen(ctx: Any) -> Any:
        text = (await ctx.llm.complete("list the words", max_tokens=5, stream_cb=ctx.stream_cb)).text
        return text if final is None else final(text)

    async def per(ctx: Any, part: str) -> str:
        return (await ctx.llm.complete(f"explain {part}", max_tokens=3 * len(part))).text

    g = Graph("s")
    g.add(Node("d", Op.DECODE, fn=gen, engine="llm", streamable=True, meta={"parts": parts}))
    g.add(Node("p", Op.DECODE, fn=per, inputs={"part": "d"}, engine="llm", meta={"per_part": "part"}))
    g.output("p")
    return optimize_graph(g, ["decode_pipelining"])


def test_a_streamed_consumer_ends_no_earlier_than_its_last_part_after_the_decode() -> None:
    # the stream publishes a part once the next begins: the last one when the decode ends, so every
    # schedule runs it after the decode. Ample engines: Ayo's pipelined schedule is the best one
    wide = WIDE
    llm = RecordedFakeLLM(wide, responder=lambda prompt, n: "a bb ccc dddd eeeee", max_concurrency=8)
    graph = streamed_parts_graph()
    assert graph["p"].meta["pipelined"] is True
    b = bound_of_run(graph, Engines(llm=llm), FakeEnginesServiceModel(wide, llm_slots=8))
    service = FakeEnginesServiceModel(wide)
    decode = service.llm_alone_s(*next((r["prompt_tokens"], 0, r["completion_tokens"]) for r in llm.rows
                                       if r["completion_tokens"] == 5))
    last = max(service.llm_alone_s(r["prompt_tokens"], 0, r["completion_tokens"]) for r in llm.rows[1:])
    assert b.critical_path_s == pytest.approx(decode + last, rel=1e-6)  # before: the decode alone
    assert b.critical_path_s == pytest.approx(b.latency_s, rel=1e-6)


def test_a_streamed_part_published_before_the_decode_ends_is_bounded_from_where_it_was_published() -> None:
    # a parser that holds back a stand-in, not its last part (the sub-question generator's): every word is
    # published as it arrives, and the decode goes on for two more tokens after the last
    wide = WIDE
    llm = RecordedFakeLLM(wide, responder=lambda prompt, n: "a bb ccc . .", max_concurrency=8)
    def words(text: str) -> list[str]:
        return [w for w in text.split() if w != "."]

    graph = streamed_parts_graph(lambda text: [*words(text), None], final=words)
    b = bound_of_run(graph, Engines(llm=llm), FakeEnginesServiceModel(wide, llm_slots=8))
    service = FakeEnginesServiceModel(wide)
    gen = next(r for r in llm.rows if r["prompt_tokens"] == 3)
    decode = service.llm_alone_s(gen["prompt_tokens"], 0, gen["completion_tokens"])
    ccc = service.llm_alone_s(gen["prompt_tokens"], 0, 3)  # the third word is whole after three tokens
    last = service.llm_alone_s(2, 0, 5)
    assert b.critical_path_s == pytest.approx(ccc + last, rel=1e-6)
    assert b.critical_path_s < decode + last - 0.015  # not after the decode's two trailing tokens
    assert b.critical_path_s == pytest.approx(b.latency_s, rel=1e-6)  # ample engines: Ayo's schedule meets it


def test_a_query_run_inside_a_part_is_that_parts_work() -> None:
    # each part's node runs a query of its own (a sub-question's query engine): that query's critical
    # path is the part's service. Before, the parts cost nothing and the bound was the decode alone
    wide = WIDE
    llm = RecordedFakeLLM(wide, responder=lambda prompt, n: "a bb ccc" if prompt.startswith("list") else "w " * 20,
                          max_concurrency=8)
    engines, inner = Engines(llm=llm), []

    async def gen(ctx: Any) -> str:
        return (await ctx.llm.complete("list the words", max_tokens=5, stream_cb=ctx.stream_cb)).text

    async def answer(ctx: Any, part: str) -> str:
        value, trace = await Runtime(engines, inline_sync=True).run(graph_of([llm_node("a", 10, 4 * len(part))], "a"),
                                                                     {})
        inner.append(trace)
        return value

    g = Graph("s")
    g.add(Node("d", Op.DECODE, fn=gen, engine="llm", streamable=True, meta={"parts": str.split}))
    g.add(Node("p", Op.TRANSFORM, fn=answer, inputs={"part": "d"}, meta={"per_part": "part"}))
    g.output("p")

    async def main() -> Any:
        _, trace = await Runtime(engines, inline_sync=True).run(optimize_graph(g, ["decode_pipelining"]), {})
        return call_lower_bound([trace, *inner], (trace.start, trace.end), llm.rows,
                                FakeEnginesServiceModel(wide, llm_slots=8))

    b = run_virtual(main)
    service = FakeEnginesServiceModel(wide)
    decode, last = service.llm_alone_s(3, 0, 3), service.llm_alone_s(10, 0, 12)  # "ccc": published at the end
    assert len(inner) == 3 and b.llm_requests_with_tokens == 4
    assert b.critical_path_s == pytest.approx(decode + last, rel=1e-6)
    assert b.critical_path_s == pytest.approx(b.latency_s, rel=1e-6)


def dag_graph(spec: list[tuple[int, int, tuple[int, ...]]]) -> Graph:
    nodes = [llm_node(f"n{i}", w, t, tuple(f"n{d}" for d in deps)) for i, (w, t, deps) in enumerate(spec)]
    sinks = [f"n{i}" for i in range(len(spec)) if not any(i in deps for _, _, deps in spec)]
    nodes.append(Node("join", Op.AGGREGATE, fn=lambda ctx, **kw: 0, inputs={f"x{k}": s for k, s in enumerate(sinks)}))
    return graph_of(nodes, "join")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(llm_dags(), st.sampled_from(["serving", "compute-bound", "serial", "two slots"]), st.booleans())
def test_no_schedule_beats_the_bound(spec: list[tuple[int, int, tuple[int, ...]]], engine: str,
                                     sequential: bool) -> None:
    if engine in ("serving", "compute-bound"):
        model = STEP if engine == "serving" else ROOFLINE
        llm: Any = RecordedServingLLM(model)
        service: Any = StepServiceModel(model)
    else:
        slots = 1 if engine == "serial" else 2
        llm, service = RecordedFakeLLM(SERIAL, max_concurrency=slots), FakeEnginesServiceModel(SERIAL, llm_slots=slots)
    b = bound_of_run(dag_graph(spec), Engines(llm=llm), service, sequential=sequential)
    assert b.llm_requests_with_tokens == len(spec) and b.bound_s > 0
    assert b.bound_s <= b.latency_s * (1 + 1e-9) + 1e-12
    if sequential or engine == "serial":  # one request at a time: the work of all of them
        total = sum(service.llm_alone_s(r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"])
                    for r in llm.rows)
        assert b.latency_s == pytest.approx(total, rel=1e-9)


def test_calls_chain_their_queries_and_requests_outside_the_graph() -> None:
    assert longest_chain([(0, 1, 1.0), (1, 2, 1.0), (0.5, 3, 0.5)]) == pytest.approx(2.0)
    # no traces, two requests one after the other (a doc-QA function's own code): they chain
    rows = [{"start": 0.0, "end": 1.0, "prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 0},
            {"start": 1.2, "end": 2.0, "prompt_tokens": 10, "completion_tokens": 3, "cached_tokens": 0}]
    service = FakeEnginesServiceModel(SERIAL)
    b = call_lower_bound([], (0.0, 2.1), rows, service)
    assert b.critical_path_s == pytest.approx(service.llm_alone_s(10, 0, 5) + service.llm_alone_s(10, 0, 3))


def test_embedding_floor_batches_everything_when_batching_pays() -> None:
    model = LatencyModel(fixed=0.01, per_item=0.002, batch_efficiency=0.5)
    service = FakeEnginesServiceModel(SERIAL, embed=model)
    assert embed_engine_floor_s(service, 40) == pytest.approx(model.items_cost(40))  # below 4 x items_cost(10)
    assert embed_engine_floor_s(service, 40) < 4 * model.items_cost(10)


def _row(start: float, end: float, prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {"start": start, "end": end, "prompt_tokens": prompt, "completion_tokens": completion,
            "cached_tokens": cached}


def test_measured_model_uses_lone_requests_of_no_more_work() -> None:
    rows = [_row(0.0, 1.0, 100, 10), _row(2.0, 2.5, 50, 5),
            _row(3.0, 5.0, 400, 40), _row(4.0, 6.0, 10, 1)]  # the last two overlap: not lone
    m = MeasuredServiceModel(rows)
    assert m.llm_alone_s(100, 0, 10) == pytest.approx(1.0)
    assert m.llm_alone_s(100, 50, 10) == pytest.approx(0.5)  # 50 uncached: only the 50-token request fits
    assert m.llm_alone_s(10, 0, 1) == 0.0  # no lone request that small: counts 0
    assert m.llm_alone_s(1000, 0, 100) == pytest.approx(1.0)  # the overlapping pair are not lone


def test_a_longer_context_is_more_work_even_when_cached() -> None:
    # 400 prompt tokens, 350 of them cached: as little prefill as a 50-token prompt, but every decode step
    # reads a 400-token context, so it says nothing about a 60-token prompt's service
    m = MeasuredServiceModel([_row(0.0, 3.0, 400, 10, cached=350)])
    assert m.llm_alone_s(60, 0, 10) == 0.0
    assert m.llm_alone_s(400, 350, 10) == pytest.approx(3.0)


def test_a_slow_lone_measurement_is_capped_by_a_faster_request_of_more_work() -> None:
    # the lone 2.0 s is noise: a request with more of every kind of work took 1.2 s while sharing the server
    rows = [_row(0.0, 2.0, 100, 10), _row(3.0, 4.2, 120, 12), _row(3.5, 4.0, 5, 1)]
    m = MeasuredServiceModel(rows)
    assert m.llm_alone_s(100, 0, 10) == pytest.approx(1.2)


def test_the_measured_call_is_no_lone_shape_but_caps_its_own_requests() -> None:
    rows = [_row(0.0, 1.0, 100, 10), _row(2.0, 2.9, 100, 10)]
    assert MeasuredServiceModel(rows, exclude=(-1.0, 3.0)).llm_alone_s(100, 0, 10) == 0.0  # no basis outside
    assert MeasuredServiceModel(rows, exclude=(1.5, 3.0)).llm_alone_s(100, 0, 10) == pytest.approx(0.9)
    slower = [_row(0.0, 1.0, 100, 10), _row(2.0, 3.2, 100, 10)]
    assert MeasuredServiceModel(slower, exclude=(1.5, 3.5)).llm_alone_s(100, 0, 10) == pytest.approx(1.0)


@given(st.lists(st.tuples(st.integers(1, 400), st.integers(0, 400), st.integers(1, 64), st.floats(0.0, 1.0),
                          st.floats(0.0, 1.0)), min_size=1, max_size=12))
def test_no_request_is_bounded_above_a_measurement_of_as_much_work(
        shapes: list[tuple[int, int, int, float, float]]) -> None:
    # true service grows with work; each measurement adds its own non-negative noise. The same requests run
    # twice (stock's run, then the measured call): no request of the call is priced above either measurement
    # of it, so a call that ran its requests one after another never reads below 1.0, and none below its
    # true service
    def true_s(p: int, u: int, n: int) -> float:
        return 0.05 + 0.001 * u + 0.0001 * p * n + 0.02 * n

    rows: list[dict[str, Any]] = []
    for run in (0, 1):
        for p, cached, n, *noise in shapes:
            u, start = max(0, p - min(cached, p)), rows[-1]["end"] + 0.1 if rows else 0.0
            rows.append(_row(start, start + true_s(p, u, n) * (1 + noise[run]), p, n, cached=p - u))
    stock, call = rows[:len(shapes)], rows[len(shapes):]
    m = MeasuredServiceModel(rows, exclude=(call[0]["start"], call[-1]["end"]))
    for s, r in zip(stock, call, strict=True):
        bound = m.llm_alone_s(r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"])
        assert bound <= min(s["end"] - s["start"], r["end"] - r["start"]) * (1 + 1e-9)
        assert bound >= true_s(r["prompt_tokens"], r["prompt_tokens"] - r["cached_tokens"],
                               r["completion_tokens"]) * (1 - 1e-9)  # noise only adds: the estimate is not below


@pytest.mark.parametrize("name", ["h100-llama2-7b", "a100-llama2-7b"])
def test_a_deployment_profile_is_a_service_model(name: str) -> None:
    # ayo_core.emulate's profiles have llm_alone_s/embed_batch_s and a StepModel: the bound takes them as they are
    from ayo_core.emulate.profile import load_profile

    profile = load_profile(name)
    g = dag_graph([(80, 12, ()), (40, 30, ()), (200, 6, (0, 1)), (20, 3, (2,))])
    b = bound_of_run(g, Engines(llm=RecordedServingLLM(profile.llm)), profile)
    assert b.service_model == profile.name and 0 < b.bound_s <= b.latency_s * (1 + 1e-9)


class _Board:
    """What the bound reads of a speculation board: the consumer's name (``graph.meta["speculation"]``)."""

    consumer = "synth"


def speculation_graph(after_deltas: int | None) -> Graph:
    """``pick`` decodes a short answer; a speculative run of ``synth`` starts (at pick's start, or once
    pick's decode has streamed ``after_deltas`` deltas, which its span notes as ``SpeculationBoard``
    does), runs through pick's engines and makes two chained calls; ``synth`` takes its value and
    sends nothing."""
    from ayo_core.trace import NodeSpan

    runs: dict[str, asyncio.Task] = {}

    async def speculative(ctx: Any) -> str:
        loop = asyncio.get_running_loop()
        span = NodeSpan(ctx.query_id, "synth.speculative", "synth", "decode", "llm", loop.time(),
                        read_deltas=None if after_deltas is None else [after_deltas])
        ctx.trace.nodes.append(span)
        first = (await ctx.llm.complete(" ".join(f"s{i}" for i in range(40)), max_tokens=10)).text
        second = (await ctx.llm.complete(first + " ".join(f"t{i}" for i in range(40)), max_tokens=10)).text
        span.end = loop.time()
        return second

    async def pick(ctx: Any) -> str:
        seen: list[str] = []

        def on_delta(delta: str) -> None:
            seen.append(delta)
            if len(seen) == after_deltas:
                runs[ctx.query_id] = asyncio.get_running_loop().create_task(speculative(ctx))

        if after_deltas is None:
            runs[ctx.query_id] = asyncio.get_running_loop().create_task(speculative(ctx))
        return (await ctx.llm.complete(" ".join(f"p{i}" for i in range(20)), max_tokens=8, stream_cb=on_delta)).text

    async def synth(ctx: Any, picked: str) -> str:
        return await runs.pop(ctx.query_id)

    g = graph_of([Node("pick", Op.DECODE, fn=pick, engine="llm"),
                  Node("synth", Op.DECODE, fn=synth, inputs={"picked": "pick"}, engine="llm")], "synth")
    g.meta["speculation"] = _Board()
    return g


def test_a_consumer_fed_by_its_speculative_run_is_bounded_by_that_runs_chain() -> None:
    """The two calls of synth's speculative run are synth's work: started at pick's start, the bound is
    their chain from there (here the latency), not pick alone (synth counted as free)."""
    service = FakeEnginesServiceModel(WIDE, llm_slots=8)
    b = bound_of_run(speculation_graph(None), Engines(llm=RecordedFakeLLM(WIDE, max_concurrency=8)), service)
    assert b.critical_path_s > 2 * service.llm_alone_s(20, 0, 8)  # before: pick's call alone, synth free
    assert b.critical_path_s == pytest.approx(b.latency_s, rel=1e-6)  # the chain from pick's start: no schedule does better


def test_a_speculative_run_is_bounded_from_the_text_it_read() -> None:
    """Started once pick's decode has streamed two deltas: no schedule starts it before pick's request
    has two tokens, so the bound is that lead plus the run's chain (here the latency); before, the
    chain from pick's start."""
    service = FakeEnginesServiceModel(WIDE, llm_slots=8)
    b = bound_of_run(speculation_graph(2), Engines(llm=RecordedFakeLLM(WIDE, max_concurrency=8)), service)
    assert b.critical_path_s == pytest.approx(b.latency_s, rel=1e-6)  # Ayo's schedule: started right then
    assert b.critical_path_s - service.llm_alone_s(20, 0, 2) > service.llm_alone_s(40, 0, 10)  # the lead, then the chain


def test_a_search_on_the_path_counts_its_declared_latency_when_the_log_is_given() -> None:
    """A node that waits on the search service (its reply held for the declared 0.3 s) between two model
    calls: with the service's log the bound is the chain (here the only schedule); without it, the
    search counts 0, as before."""
    log: list[dict[str, float]] = []

    async def web_search(ctx: Any, **inputs: Any) -> str:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(0.3)  # the service holds the reply for its declared latency
        log.append({"start": start, "end": loop.time(), "latency_s": 0.3})
        return "results"

    g = graph_of([llm_node("plan", 20, 4), Node("search", Op.SEARCH, fn=web_search, inputs={"q": "plan"}),
                  llm_node("answer", 30, 6, ("search",))], "answer")
    engines = Engines(llm=RecordedServingLLM(STEP))

    async def main() -> tuple[Any, Any]:
        _, trace = await Runtime(engines, inline_sync=True).run(g, {})
        window = (trace.start, trace.end)
        return (call_lower_bound([trace], window, engines.llm.rows, StepServiceModel(STEP)),
                call_lower_bound([trace], window, engines.llm.rows, StepServiceModel(STEP), searches=log))

    without, with_log = run_virtual(main)
    assert with_log.critical_path_s == pytest.approx(with_log.latency_s, rel=1e-9)
    assert without.critical_path_s == pytest.approx(with_log.critical_path_s - 0.3, rel=1e-9)
    assert with_log.engine_work_s == without.engine_work_s  # a search is no engine's work


def _searching_fan_out(setup_s: Callable[[int], float], answer_tokens: Callable[[int], int]) -> Any:
    """The bound of three branches run at once, each with ``setup_s(i)`` of local work, then a search
    (0.3 s declared), then a model call of ``answer_tokens(i)`` tokens; the searches logged."""
    log: list[dict[str, float]] = []

    def branch(i: int) -> Node:
        async def web_search(ctx: Any, **inputs: Any) -> str:
            loop = asyncio.get_running_loop()
            await asyncio.sleep(setup_s(i))  # the retriever's own setup: local work
            start = loop.time()
            await asyncio.sleep(0.3)  # the service holds the reply for its declared latency
            log.append({"start": start, "end": loop.time(), "latency_s": 0.3})
            return "results"

        return Node(f"search{i}", Op.SEARCH, fn=web_search)

    answers = [llm_node(f"answer{i}", 30, answer_tokens(i), (f"search{i}",)) for i in range(3)]
    join = Node("join", Op.AGGREGATE, fn=lambda ctx, **kw: len(kw), inputs={f"a{i}": f"answer{i}" for i in range(3)})
    g = graph_of([branch(i) for i in range(3)] + answers + [join], "join")
    engines = Engines(llm=RecordedFakeLLM(WIDE, max_concurrency=8))

    async def main() -> Any:
        _, trace = await Runtime(engines, inline_sync=True).run(g, {})
        return call_lower_bound([trace], (trace.start, trace.end), engines.llm.rows,
                                FakeEnginesServiceModel(WIDE, llm_slots=8), searches=log)

    return run_virtual(main)


def test_each_of_concurrent_searches_counts_in_the_branch_that_made_it() -> None:
    """Three branches start at once, each sets up its client (8-12 ms) and then waits on a search, then
    a model call, the first branch's the longest. Every branch holds every search (each began before
    the first search); the shortest holder would take all three and leave the longest branch's path
    without its 0.3 s. Each search goes to the branch that ended nearest its reply."""
    b = _searching_fan_out(lambda i: 0.012 - 0.002 * i, lambda i: 12 - 4 * i)
    longest = FakeEnginesServiceModel(WIDE).llm_alone_s(30, 0, 12)
    assert b.critical_path_s == pytest.approx(0.3 + longest, rel=1e-6)  # before: the longest answer alone
    assert b.critical_path_s <= b.latency_s


def test_concurrent_searches_that_end_together_count_one_in_each_branch() -> None:
    """Three branches search at once and every search and branch ends at the same instant (graph's
    trace: within 1-3 ms); the last branch's answer is the longest. Nearest-end alone gives every
    search to one branch and leaves the longest branch's path without its 0.3 s; one to a branch
    counts it."""
    b = _searching_fan_out(lambda i: 0.0, lambda i: 4 + 4 * i)
    longest = FakeEnginesServiceModel(WIDE).llm_alone_s(30, 0, 12)
    assert b.critical_path_s == pytest.approx(0.3 + longest, rel=1e-6)
    assert b.critical_path_s <= b.latency_s
