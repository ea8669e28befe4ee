"""The four passes and the pass manager: changed flag, lint, equality with the reference interpreter."""

from __future__ import annotations

import functools

import pytest

from ayo_core.graph import Graph, Node, Op
from ayo_core.passes import (
    PASSES,
    PassError,
    PassResult,
    decode_pipelining,
    dependency_pruning,
    optimize_graph,
    prefill_splitting,
    stage_decomposition,
)
from ayo_core.runtime import Runtime, reference_run
from ayo_core.runtime.fakes import fake_engines
from ayo_core.templates.examples import EXAMPLES, example_inputs, example_responder

CHANGES = {  # pass -> examples it changes (applied alone to the unoptimized graph)
    "dependency_pruning": {"naive_rag", "advanced_rag", "tree_summarize", "dynamic"},
    "stage_decomposition": {"advanced_rag"},
    "prefill_splitting": {"naive_rag", "advanced_rag", "tree_summarize"},
    "decode_pipelining": {"advanced_rag"},
    "early_stop": set(),  # no example bounds the parts its consumer keeps (see test_early_stop.py)
}


def engines():
    return fake_engines("gpu", example_responder)


def inputs_for(example: str) -> dict:
    return example_inputs(n_chunks=48 if example == "advanced_rag" else 16)


def reachable(g: Graph, src: str, dst: str) -> bool:
    seen, todo = set(), [src]
    while todo:
        n = todo.pop()
        if n == dst:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(g.consumers(n))
    return False


@pytest.mark.parametrize("example", sorted(EXAMPLES))
@pytest.mark.parametrize("name", list(PASSES))
async def test_pass_changed_lint_and_reference_equality(vclock, name, example):
    graph = EXAMPLES[example]()
    before = graph.signature()
    result = PASSES[name](graph)
    assert isinstance(result, PassResult)
    out, changed = result
    assert changed == (example in CHANGES[name])
    assert graph.signature() == before  # pure: the input graph is untouched
    out.lint()
    assert PASSES[name](out).changed is False  # idempotent
    inputs = inputs_for(example)
    expected, _ = await reference_run(graph, inputs, engines(), inline_sync=True)
    assert (await reference_run(out, inputs, engines(), inline_sync=True))[0] == expected
    assert (await Runtime(engines(), inline_sync=True).run(out, inputs))[0] == expected


@pytest.mark.parametrize("example", sorted(EXAMPLES))
async def test_all_passes_in_turn_keep_results(vclock, example):
    graph = EXAMPLES[example]()
    inputs = inputs_for(example)
    expected, _ = await reference_run(graph, inputs, engines(), inline_sync=True)
    for k in range(len(PASSES) + 1):
        optimized = optimize_graph(graph, list(PASSES)[:k], debug=True)
        assert (await Runtime(engines(), inline_sync=True).run(optimized, inputs))[0] == expected


def test_pruning_detaches_independent_branches_but_keeps_ingest_before_search():
    graph = EXAMPLES["advanced_rag"]()
    assert graph["expand.decode"].after == {"index.ingest"}
    pruned, _ = dependency_pruning(graph)
    assert not pruned["expand.decode"].after and not pruned["retrieve.embed"].after
    assert not pruned["synth.pack"].after and not pruned["rerank.flatten"].after
    assert reachable(pruned, "index.ingest", "retrieve.search")
    assert not reachable(pruned, "index.ingest", "expand.decode")


def side(name, resources, after=()):
    meta = {} if resources is None else {"resources": frozenset(resources)}
    return Node(name, Op.TOOL_CALL, fn=lambda ctx: name, side_effect=True, after=frozenset(after), meta=meta)


def test_pruning_orders_conflicting_side_effects_only():
    g = Graph("s")
    g.add(side("w1", {"a"}))
    g.add(side("w2", {"b"}, after=["w1"]))
    g.add(side("w3", {"a"}, after=["w2"]))
    g.add(side("u1", None, after=["w3"]))
    g.add(side("u2", None, after=["u1"]))
    g.add(Node("j", Op.AGGREGATE, fn=lambda ctx, **kw: kw, inputs={n: n for n in ("w1", "w2", "w3", "u1", "u2")}))
    g.output("j")
    pruned, changed = dependency_pruning(g)
    assert changed
    assert pruned["w2"].after == frozenset()  # b does not touch a
    assert pruned["w3"].after == {"w1"}  # the chain through w2 is re-targeted to the real conflict
    assert pruned["u1"].after == {"w3", "w2"}  # unknown resources: ordered after every side effect
    assert pruned["u2"].after == {"u1"}
    pruned.lint()


