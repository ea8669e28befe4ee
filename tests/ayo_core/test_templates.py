"""Module templates: their primitive decomposition, per-mode synthesis behaviour, the shape cache."""

from __future__ import annotations

import time

import pytest

from ayo_core.graph import Graph, Op
from ayo_core.passes import optimize_graph
from ayo_core.runtime import Runtime, reference_run
from ayo_core.runtime.fakes import fake_engines
from ayo_core.templates import (
    Indexing,
    LLMCall,
    Opaque,
    QueryExpansion,
    Rerank,
    Retrieval,
    ShapeCache,
    Synthesis,
    ToolCall,
    Transform,
    greedy_pack,
    hit_text,
    shape_key,
    to_records,
)
from ayo_core.templates.examples import (
    advanced_rag_graph,
    example_inputs,
    example_responder,
    parse_lines,
    tree_summarize_graph,
)


def engines():
    return fake_engines("gpu", example_responder)


def ops(g: Graph) -> dict[str, Op]:
    return {n: node.op for n, node in g.nodes.items()}


def test_indexing_and_retrieval_decompose_into_primitives():
    g = Graph("r")
    g.input("docs")
    g.input("q")
    idx = Indexing("c", n_chunks=32).build(g, "idx", {"chunks": "docs"})
    ret = Retrieval("c", k=3).build(g, "ret", {"query": "q"}, after=[idx])
    assert ops(g) == {"docs": Op.INPUT, "q": Op.INPUT, "idx.records": Op.TRANSFORM, "idx.embed": Op.EMBED,
                      "idx.ingest": Op.INGEST, "ret.embed": Op.EMBED, "ret.search": Op.SEARCH}
    assert ret == "ret.search" and g["ret.embed"].after == {"idx.ingest"}
    ingest = g["idx.ingest"]
    assert ingest.side_effect and ingest.splittable and ingest.meta["resources"] == {"vector:c"}
    assert g["idx.embed"].meta["split"].axis == ingest.meta["split"].axis
    with pytest.raises(ValueError, match="needs inputs \\['query'\\]"):
        Retrieval("c").build(g, "bad", {})


def test_query_expansion_streams_one_query_per_part():
    g = Graph("e")
    g.input("q")
    out = QueryExpansion(3, lambda query: f"[expand n=3] {query}", parse_lines).build(g, "exp", {"query": "q"})
    assert out == "exp" and g["exp.decode"].streamable and g["exp.decode"].meta["parts"] is parse_lines
    assert g["exp"].meta["per_part"] == "query"


async def test_query_expansion_value_is_the_parsed_queries(vclock):
    g = Graph("e")
    g.input("q")
    g.output(QueryExpansion(3, lambda query: f"[expand n=3] {query}", parse_lines).build(g, "exp", {"query": "q"}))
    value, _ = await Runtime(engines()).run(optimize_graph(g), {"q": "x"})
    assert len(value) == 3 and all(isinstance(v, str) and v for v in value)
    assert value == (await reference_run(g, {"q": "x"}, engines()))[0]


def rerank_graph(mode: str, **kw) -> Graph:
    g = Graph("rr")
    g.input("q")
    g.input("hits")
    g.output(Rerank(2, mode, **kw).build(g, "rr", {"query": "q", "hits": "hits"}))
    return g


HITS = [[{"id": f"h{i}", "document": f"text about cache {i}" + " x" * i} for i in range(5)],
        [{"id": "h1", "document": "dup"}, {"id": "h9", "document": "cache cache"}]]


async def test_llm_rerank_scores_batches_concurrently(vclock):
    from ayo_core.templates.examples import _rerank_parse, _rerank_prompt

    g = rerank_graph("llm", batch_size=2, render=_rerank_prompt, parse=_rerank_parse)
    expected, ref = await reference_run(g, {"q": "cache", "hits": HITS}, engines())
    value, trace = await Runtime(engines()).run(g, {"q": "cache", "hits": HITS})
    assert value == expected and len(value) == 2 and all("score" in h for h in value)
    spans = trace.spans_of("rr.score")
    assert len(spans) == 3  # 6 unique hits in batches of 2
    assert max(s.start for s in spans) < min(s.end for s in spans)  # all batches in flight together
    assert trace.latency < ref.latency


