"""The touchpoint register: declaration, verification once per process, loud failures."""

from __future__ import annotations

import pytest

from ayo_shims import touchpoints as tp


def test_verify_names_the_missing_touchpoint_and_the_fix() -> None:
    tp.declare("json._no_such_internal", framework="python", checked="3.11", why="a test touchpoint",
               check=tp.has_attr("json", "JSONDecoder", "_no_such_internal"))
    with pytest.raises(tp.ShimError) as err:
        tp.verify("python")
    text = str(err.value)
    assert "json._no_such_internal" in text and "a test touchpoint" in text and "checked against 3.11" in text
    tp._REGISTRY.pop("json._no_such_internal")


def test_checks_pass_on_present_internals_and_run_once() -> None:
    calls = []

    def check() -> None:
        calls.append(1)

    tp.declare("test.counted", framework="test-fw", checked="1", why="counting", check=check)
    tp.verify("test-fw")
    tp.verify("test-fw")
    assert calls == [1]
    assert [t.name for t in tp.touchpoints("test-fw")] == ["test.counted"]
    tp._REGISTRY.pop("test.counted")


def test_check_builders() -> None:
    tp.has_attr("json", "JSONDecoder", "decode")()
    tp.has_params("json", "dumps", ["obj", "skipkeys"])()
    with pytest.raises(TypeError):
        tp.has_params("json", "dumps", ["nope"])()
    with pytest.raises(ImportError):
        tp.importable("no_such_module_xyz")()
