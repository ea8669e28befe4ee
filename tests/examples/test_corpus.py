"""The corpus: stdlib docstrings, deterministic and idempotent."""

from __future__ import annotations

import json
from pathlib import Path

from ayo_examples import corpus


def test_documents_are_deterministic_and_well_formed() -> None:
    first, second = corpus.build_documents(), corpus.build_documents()
    assert first == second
    assert 300 <= len(first) <= 600
    ids = [d["id"] for d in first]
    assert len(set(ids)) == len(ids)
    for d in first:
        assert set(d) == {"id", "title", "text"}
        assert d["text"].strip() and len(d["text"]) <= corpus.MAX_CHARS
    by_id = {d["id"]: d for d in first}
    assert by_id["json.dumps"]["text"].startswith("json.dumps(obj, *,")
    assert "JSON" in by_id["json.dumps"]["text"]


def test_module_list_is_sorted_and_free_of_side_effect_modules() -> None:
    assert list(corpus.MODULES) == sorted(corpus.MODULES)
    assert not {"antigravity", "this", "idlelib", "tkinter", "turtle", "webbrowser"} & set(corpus.MODULES)


def test_prepare_is_idempotent(tmp_path: Path) -> None:
    path = corpus.prepare_corpus(tmp_path)
    data, mtime = path.read_bytes(), path.stat().st_mtime_ns
    assert corpus.prepare_corpus(tmp_path) == path
    assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime  # not rewritten
    manifest = json.loads((path.parent / corpus.MANIFEST_FILE).read_text())
    assert manifest["documents"] == len(data.splitlines())
    assert corpus.load_corpus(tmp_path) == corpus.build_documents()


def test_prepare_repairs_a_damaged_file(tmp_path: Path) -> None:
    path = corpus.prepare_corpus(tmp_path)
    good = path.read_bytes()
    path.write_text("garbage\n")
    corpus.prepare_corpus(tmp_path)
    assert path.read_bytes() == good


def test_get_documents_keeps_order_and_names_missing_ids(tmp_path: Path) -> None:
    docs = corpus.get_documents(["json.loads", "json.dumps"], tmp_path)
    assert [d["id"] for d in docs] == ["json.loads", "json.dumps"]
    try:
        corpus.get_documents(["no.such.doc"], tmp_path)
    except KeyError as exc:
        assert "no.such.doc" in str(exc)
    else:
        raise AssertionError("a missing id must raise")