async def test_engine_rerank_and_selection(vclock):
    g = rerank_graph("engine", n_hits=40)
    value, _ = await Runtime(engines()).run(optimize_graph(g), {"q": "cache", "hits": HITS})
    assert value == (await reference_run(g, {"q": "cache", "hits": HITS}, engines()))[0]
    assert [h["id"] for h in value] == ["h9", "h0"]
    with pytest.raises(ValueError, match="needs render"):
        Rerank(2, "llm")


def synthesis_graph(mode: str, **kw) -> Graph:
    g = Graph("s")
    g.input("question")
    g.input("chunks")
    syn = Synthesis(mode, lambda question, context: f"[qa] {question} | {context}",
                    render_refine=lambda question, answer, context: f"[refine] {question} | {answer} | {context}",
                    render_summary=lambda question, context: f"[summary] {question} | {context}", max_tokens=6, **kw)
    g.output(syn.build(g, "syn", {"question": "question", "chunks": "chunks"}))
    return g


CHUNKS = [f"chunk {i} " + "word " * 20 for i in range(7)]


@pytest.mark.parametrize("mode, kw, llm_calls", [
    ("simple", {}, 1),
    ("refine", {"n_steps": 7}, 7),
    ("refine", {"n_steps": 2}, 7),  # the chain grows at run time when more chunks arrive than planned
    ("refine", {"n_steps": 10}, 7),  # extra planned steps pass the answer through
    ("compact", {"pack": lambda q, texts: greedy_pack(texts, 300)}, 4),  # 2 chunks per context
    ("tree_summarize", {"pack": lambda q, texts: greedy_pack(texts, 300)}, 5),  # 4 leaves + 1 root
    ("accumulate", {}, 7),  # one independent call per chunk
    ("compact_accumulate", {"pack": lambda q, texts: greedy_pack(texts, 300)}, 4),  # one per packed context
])
async def test_synthesis_modes(vclock, mode, kw, llm_calls):
    g = synthesis_graph(mode, **kw)
    g.lint()
    eng = engines()
    expected, _ = await reference_run(g, {"question": "why", "chunks": CHUNKS}, engines())
    value, trace = await Runtime(eng).run(optimize_graph(g), {"question": "why", "chunks": CHUNKS})
    assert value == expected and isinstance(value, str) and value
    assert len(eng.llm.calls) == llm_calls


async def test_accumulate_calls_run_together_and_join_in_order(vclock):
    eng = engines()
    g = synthesis_graph("accumulate", join=lambda answers: " || ".join(answers))
    value, trace = await Runtime(eng).run(optimize_graph(g), {"question": "q", "chunks": CHUNKS[:3]})
    answers = trace.spans_of("syn.answer")
    assert len(answers) == 3 and max(s.start for s in answers) < min(s.end for s in answers)
    expected = [example_responder(f"[qa] q | {c}", 6) for c in CHUNKS[:3]]
    assert value == " || ".join(expected)


async def test_refine_calls_chain_the_previous_answer(vclock):
    eng = engines()
    await Runtime(eng).run(synthesis_graph("refine", n_steps=3), {"question": "q", "chunks": CHUNKS[:3]})
    prompts = [c.prompt for c in sorted(eng.llm.calls, key=lambda c: c.start)]
    assert prompts[0].startswith("[qa]") and all(p.startswith("[refine]") for p in prompts[1:])
    answer0 = example_responder(prompts[0], 6)
    assert f"| {answer0} |" in prompts[1]


async def test_tree_summarize_grows_levels(vclock):
    graph = tree_summarize_graph(pack_chars=450, k=8)
    value, trace = await Runtime(engines(), inline_sync=True).run(graph, example_inputs(n_chunks=16))
    grown = [n for n in trace.graph.nodes if ".L" in n]
    assert grown and trace.graph.meta["expansions"]
    leaves = trace.spans_of("synth.summarize")
    assert len(leaves) > 1 and max(s.start for s in leaves) < min(s.end for s in leaves)
    assert value == (await reference_run(graph, example_inputs(n_chunks=16), engines(), inline_sync=True))[0]


