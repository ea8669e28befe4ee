"""Shared runtimes: one per engine set, policy and loop; one scheduler per engine; priorities never
worse than a foreign client's; the api-key-aware engine registry."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.engines import registry
from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime import (
    PRIORITY_SPAN,
    CostModel,
    EngineRequest,
    NeverBelowDefault,
    bridge,
    llm_config,
    runtime_on_shared_schedulers,
    shared_runtime,
    shared_schedulers,
)
from ayo_core.runtime.fakes import FakeEmbedding, FakeLLM


def llm_graph(query: str, tokens: int) -> Graph:
    async def decode(ctx, q):
        return (await ctx.llm.complete(q, max_tokens=tokens)).text

    g = Graph(query)
    g.input("q")
    g.add(Node("decode", Op.DECODE, fn=decode, inputs={"q": "q"}, engine="llm", cost=tokens * 0.01))
    g.output("decode")
    return g


async def test_one_runtime_per_engine_set_and_policy_and_one_scheduler_per_engine() -> None:
    llm, embed_a, embed_b = FakeLLM(), FakeEmbedding(), FakeEmbedding()
    a = shared_runtime({"llm": llm, "embed": embed_a})
    assert shared_runtime({"embed": embed_a, "llm": llm}) is a
    assert shared_runtime({"llm": llm, "embed": embed_a}, "fifo") is not a
    b = shared_runtime({"llm": llm, "embed": embed_b})
    assert b is not a and b.schedulers["llm"] is a.schedulers["llm"]  # they meet in the LLM scheduler
    assert b.schedulers["embed"] is not a.schedulers["embed"]
    own = runtime_on_shared_schedulers({"llm": llm}, costs=CostModel())
    assert own is not a and own.schedulers["llm"] is a.schedulers["llm"]
    assert isinstance(a.policy, NeverBelowDefault) and a.policy.name == "critical_path"
    assert a.schedulers["llm"] in shared_schedulers()


async def test_in_flight_limit_is_the_largest_asked_for() -> None:
    llm = FakeLLM()
    small = shared_runtime({"llm": llm}, configs={"llm": llm_config(64)})
    assert small.schedulers["llm"].config.max_inflight == 64
    runtime_on_shared_schedulers({"llm": llm}, configs={"llm": llm_config(128)})
    assert small.schedulers["llm"].config.max_inflight == 128
    runtime_on_shared_schedulers({"llm": llm}, configs={"llm": llm_config(8)})
    assert small.schedulers["llm"].config.max_inflight == 128


async def test_each_event_loop_gets_its_own_runtime() -> None:
    llm = FakeLLM()
    here = shared_runtime({"llm": llm})

    async def other() -> object:
        return shared_runtime({"llm": llm})

    elsewhere = await asyncio.to_thread(asyncio.run, other())
    assert elsewhere is not here and elsewhere.schedulers["llm"] is not here.schedulers["llm"]
    on_bridge = bridge.run_sync(other())
    assert on_bridge is bridge.run_sync(other()) and on_bridge is not here


async def test_priorities_sent_are_never_worse_than_the_default() -> None:
    llm = FakeLLM(max_concurrency=1)
    first = shared_runtime({"llm": llm})
    second = runtime_on_shared_schedulers({"llm": llm})
    jobs = [first.run(llm_graph(f"a{i}", 4 + 8 * i), {"q": f"question {i}"}) for i in range(3)]
    jobs += [second.run(llm_graph(f"b{i}", 30), {"q": f"other {i}"}) for i in range(3)]
    await asyncio.gather(*jobs)
    assert len(llm.calls) == 6 and all(c.priority <= 0 for c in llm.calls)
    stats = first.schedulers["llm"].statistics()
    assert stats.submitted == 6 and stats.finished == 6  # both pipelines' requests went through one scheduler


def test_never_below_default_keeps_the_policys_order() -> None:
    policy = NeverBelowDefault("critical_path")
    urgent, relaxed, idle = (EngineRequest("llm", "complete", (), {}, slack=s) for s in (0.0, 2.5, 1000.0))
    assert policy.priority(urgent) == -PRIORITY_SPAN < policy.priority(relaxed) == 2500 - PRIORITY_SPAN
    assert policy.priority(idle) == 0
    assert policy.key(urgent) < policy.key(relaxed)
    with pytest.raises(ValueError, match="valid policies"):
        NeverBelowDefault("shortest_first")


def test_registry_shares_one_engine_per_server_model_and_key() -> None:
    registry.reset_engines()
    try:
        plain = registry.get_llm_engine("http://127.0.0.1:1/v1", model="m", api_key="EMPTY")
        assert registry.get_llm_engine("http://127.0.0.1:1/v1/", model="m") is plain
        assert registry.get_llm_engine("http://127.0.0.1:1/v1", model="m", api_key="none") is plain
        keyed = registry.get_llm_engine("http://127.0.0.1:1/v1", model="m", api_key="sk-real")
        assert isinstance(keyed, registry.KeyedLLMEngine) and not isinstance(plain, registry.KeyedLLMEngine)
        assert registry.get_llm_engine("http://127.0.0.1:1/v1", model="m", api_key="sk-real") is keyed

        async def headers() -> tuple:
            return keyed._client().headers.get("Authorization"), plain._client().headers.get("Authorization")

        assert asyncio.run(headers()) == ("Bearer sk-real", None)
    finally:
        registry.reset_engines()
