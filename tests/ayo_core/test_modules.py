"""The module graph type and by-type dispatch (no framework needed)."""

from __future__ import annotations

import pytest

from ayo_core.modules import BoundModule, ModuleGraph, TypeDispatch


def test_module_graph_splits_lowered_and_opaque() -> None:
    root = BoundModule("query_engine", "RetrieverQueryEngine", children=[
        BoundModule("retriever", "Retrieval", obj=object()),
        BoundModule("postprocessor[0]", "Opaque", obj=1, reason="custom class"),
        BoundModule("synthesizer", "Synthesis(mode=refine)"),
    ])
    mg = ModuleGraph(root)
    assert [m.name for m in mg.opaque()] == ["postprocessor[0]"]
    assert [m.name for m in mg.lowered()] == ["query_engine", "retriever", "synthesizer"]
    lines = mg.lines()
    assert lines[0] == "query_engine: RetrieverQueryEngine"
    assert lines[2] == "  postprocessor[0]: Opaque[int] -- custom class"


class Base:
    pass


class Child(Base):
    pass


class Other:
    pass


def test_dispatch_follows_the_mro_and_prefers_the_most_derived() -> None:
    d: TypeDispatch[str] = TypeDispatch("test")
    d.add(Base, "base")
    assert d.find(Child()) == "base"
    d.add(Child, "child")
    assert d.find(Child()) == "child" and d.find(Base()) == "base"
    assert d.find(Other()) is None
    with pytest.raises(TypeError, match="takes classes"):
        d.register("Base")(lambda: None)