async def test_tree_summarize_that_cannot_converge_fails_clearly(vclock):
    from ayo_core.runtime import NodeFailed

    graph = tree_summarize_graph(pack_chars=300, k=8)  # 24-word summaries never fit two to a context
    with pytest.raises(NodeFailed, match="did not converge"):
        await Runtime(engines(), inline_sync=True).run(graph, example_inputs(n_chunks=16))


def test_synthesis_rejects_bad_modes():
    with pytest.raises(ValueError, match="not one of"):
        Synthesis("fancy", lambda **kw: "")
    with pytest.raises(ValueError, match="needs render_refine"):
        Synthesis("refine", lambda **kw: "")
    assert Synthesis("tree", lambda **kw: "").mode == "tree_summarize"
    assert Synthesis("compact_accumulate", lambda **kw: "").mode == "accumulate"


async def test_llm_call_prefix_transform_tool_and_opaque(vclock):
    calls = []

    class UserObject:
        def __call__(self, text):
            calls.append(text)
            return text.upper()

    g = Graph("l")
    g.input("q")
    g.input("ctx")
    Transform(lambda ctx: ctx.strip()).build(g, "clean", {"ctx": "ctx"})
    LLMCall(lambda q, c: f"[qa] {q} {c}", max_tokens=4, prefix=(["q"], lambda q: f"[qa] {q}"),
            parse=str.upper).build(g, "answer", {"q": "q", "c": "clean"})
    ToolCall(lambda answer: f"logged {answer}").build(g, "log", {"answer": "answer"})
    Opaque(UserObject()).build(g, "legacy", {"text": "log"})
    g.output("legacy")
    out = optimize_graph(g)
    assert out["answer.prefill"].inputs == {"q": "q"}
    assert g["log"].side_effect and g["log"].op is Op.TOOL_CALL and g["legacy"].op is Op.OPAQUE
    value, _ = await Runtime(engines()).run(out, {"q": "what", "ctx": "  some context "})
    assert value.startswith("LOGGED ") and value == value.upper() and len(calls) == 1


def test_helpers():
    assert to_records(["a", {"id": "x", "text": "b", "metadata": {"k": 1}}])[1] == {
        "id": "x", "text": "b", "metadata": {"k": 1}}
    assert to_records(["a", "a"])[0]["id"] != to_records(["a", "a"])[1]["id"]
    assert hit_text({"document": "d"}) == "d" and hit_text("s") == "s"

    class Hit:
        document = "from attr"

    assert hit_text(Hit()) == "from attr"
    assert greedy_pack(["aa", "bb", "cc"], 6) == ["aa\n\nbb", "cc"]


def test_shape_cache_hands_out_per_query_copies_cheaply():
    cache = ShapeCache()
    builds = []

    def build():
        builds.append(1)
        return advanced_rag_graph("template", refine_steps=35)

    key = shape_key("app", Synthesis("refine", lambda **kw: "", render_refine=lambda **kw: "", n_steps=35))
    first = cache.get(key, build, "q0")
    assert len(first) >= 50 and first.meta["overhead"]["passes"] > 0
    t0 = time.perf_counter()
    copies = [cache.get(key, build, f"q{i}") for i in range(1, 201)]
    per_query = (time.perf_counter() - t0) / 200
    assert per_query < 1e-3, f"build+optimize per query {per_query * 1e6:.0f} us"
    assert len(builds) == 1 and cache.hits == 200 and cache.misses == 1
    assert copies[0].query_id == "q1" and copies[0].signature() == first.signature()
    assert copies[0].meta["overhead"]["passes"] == 0.0 and copies[0].meta["passes"] == first.meta["passes"]
    copies[0].add(copies[0]["question"].replace(name="extra"))
    assert "extra" not in copies[1] and "extra" not in first


