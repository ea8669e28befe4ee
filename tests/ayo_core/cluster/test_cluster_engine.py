"""The cluster engine's pure parts, without Ray: routers, prefix blocks, failover, stream resume.

Replicas here are in-process fake engines (unit tests of routing and failover bookkeeping);
the same code runs against Ray actors and vLLM servers in the other tests of this folder.
"""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.cluster.engine import ClusterLLMEngine, is_replica_failure, static_replicas
from ayo_core.cluster.replicas import parse_vllm_metrics
from ayo_core.cluster.routing import ReplicaLoad, get_router, prompt_blocks
from ayo_core.engines.llm_client import LLMEngineError, LLMRequestError, LLMResult
from ayo_core.runtime.fakes import FakeLLM, LatencyModel


def test_prompt_blocks_share_exactly_the_shared_prefix():
    a, b = prompt_blocks("x" * 300 + "tail one"), prompt_blocks("x" * 300 + "other tail")
    assert a[:2] == b[:2] and a[2] != b[2]
    assert prompt_blocks([1] * 70)[:2] == prompt_blocks([1] * 64 + [2] * 6)[:2]
    assert prompt_blocks(messages=[{"role": "user", "content": "hi"}]) != prompt_blocks("hi")


def test_routers():
    loads = [ReplicaLoad("a"), ReplicaLoad("b", outstanding=3, outstanding_work=50), ReplicaLoad("c", alive=False)]
    rr = get_router("round_robin")
    assert [rr.choose((), loads).name for _ in range(4)] == ["a", "b", "a", "b"]  # the dead one is skipped
    assert get_router("least_outstanding").choose((), loads).name == "a"
    aff = get_router("prefix_affinity")
    aff.record((1, 2, 3), loads[1])
    assert aff.choose((1, 2, 9), loads).name == "b"  # longest known prefix wins over less load...
    loads[1].outstanding = 20
    assert aff.choose((1, 2, 9), loads).name == "a"  # ...unless its replica is overloaded
    aff.forget("b")
    loads[1].outstanding = 0
    assert aff.choose((1, 2, 9), loads).name in ("a", "b")
    with pytest.raises(LookupError):
        rr.choose((), [ReplicaLoad("x", alive=False)])


def test_replica_failures_are_told_from_request_errors():
    assert is_replica_failure(LLMEngineError("connection refused", "http://x"))
    assert is_replica_failure(LLMRequestError("unavailable", "http://x", 503))
    assert not is_replica_failure(LLMRequestError("prompt too long", "http://x", 400))
    assert not is_replica_failure(ValueError("bad"))
    assert is_replica_failure(type("ActorDiedError", (Exception,), {})())


class DyingLLM(FakeLLM):
    """Fails every request after ``after`` started ones, the way a dead server does."""

    def __init__(self, after: int) -> None:
        super().__init__(LatencyModel(per_token=0.001))
        self.after, self.started = after, 0

    async def complete(self, prompt, max_tokens=16, stream_cb=None, **kw):
        self.started += 1
        if self.started > self.after:
            if stream_cb is not None:  # the first characters of the (greedy) answer went out, then it died
                stream_cb((await FakeLLM().complete(prompt, max_tokens=max_tokens)).text[:3])
            raise LLMEngineError("server closed the connection", "http://dead")
        return await super().complete(prompt, max_tokens=max_tokens, stream_cb=stream_cb, **kw)


async def test_failover_resends_and_a_stream_resumes_without_repeats():
    healthy = FakeLLM(LatencyModel(per_token=0.001))
    engine = ClusterLLMEngine(static_replicas([("dying", DyingLLM(after=1)), ("ok", healthy)]),
                              router="round_robin")
    reference = FakeLLM()
    prompts = [f"p{i}" for i in range(6)]
    parts: dict[str, list[str]] = {p: [] for p in prompts}
    results = await asyncio.gather(*(engine.complete(p, max_tokens=4, stream_cb=parts[p].append) for p in prompts))
    expected = [(await reference.complete(p, max_tokens=4)).text for p in prompts]
    assert [r.text for r in results] == expected
    assert all("".join(parts[p]) == e for p, e in zip(prompts, expected, strict=True))
    assert engine.resent >= 1 and not engine.replicas["dying"].load.alive


class ToolCallingLLM:
    """Streams two tool-call events; with ``dies``, the first event goes out and then the server dies."""

    model = "fake"

    def __init__(self, dies: bool) -> None:
        self.dies = dies

    async def chat(self, messages, stream_cb=None, tool_call_cb=None, **kw):
        events = [[{"index": 0, "id": "c1", "function": {"name": "add", "arguments": ""}}],
                  [{"index": 0, "function": {"arguments": "{}"}}]]
        for n, event in enumerate(events):
            if self.dies and n == 1:
                raise LLMEngineError("server closed the connection", "http://dead")
            tool_call_cb(event)
        return LLMResult("", finish_reason="tool_calls")


async def test_a_failover_resumes_a_streams_tool_call_deltas_without_repeats():
    engine = ClusterLLMEngine(static_replicas([("dying", ToolCallingLLM(dies=True)), ("ok", ToolCallingLLM(False))]),
                              router="round_robin")
    seen: list = []
    result = await engine.chat([{"role": "user", "content": "hi"}], tool_call_cb=seen.append)
    assert result.finish_reason == "tool_calls" and engine.resent == 1
    assert seen == [[{"index": 0, "id": "c1", "function": {"name": "add", "arguments": ""}}],
                    [{"index": 0, "function": {"arguments": "{}"}}]]


async def test_no_live_replica_fails_with_a_clear_error():
    engine = ClusterLLMEngine(static_replicas([]), failover_timeout=0.2, name="empty")
    with pytest.raises(LLMEngineError, match="no live LLM replica in cluster 'empty'"):
        await engine.complete("x", max_tokens=1)


def test_vllm_metrics_are_summed():
    text = ('# HELP x\nvllm:prefix_cache_queries_total{model_name="m"} 100.0\n'
            'vllm:prefix_cache_hits_total{model_name="m"} 40.0\nvllm:num_requests_running{model_name="m"} 2.0\n')
    m = parse_vllm_metrics(text)
    assert (m["prefix_queries"], m["prefix_hits"], m["running"]) == (100.0, 40.0, 2.0)
