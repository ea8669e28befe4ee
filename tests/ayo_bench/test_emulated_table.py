"""``ayo_bench/emulated_table.py``: rows measured on a dirty tree are named, with the cause, in the header."""

from __future__ import annotations

from typing import Any

from ayo_bench.emulated_table import _dirty_note


def _result(dirty: bool, elsewhere: list[str] | None = None) -> dict[str, Any]:
    git: dict[str, Any] = {"commit": "f6a37e4", "dirty": dirty, "source": "git checkout"}
    if elsewhere:
        git["imported_elsewhere"] = elsewhere
    return {"provenance": {"git": git}}


def test_dirty_rows_are_named_with_their_cause() -> None:
    results = {("naive_rag", "cpu-local"): _result(True, ["ayo_examples"]),
               ("graph", "cpu-local-proxy"): _result(True),
               ("agent", "a100-llama2-7b"): _result(False)}
    note = _dirty_note(results)
    assert "ayo_examples imported from another checkout): naive_rag cpu-local" in note
    assert "uncommitted changes): graph cpu-local-proxy" in note
    assert "agent" not in note


def test_a_clean_table_has_no_note() -> None:
    assert _dirty_note({("agent", "a100-llama2-7b"): _result(False)}) == ""
