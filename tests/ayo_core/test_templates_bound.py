"""Templates bound to an adapter's callables (``ayo_core.templates.bound``): step structure, meta,
stock-order edges, and equality of the optimized run with the reference interpreter."""

from __future__ import annotations

from typing import Any

import pytest

from ayo_core.graph import Graph, Op, PrefixSpec
from ayo_core.passes import optimize_graph
from ayo_core.runtime import Runtime, reference_run
from ayo_core.runtime.fakes import fake_engines
from ayo_core.templates import (
    FusionHooks,
    FusionRetrieval,
    Indexing,
    IndexingHooks,
    LocalRerank,
    Opaque,
    Rerank,
    RerankHooks,
    Retrieval,
    RetrievalHooks,
    Synthesis,
    SynthesisHooks,
)
from ayo_core.templates.base import call_llm
from ayo_core.templates.examples import example_responder, parse_lines


def engines() -> Any:
    return fake_engines("gpu", example_responder)


async def _embed(ctx: Any, query: str) -> int:
    return len(query)


async def _search(ctx: Any, query: str, embedded: int) -> list[str]:
    return [f"{query}:{i}" for i in range(embedded % 4 + 1)]


def test_bound_retrieval_keeps_steps_and_waits_only_in_search() -> None:
    g = Graph("b")
    g.input("q")
    g.input("ingested")
    out = Retrieval(module="retriever", hooks=RetrievalHooks(_embed, _search, engine="embed")).build(
        g, "retrieve", {"query": "q"}, after=["ingested"])
    assert out == "retrieve.search"
    embed, search = g["retrieve.embed"], g["retrieve.search"]
    assert (embed.op, embed.engine, embed.batchable, embed.after) == (Op.EMBED, "embed", True, frozenset())
    assert search.op is Op.SEARCH and search.after == {"ingested"}
    assert search.inputs == {"query": "q", "embedded": "retrieve.embed"}
    assert "resources" not in search.meta  # the adapter's store: unknown to the core
    with pytest.raises(ValueError, match="needs inputs \\['query'\\]"):
        Retrieval(hooks=RetrievalHooks(_embed, _search)).build(g, "bad", {})


def test_bound_indexing_writes_its_collection() -> None:
    async def vectors(ctx: Any) -> list[list[float]]:
        return [[1.0]]

    async def add(ctx: Any, vectors: list) -> int:
        return len(vectors)

    g = Graph("i")
    out = Indexing("store7", module="indexing", hooks=IndexingHooks(vectors, add, n_chunks=5)).build(g, "ingest0", {})
    assert out == "ingest0.add" and list(g.nodes) == ["ingest0.embed", "ingest0.add"]
    assert g["ingest0.embed"].cost == pytest.approx(0.1)
    assert g["ingest0.add"].side_effect and g["ingest0.add"].meta["resources"] == {"vector:store7"}


async def _batches(ctx: Any, query: str, nodes: list[str]) -> list[list[str]]:
    return [nodes[i:i + 2] for i in range(0, len(nodes), 2)]


async def _choose(ctx: Any, query: str, batch: list[str]) -> str:
    return await call_llm(ctx, f"[rerank n={len(batch)}] {query} {batch}", max_tokens=8)


async def _merge(ctx: Any, batches: list, raw: list[str]) -> list[str]:
    scored = [(hit, int(score)) for batch, text in zip(batches, raw, strict=True)
              for hit, score in zip(batch, text.split(), strict=False)]
    return [hit for hit, _ in sorted(scored, key=lambda p: -p[1])[:2]]


def _fusion_hooks() -> FusionHooks:
    async def expand(ctx: Any, query: str) -> list[str]:
        return parse_lines(await call_llm(ctx, f"[expand n=3] {query}", max_tokens=40, stream=True))

    async def original(ctx: Any, query: str) -> list[str]:
        return await _search(ctx, query, len(query))

    async def generated(ctx: Any, queries: str) -> list[str]:
        return await _search(ctx, queries, len(queries))

    async def fuse(ctx: Any, query: str, original: list, generated: list, queries: list) -> list[str]:
        return sorted({hit for hits in [original, *generated] for hit in hits})

    return FusionHooks(expand=expand, parts=parse_lines, original=original, generated=generated, fuse=fuse,
                       engine="llm")


def advanced_graph() -> Graph:
    """query -> fusion retrieval -> local transform -> LLM rerank (bound) -> synthesis (bound)."""

    async def synthesize(ctx: Any, query: str, nodes: list[str]) -> str:
        return await call_llm(ctx, f"[qa] {query} {nodes}", max_tokens=8)

    async def prefix(ctx: Any, query: str) -> None:
        await ctx.llm.prefill(prompt=f"[qa] {query}")

    g = Graph("adv")
    g.input("query")
    hits = FusionRetrieval(_fusion_hooks(), "retriever").build(g, "retrieve", {"query": "query"})
    local = LocalRerank(lambda ctx, query, nodes: list(nodes), "post0", takes_ctx=True, resources=None).build(
        g, "post0", {"query": "query", "nodes": hits})
    kept = Rerank(2, module="post1", hooks=RerankHooks(_batches, _choose, _merge, engine="llm")).build(
        g, "post1", {"query": "query", "nodes": local})
    hooks = SynthesisHooks(synthesize, engine="llm", prefix=PrefixSpec(("query",), prefix))
    g.output(Synthesis("simple_summarize", module="synthesizer", hooks=hooks).build(
        g, "synthesize", {"query": "query", "nodes": kept}))
    return g


def test_bound_fusion_rerank_synthesis_structure() -> None:
    g = advanced_graph()
    assert list(g.nodes)[1:5] == ["retrieve.expand", "retrieve.original", "retrieve.generated", "retrieve.fuse"]
    assert g["retrieve.expand"].streamable and g["retrieve.expand"].meta["parts"] is parse_lines
    assert g["retrieve.generated"].meta["per_part"] == "queries"
    assert g["post0"].op is Op.RERANK
    assert [g[f"post1.{s}"].op for s in ("batches", "choose", "merge")] == [Op.TRANSFORM, Op.DECODE, Op.AGGREGATE]
    assert g["post1.choose"].meta["per_part"] == "batch" and g["post1.choose"].engine == "llm"
    synth = g["synthesize"]
    assert synth.op is Op.DECODE and synth.meta["mode"] == "simple_summarize" and "prefix" in synth.meta
    g.lint()


async def test_bound_graph_equals_reference_interpreter(vclock) -> None:
    g = advanced_graph()
    optimized = optimize_graph(g)
    assert optimized["retrieve.generated"].meta.get("pipelined")
    value, _ = await Runtime(engines()).run(optimized, {"query": "how do caches work"})
    expected, _ = await reference_run(g, {"query": "how do caches work"}, engines())
    assert value == expected and isinstance(value, str) and value


def test_opaque_and_transform_keep_the_reason() -> None:
    g = Graph("o")
    g.input("q")
    Opaque(lambda ctx, query: query, "query_engine", takes_ctx=True, resources=None, cost=1.0,
           reason="a custom engine").build(g, "query_engine", {"query": "q"}, after=["q"])
    node = g["query_engine"]
    assert node.meta == {"reason": "a custom engine"} and node.cost == 1.0 and node.after == {"q"}


def test_bound_synthesis_needs_no_render_hooks_but_plain_synthesis_does() -> None:
    with pytest.raises(ValueError, match="render_qa"):
        Synthesis("compact")
    assert Synthesis("compact", hooks=SynthesisHooks(lambda ctx: "")).mode == "compact"
    with pytest.raises(ValueError, match="render"):
        Rerank(2, mode="llm")
