"""``docs/modules.md``'s coverage table (``benchmarks/coverage_table.py``) is what the adapters' registries give.

``test_committed_table_is_the_generated_one`` is the check: a module that changes state (a class added
to or dropped from a registry, a recognizer that now refuses it) without the doc regenerated fails it.
The flip tests show it can fail: one registry entry changed (monkeypatched) changes the generated table.
"""

from __future__ import annotations

import copy

import pytest

from ayo_core.coverage import STATES, CoverageRow, probe, render_markdown
from benchmarks import coverage_table


@pytest.fixture(scope="module")
def rows() -> list[CoverageRow]:
    return coverage_table.generated_rows()


def test_committed_table_is_the_generated_one(rows) -> None:
    made_with, installed = coverage_table.committed_versions(), coverage_table.framework_versions()
    if made_with != installed:  # another release may export other classes: the table is about its own
        pytest.skip(f"docs/modules.md was generated with {made_with}; installed: {installed} (run "
                    f"`{coverage_table.FIX}` to see what this release changes)")
    diff = coverage_table.differences(rows=rows)
    assert not diff, "\n".join(diff) + f"\n(- committed, + generated) run `{coverage_table.FIX}`"


def test_rows_are_well_formed(rows) -> None:
    assert {r.state for r in rows} == set(STATES)
    keys = [(r.framework, r.group, r.module, r.case) for r in rows]
    assert len(keys) == len(set(keys)), "a module listed twice in one group"
    assert all(r.why for r in rows), [r.module for r in rows if not r.why]
    text = render_markdown(rows)
    assert "0x" not in text, "an object address in the table: it would differ from run to run"


def test_the_required_groups_are_there(rows) -> None:
    from llama_index.core.response_synthesizers import ResponseMode

    cases = {r.case for r in rows if r.group == "response synthesizer modes"}
    assert cases == {f"response_mode={m.value!r}" for m in ResponseMode}
    groups = {(r.framework, r.group) for r in rows}
    for group in ("node postprocessors", "query engines", "retrievers", "chat engines"):
        assert ("LlamaIndex", group) in groups
    for group in ("capture module kinds", "retrievers (langchain_classic.retrievers)",
                  "document compressors (langchain_classic.retrievers.document_compressors)"):
        assert ("LangChain", group) in groups


def _state(rows: list[CoverageRow], group: str, name: str) -> str:
    return next(r.state for r in rows if r.group == group and r.module.endswith(f".{name}"))


def test_flipping_a_llamaindex_registry_entry_changes_the_table(rows, monkeypatch) -> None:
    from llama_index.core.postprocessor import PIINodePostprocessor

    from ayo_core.templates import Transform
    from ayo_llamaindex import coverage, postprocess

    flipped = copy.deepcopy(postprocess.LOCAL_TEMPLATES)  # classes and handlers are shared, not copied
    flipped.add(PIINodePostprocessor, Transform)
    monkeypatch.setattr(postprocess, "LOCAL_TEMPLATES", flipped)
    new = [r for r in rows if r.group != "node postprocessors" or r.framework != "LlamaIndex"]
    new += coverage.postprocessor_rows()
    assert _state(rows, "node postprocessors", "PIINodePostprocessor") == "opaque"
    assert _state(new, "node postprocessors", "PIINodePostprocessor") == "local node"
    diff = coverage_table.differences(rows=new)
    assert any(line.startswith("+") and "PIINodePostprocessor` | local node" in line for line in diff), diff


def test_flipping_a_langchain_recognizer_changes_the_table(rows, monkeypatch) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from ayo_langchain import capture as cap
    from ayo_langchain import coverage

    flipped = copy.deepcopy(cap.RECOGNIZERS)
    flipped.add(RunnableWithMessageHistory, lambda _capturer, r, wrappers: cap.Opaque(r, wrappers, "flipped"))
    monkeypatch.setattr(cap, "RECOGNIZERS", flipped)
    new = [r for r in rows if r.framework != "LangChain"] + coverage.coverage()
    assert _state(rows, "capture module kinds", "RunnableWithMessageHistory") == "lowered"
    assert _state(new, "capture module kinds", "RunnableWithMessageHistory") == "opaque"
    diff = coverage_table.differences(rows=new)
    assert any(line.startswith("+") and "RunnableWithMessageHistory` (" in line and "| flipped |" in line
               for line in diff), diff


def test_optimize_composed_dispatches_through_the_coverage_table(rows, monkeypatch) -> None:
    """``optimize_composed`` and the coverage rows read one table (``composed_engines.COMPOSED_ENGINES``):
    every exported query engine class goes to the stand-in of the first entry it is an instance of, or to
    the opaque engine when that entry's check gives a reason, and the five composed engines are its entries."""
    import llama_index.core.query_engine as li_query_engines
    from llama_index.core.base.base_query_engine import BaseQueryEngine

    from ayo_core.coverage import exported_classes
    from ayo_llamaindex import composed_engines

    names = ("sub_question", "router", "tool_router", "retriever_router", "transform")
    table = composed_engines.COMPOSED_ENGINES
    assert tuple(c.base for c in table) == (
        li_query_engines.SubQuestionQueryEngine, li_query_engines.RouterQueryEngine,
        li_query_engines.ToolRetrieverRouterQueryEngine, li_query_engines.RetrieverRouterQueryEngine,
        li_query_engines.TransformQueryEngine)
    named = tuple(c._replace(build=lambda *_a, _name=name, **_k: _name) for c, name in zip(table, names, strict=True))
    monkeypatch.setattr(composed_engines, "COMPOSED_ENGINES", named)
    monkeypatch.setattr(composed_engines, "OptimizedQueryEngine", lambda *_a, **_k: "opaque")
    for cls in exported_classes(li_query_engines, BaseQueryEngine):
        engine = probe(cls)
        entry = next((c for c in named if isinstance(engine, c.base)), None)
        want = None if entry is None else "opaque" if entry.not_lowered_reason(engine) is not None else entry.build()
        assert composed_engines.optimize_composed(engine, "fifo") == want, cls


def test_check_fails_with_the_fix_when_the_doc_is_stale(tmp_path, rows, capsys, monkeypatch) -> None:
    doc = tmp_path / "modules.md"
    stale = coverage_table.table(rows).replace("| local node |", "| opaque |", 1)
    doc.write_text(f"intro\n{coverage_table.START}\n{stale}\n{coverage_table.END}\n", encoding="utf-8")
    monkeypatch.setattr(coverage_table, "generated_rows", lambda: rows)
    assert coverage_table.main(["--check", "--doc", str(doc)]) == 1
    assert coverage_table.FIX in capsys.readouterr().out
    assert coverage_table.main(["--update", "--doc", str(doc)]) == 0
    assert coverage_table.main(["--check", "--doc", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8").startswith("intro\n")
