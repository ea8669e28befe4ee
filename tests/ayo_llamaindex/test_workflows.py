"""ayo_llamaindex.optimize() on LlamaIndex Workflows (package `workflows`) and their ecosystem's objects."""

from __future__ import annotations

import logging

import pytest

import ayo_llamaindex


@pytest.mark.parametrize("make", [
    lambda: __import__("workflows.events", fromlist=["StopEvent"]).StopEvent(result="done"),
    lambda: __import__("llama_index_instrumentation", fromlist=["get_dispatcher"]).get_dispatcher("ayo-test"),
], ids=["workflows.StopEvent", "llama_index_instrumentation.Dispatcher"])
def test_ecosystem_objects_come_back_unchanged_with_a_warning(make, caplog) -> None:
    # objects of LlamaIndex's own packages outside llama_index.* (workflows, instrumentation) are never refused
    target = make()
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
        assert ayo_llamaindex.optimize(target) is target
    assert f"{type(target).__name__} is returned unchanged" in caplog.text


def test_a_plain_object_is_still_refused() -> None:
    with pytest.raises(TypeError, match="takes a LlamaIndex query engine or a function"):
        ayo_llamaindex.optimize(42)
