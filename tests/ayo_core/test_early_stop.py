"""The early-stop pass: a decode whose consumer keeps only its first n parts ends once they are final."""

from __future__ import annotations

from typing import Any

from ayo_core.graph import Graph
from ayo_core.passes import early_stop, optimize_graph
from ayo_core.runtime import Runtime, reference_run
from ayo_core.runtime.fakes import fake_engines
from ayo_core.templates import LLMCall, Transform
from ayo_core.templates.examples import example_responder, parse_lines


def expansion_graph(keep_parts: int | None, parts: Any = parse_lines) -> Graph:
    """A 4-line expansion whose consumer keeps the first 2 lines, each line searched as it is decoded."""
    g = Graph("e")
    g.input("q")
    LLMCall(lambda q: f"[expand n=4] {q}", "expand", max_tokens=80, parts=parts, keep_parts=keep_parts).build(
        g, "expand", {"q": "q"})
    Transform(lambda line: line.upper(), "search", per_part="line").build(g, "search", {"line": "expand"})
    g.output("expand")
    return g


def test_pass_marks_only_bounded_streamable_decodes_and_records_itself() -> None:
    g = expansion_graph(keep_parts=2)
    result = early_stop(g)
    assert result.changed and result.graph["expand"].meta["early_stop"]
    assert list(result.graph.nodes) == list(g.nodes)  # order kept: it breaks ties in the topological order
    assert result.graph.meta["optimizations"] == [
        {"name": "early_stop", "node": "expand",
         "detail": "the decode stops once 2 parts are final (its consumer keeps only those)"}]
    result.graph.lint()
    assert not early_stop(result.graph).changed  # idempotent
    assert not early_stop(expansion_graph(keep_parts=None)).changed
    assert not early_stop(expansion_graph(keep_parts=2, parts=None)).changed  # no parser: no part boundary
    assert "optimizations" not in g.meta  # pure: the input graph is untouched


async def test_stopped_decode_keeps_the_parts_its_consumer_reads(vclock) -> None:
    engines = fake_engines("gpu", example_responder)
    g = expansion_graph(keep_parts=2)
    optimized = optimize_graph(g)
    assert ("early_stop", True) in optimized.meta["passes"]
    stopped, _ = await Runtime(engines).run(optimized, {"q": "cache"})
    full, _ = await reference_run(g, {"q": "cache"}, fake_engines("gpu", example_responder))
    assert parse_lines(stopped)[:2] == parse_lines(full)[:2]
    assert len(parse_lines(full)) == 4 and len(stopped) < len(full)  # lines 3-4 were never decoded
    unstopped, _ = await Runtime(fake_engines("gpu", example_responder)).run(
        optimize_graph(g, ["decode_pipelining"]), {"q": "cache"})
    assert unstopped == full  # without the pass the decode runs to the end
