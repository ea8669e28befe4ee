"""The stock executor (``ayo_core.runtime.stock_runner``) on fake engines and the virtual clock.

Fake engines (tests only: ``ayo_core.runtime.fakes``) because the properties checked are about
*when* calls run (spans on the virtual clock), which a real engine's timing would blur.
"""

from __future__ import annotations

from typing import Any

import pytest

from ayo_core.runtime import reference_run
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.fakes import fake_engines
from ayo_core.runtime.stock_runner import SEQUENTIAL, FrameworkConcurrency, stock_run
from ayo_core.templates.examples import (
    EXAMPLES,
    advanced_rag_graph,
    example_inputs,
    example_responder,
    tree_summarize_graph,
)
from ayo_core.trace import Trace

EVERYTHING = FrameworkConcurrency(parts=("*",), expansions=("*",))


def _run(graph: Any, concurrency: FrameworkConcurrency | None) -> tuple[Any, Trace]:
    inputs = example_inputs("how do prefix caches work", n_chunks=16)

    async def go() -> tuple[Any, Trace]:
        engines = fake_engines(responder=example_responder)
        if concurrency is None:
            return await reference_run(graph, inputs, engines, inline_sync=True)
        return await stock_run(graph, inputs, engines, concurrency=concurrency, inline_sync=True)

    return run_virtual(go)


def _spans(trace: Trace, node: str) -> list[tuple[float, float]]:
    return [(s.start, s.end) for s in trace.nodes if s.node == node]


@pytest.mark.parametrize("shape", sorted(EXAMPLES))
@pytest.mark.parametrize("concurrency", [SEQUENTIAL, EVERYTHING], ids=["sequential", "everything"])
def test_stock_run_answers_as_the_reference_interpreter(shape: str, concurrency: FrameworkConcurrency) -> None:
    graph = EXAMPLES[shape]("q", n_chunks=16)
    ref, ref_trace = _run(graph, None)
    out, trace = _run(graph, concurrency)
    assert out == ref
    assert sorted((s.node, s.part) for s in trace.nodes) == sorted((s.node, s.part) for s in ref_trace.nodes)


def test_sequential_runs_every_call_in_the_reference_order_and_time() -> None:
    graph = advanced_rag_graph("q", n_chunks=16)
    _, ref = _run(graph, None)
    _, trace = _run(graph, SEQUENTIAL)
    assert [(s.node, s.part, s.start, s.end) for s in trace.nodes] == [(s.node, s.part, s.start, s.end) for s in ref.nodes]


def test_tree_leaves_run_concurrently_when_the_framework_gathers_them() -> None:
    graph = tree_summarize_graph("q", n_chunks=16)
    _, seq = _run(graph, SEQUENTIAL)
    _, gathered = _run(graph, FrameworkConcurrency(parts=("synth*summarize",)))
    leaves = _spans(gathered, "synth.summarize")
    assert len(leaves) >= 3
    assert len({start for start, _ in leaves}) == 1  # every leaf called at once
    seq_leaves = _spans(seq, "synth.summarize")
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(seq_leaves, seq_leaves[1:], strict=False))
    assert gathered.end - gathered.start < seq.end - seq.start


def test_a_chain_stays_sequential_under_any_concurrency() -> None:
    graph = advanced_rag_graph("q", n_chunks=16)
    _, trace = _run(graph, EVERYTHING)
    chain = [_spans(trace, n)[0] for n in ("synth.step0", "synth.step1", "synth")]
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(chain, chain[1:], strict=False))
    # the rerank batches' parts are gathered here (everything), the refine chain still is not
    scores = _spans(trace, "rerank.score")
    assert len(scores) >= 2 and len({s for s, _ in scores}) == 1


def test_sub_questions_grown_at_run_time_run_concurrently() -> None:
    graph = EXAMPLES["dynamic"]("q", n_chunks=16)
    _, trace = _run(graph, FrameworkConcurrency(expansions=("grow",)))
    embeds = [s for s in trace.nodes if s.node.startswith("sub") and s.node.endswith(".retrieve.embed")]
    _, seq = _run(graph, SEQUENTIAL)
    seq_embeds = [s for s in seq.nodes if s.node.startswith("sub") and s.node.endswith(".retrieve.embed")]
    if len(embeds) < 2:
        pytest.fail(f"the planner gave {len(embeds)} sub-question(s); pick a question that plans at least two")
    assert len({s.start for s in embeds}) == 1
    assert len({s.start for s in seq_embeds}) == len(seq_embeds)