def test_stage_decomposition_pipelines_embed_into_ingest():
    graph = EXAMPLES["advanced_rag"]()
    out, changed = stage_decomposition(graph)
    assert changed
    parts = sorted(n for n in out.nodes if n.startswith("index.embed#"))
    assert parts == ["index.embed#0", "index.embed#1", "index.embed#2"]  # 48 items, 16 per part
    for i in range(3):
        ingest = out[f"index.ingest#{i}"]
        assert ingest.inputs["vectors"] == f"index.embed#{i}"  # micro-batch to micro-batch
        assert ingest.side_effect and ingest.meta["split_of"] == "index.ingest"
    assert out["index.ingest"].op is Op.AGGREGATE and out["index.embed"].op is Op.AGGREGATE
    assert out["index.ingest"].inputs == {f"p{i}": f"index.ingest#{i}" for i in range(3)}
    assert stage_decomposition(graph, max_parts=2)[0]["index.ingest#1"].inputs["vectors"] == "index.embed#1"
    assert not stage_decomposition(graph, min_items=48).changed


@pytest.mark.parametrize("n_docs", [0, 1, 2, 5, 60])
async def test_stage_decomposition_is_correct_for_any_data_size(vclock, n_docs):
    graph = EXAMPLES["naive_rag"](n_chunks=48)  # sized for 48 chunks at build time
    out = stage_decomposition(graph)[0]
    assert "index.embed#2" in out
    inputs = example_inputs(n_chunks=n_docs)
    expected, _ = await reference_run(graph, inputs, engines(), inline_sync=True)
    value, trace = await Runtime(engines(), inline_sync=True).run(out, inputs)
    assert value == expected
    if n_docs < 3:  # empty micro-batches return at once without an engine call
        assert len([c for c in trace.engine_calls if c.method == "add"]) == n_docs


async def test_prefill_splitting_warms_the_prefix_cache(vclock):
    graph = EXAMPLES["naive_rag"]()
    out, changed = prefill_splitting(graph)
    assert changed
    pre = out["synth.prefill"]
    assert pre.op is Op.PARTIAL_PREFILL and pre.inputs == {"question": "question"} and pre.meta["optional"]
    assert out["synth"].meta["prefill_node"] == "synth.prefill"
    eng = engines()
    value, trace = await Runtime(eng, inline_sync=True).run(optimize_graph(graph), example_inputs(n_chunks=16))
    calls = sorted(eng.llm.calls, key=lambda c: c.start)
    assert [c.method for c in calls] == ["prefill", "complete"]
    assert calls[1].cached_tokens > 0
    assert trace.spans_of("synth.prefill")[0].end <= trace.spans_of("synth")[0].start


def test_prefill_splitting_skips_decodes_whose_inputs_all_come_at_once():
    graph = EXAMPLES["naive_rag"]()
    graph.replace(graph["synth"].replace(inputs={"question": "question", "packs": "question"}))
    assert not prefill_splitting(graph).changed


def test_decode_pipelining_marks_the_chain():
    graph = EXAMPLES["advanced_rag"]()
    out, changed = decode_pipelining(graph)
    assert changed
    assert {n for n, node in out.nodes.items() if node.meta.get("pipelined")} == {
        "expand", "retrieve.embed", "retrieve.search"}
    assert not out["rerank.score"].meta.get("pipelined")  # its batches come from a local, non-streaming node


def test_manager_records_history_and_overhead():
    out = optimize_graph(EXAMPLES["advanced_rag"]())
    assert [n for n, _ in out.meta["passes"]] == list(PASSES)
    assert out.meta["overhead"]["passes"] > 0


def test_manager_names_the_failing_pass_and_those_before():
    def broken(g):
        out = g.copy()
        out.add(Node("dangling", Op.TRANSFORM, fn=lambda ctx, x: x, inputs={"x": "nowhere"}))
        return out, True

    def raising(g):
        raise RuntimeError("boom")

    graph = EXAMPLES["naive_rag"]()
    with pytest.raises(PassError, match=r"pass 'broken' \(after \['dependency_pruning'\]\) produced an invalid"):
        optimize_graph(graph, ["dependency_pruning", broken], debug=True)
    with pytest.raises(PassError, match=r"pass 'raising' \(after no other pass\) failed: RuntimeError: boom"):
        optimize_graph(graph, [raising])
    with pytest.raises(ValueError, match="valid passes: dependency_pruning"):
        optimize_graph(graph, ["fuse_everything"])
    custom = functools.partial(stage_decomposition, max_parts=2)
    assert optimize_graph(graph, [custom]).meta["passes"] == [("stage_decomposition", False)]


def test_ayo_passes_environment_picks_the_default_passes(monkeypatch) -> None:
    from ayo_core.passes.manager import DEFAULT_PASSES, resolve_passes

    monkeypatch.delenv("AYO_PASSES", raising=False)
    assert resolve_passes(None) == list(DEFAULT_PASSES)
    monkeypatch.setenv("AYO_PASSES", "dependency_pruning, decode_pipelining")
    assert [p.__name__ for p in resolve_passes(None)] == ["dependency_pruning", "decode_pipelining"]
    monkeypatch.setenv("AYO_PASSES", "")
    assert resolve_passes(None) == []
    monkeypatch.setenv("AYO_PASSES", "prefil_splitting")
    with pytest.raises(ValueError, match="unknown pass 'prefil_splitting'; valid passes: dependency_pruning"):
        resolve_passes(None)
    assert [p.__name__ for p in resolve_passes(["prefill_splitting"])] == ["prefill_splitting"]  # explicit wins