def test_step_templates_and_flow_templates():
    """What an adapter uses to run its framework's own code per step under its own node names
    (StepRetrieval, StepLLMCall with a ready PrefixSpec) and the flow templates (Aggregate, Route, Warmup)."""
    from ayo_core.graph import PrefixSpec
    from ayo_core.templates import Aggregate, Route, StepLLMCall, StepRetrieval, Warmup

    async def hook(ctx, **kw):
        return kw

    g = Graph("h")
    g.input("q")
    split = StepRetrieval("r", embed=hook, search=hook, names=("1.embed", "2.search"), costs=(0.1, 0.2))
    assert split.build(g, "ignored", {"query": "q"}) == "2.search"
    assert g["1.embed"].fn is hook and g["2.search"].inputs == {"vector": "1.embed"} and g["2.search"].cost == 0.2
    assert (g["1.embed"].op, g["2.search"].op) == (Op.EMBED, Op.SEARCH)
    whole = StepRetrieval("r", per_part=True, retrieve=hook, costs=(0.1, 0.2)).build(g, "3.each", {"query": "q"})
    assert g[whole].op is Op.SEARCH and g[whole].meta["per_part"] == "query" and g[whole].cost == pytest.approx(0.3)
    with pytest.raises(ValueError, match="needs embed= and search=, or retrieve="):
        StepRetrieval("r", embed=hook)
    spec = PrefixSpec(("early",), hook)
    StepLLMCall(lambda prompt, **_: prompt, "m", call=hook, prefix_spec=spec).build(
        g, "4.llm", {"prompt": "q", "early": "q"})
    assert g["4.llm"].meta["prefix"] is spec and g["4.llm"].op is Op.DECODE and g["4.llm"].engine == "llm"
    assert g[Aggregate(hook, takes_ctx=True).build(g, "5.union", {"a": "q"})].op is Op.AGGREGATE
    assert g[Route(hook, takes_ctx=True).build(g, "6.branch", {"value": "q"})].op is Op.TRANSFORM
    warm = g[Warmup(hook, takes_ctx=True, per_part="part").build(g, "7.warm", {"part": whole})]
    assert warm.op is Op.PARTIAL_PREFILL and warm.engine == "llm" and warm.meta["optional"]
    assert list(g.nodes)[-1] == "7.warm" and g["5.union"].engine == "local" and "optional" not in g["5.union"].meta


async def test_run_within_runs_sync_and_async_node_fns_inside_their_scope() -> None:
    """``run_within``: the named nodes (an async and a sync fn, the latter in a thread) see the scope that
    an earlier node opened for their query; a node left out does not; the optimized graph keeps it."""
    import contextlib
    import contextvars

    from ayo_core.templates.base import run_within

    inside: contextvars.ContextVar[str | None] = contextvars.ContextVar("inside", default=None)
    opened: dict[str, str] = {}

    def open_scope(ctx, q):
        opened[ctx.query_id] = f"scope of {q}"
        return q

    @contextlib.contextmanager
    def scope(ctx):
        token = inside.set(opened[ctx.query_id])
        try:
            yield
        finally:
            inside.reset(token)

    async def seen_async(q):
        return inside.get()

    def seen_sync(q):
        return inside.get()

    def returns_a_coroutine(q):  # a plain function returning a coroutine: the runtime awaits it later
        return seen_async(q)

    g = Graph()
    g.input("q")
    first = Transform(open_scope, takes_ctx=True).build(g, "open", {"q": "q"})
    Transform(seen_async).build(g, "a", {"q": first})
    Transform(seen_sync).build(g, "s", {"q": first})
    Transform(returns_a_coroutine).build(g, "c", {"q": first})
    Transform(seen_sync).build(g, "outside", {"q": first})
    out = Transform(lambda a, s, c, outside: (a, s, c, outside)).build(
        g, "all", {"a": "a", "s": "s", "c": "c", "outside": "outside"})
    g.output(out)
    run_within(g, ["a", "s", "c"], scope)
    value, _ = await Runtime(engines()).run(optimize_graph(g), {"q": "x"})
    assert value == ("scope of x", "scope of x", "scope of x", None)
