"""``EngineSet``: one engine per distinct key within a family, kinds named in the order met, LLM
schedulers configured with the adapter's in-flight limit.

The engines here are fakes: plain ``object()`` s made by counting factories (no model, no server);
the set only stores them and the shared runtime only wraps them in schedulers.
"""

from __future__ import annotations

from typing import Any

import pytest

from ayo_core.pipeline import EngineSet
from ayo_core.pipeline.engines import EMBED, LLM
from ayo_core.runtime import llm_config


class CountingFactory:
    """Makes a fresh fake engine (a plain object) per call and counts the calls."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def __call__(self) -> Any:
        engine = object()
        self.made.append(engine)
        return engine


def test_one_engine_per_key_named_by_family_in_the_order_met() -> None:
    engines, make = EngineSet(), CountingFactory()
    a = ("http://a/v1", "m", "key")
    b = ("http://b/v1", "m", "key")
    assert engines.kind(LLM, a, make) == "llm"
    assert engines.kind(EMBED, ("folder", "x"), make) == "embed"
    assert engines.kind(LLM, b, make) == "llm1"
    assert engines.kind(LLM, a, make) == "llm"  # asked again: the same kind, no new engine
    assert engines.kind(EMBED, ("folder", "y"), make) == "embed1"
    assert len(make.made) == 4
    assert list(engines.engines) == ["llm", "embed", "llm1", "embed1"]
    assert engines.engines["llm"] is make.made[0] and engines.engines["llm1"] is make.made[2]
    assert engines.kind_of(LLM, b) == "llm1"
    assert engines.kind_of(LLM, ("http://c/v1", "m", "key")) is None
    assert engines.kind_of("rerank", "anything") is None  # a family never met


def test_a_failed_factory_names_no_kind() -> None:
    engines = EngineSet()

    def broken() -> Any:
        raise RuntimeError("no server")

    with pytest.raises(RuntimeError):
        engines.kind(LLM, "a", broken)
    assert engines.kind_of(LLM, "a") is None and engines.engines == {}
    assert engines.kind(LLM, "b", CountingFactory()) == "llm"  # the next key still gets the first name


def test_configs_give_every_llm_kind_the_in_flight_limit_and_nothing_else() -> None:
    engines, make = EngineSet(), CountingFactory()
    assert engines.configs(64) == {}
    for family, key in ((LLM, "a"), (EMBED, "e"), (LLM, "b")):
        engines.kind(family, key, make)
    assert engines.configs(64) == {"llm": llm_config(64), "llm1": llm_config(64)}
    assert engines.configs(128)["llm1"].max_inflight == 128


async def test_shared_runtime_is_the_process_one_over_these_engines() -> None:
    engines, make = EngineSet(), CountingFactory()
    engines.kind(LLM, "a", make)
    engines.kind(EMBED, "e", make)
    rt = engines.shared_runtime("critical_path", 48)
    assert engines.shared_runtime("critical_path", 48) is rt  # one per engine set and policy
    assert rt.engines.llm is make.made[0] and rt.engines.embed is make.made[1]
    assert rt.schedulers["llm"].config.max_inflight >= 48
