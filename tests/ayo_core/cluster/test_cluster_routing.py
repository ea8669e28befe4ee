"""Routing and scheduling policies across replicas, on fake-engine replicas in a real Ray cluster.

The replicas are :class:`~ayo_core.cluster.replicas.FakeLLMReplica` actors (deterministic text,
modelled latency in real time): the policies' promises are about *where* and *when* requests
run, which fake engines show without spending the shared CPUs on a model.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

from ayo_core.cluster.engine import ClusterLLMEngine
from ayo_core.cluster.replicas import ClusterSpec, deploy, ray_replica_source, remove_all, wait_ready
from ayo_core.cluster.routing import get_router
from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime import Engines, Runtime, SchedulerConfig, get_policy
from ayo_core.runtime.policies import ProgramPolicy

SYSTEM = "You answer questions about the cluster manual. " * 16  # ~700 chars: five prefix blocks


def fakes(group: str, n: int, max_concurrency: int = 8, per_token: float = 0.002) -> dict:
    spec = ClusterSpec(llm_replicas=n, detached=False, group=group, llm_cpus=0.1,
                       fake_llm={"latency": {"fixed": 0.001, "per_token": per_token, "per_prompt_token": 1e-5},
                                 "max_concurrency": max_concurrency})
    actors = deploy(spec)
    wait_ready(actors, timeout=180)
    return actors


def served_prompts(actors: dict) -> dict[str, list[str]]:
    return {name: [c[1] for c in ray.get(actor.calls.remote())] for name, actor in actors.items()}


def test_policies_and_routers_are_chosen_by_name():
    assert isinstance(get_policy("program"), ProgramPolicy)
    with pytest.raises(ValueError, match="round_robin, least_outstanding, prefix_affinity"):
        get_router("random")


async def test_prefix_affinity_sends_a_shared_prefix_family_to_one_replica(ray_cluster):
    actors = fakes("affinity", 3)
    family = [f"{SYSTEM}Question {i}: what does replica {i} hold?" for i in range(8)]
    others = [f"Unrelated request number {i} about something else entirely. " * 4 for i in range(8)]
    try:
        for router in ("prefix_affinity", "round_robin"):
            engine = ClusterLLMEngine(ray_replica_source("llm", group="affinity"), router=router)
            before = {n: len(p) for n, p in served_prompts(actors).items()}
            for fam, other in zip(family, others, strict=True):  # a steady trickle, two at a time
                await asyncio.gather(engine.complete(fam, max_tokens=2), engine.complete(other, max_tokens=2))
            served = {n: p[before[n]:] for n, p in served_prompts(actors).items()}
            holders = {n for n, prompts in served.items() if set(prompts) & set(family)}
            if router == "prefix_affinity":
                assert len(holders) == 1, served
                holder = engine.replicas[holders.pop()].load
                assert holder.cached_tokens > 0 and holder.hit_rate > 0.5  # the family's prefix stayed cached there
            else:
                assert len(holders) == 3  # the baseline spreads the family over every replica
    finally:
        remove_all(group="affinity")


def fan_out_graph(query_id: str, branches: int, tokens: int) -> Graph:
    async def decode(ctx, x):
        return (await ctx.llm.complete(x, max_tokens=tokens)).text

    g = Graph(query_id)
    g.input("x")
    for b in range(branches):
        g.add(Node(f"d{b}", Op.DECODE, fn=lambda c, x, b=b: decode(c, f"{x} part {b}"), inputs={"x": "x"},
                   engine="llm", cost=0.01 * tokens))
    g.add(Node("j", Op.AGGREGATE, fn=lambda c, **parts: sorted(parts.values()),
               inputs={f"p{b}": f"d{b}" for b in range(branches)}))
    g.output("j")
    return g


async def test_program_level_scheduling_finishes_a_short_query_first(ray_cluster):
    """A long query holds the only replica slot with four calls queued; a short query arrives.
    FCFS serves the long query's queue first; ``program`` (least attained service) lets the
    short query in as soon as the long one has received service."""
    # keep the handles: Ray collects a non-detached actor once no handle refers to it
    actors = fakes("program", 1, max_concurrency=1, per_token=0.02)  # 20 tokens: 0.4 s a call
    finished: dict[str, list[str]] = {}
    try:
        for policy in ("fifo", "program"):
            engine = ClusterLLMEngine(ray_replica_source("llm", group="program"), router="round_robin",
                                      max_inflight_per_replica=1)
            rt = Runtime(Engines(llm=engine), policy=policy, configs={"llm": SchedulerConfig(max_inflight=1)})
            order: list[str] = []

            async def run(graph: Graph, inputs: dict, delay: float, order: list[str] = order,
                          rt: Runtime = rt) -> None:
                await asyncio.sleep(delay)
                await rt.run(graph, inputs)
                order.append(graph.query_id)

            t0 = time.monotonic()
            await asyncio.gather(run(fan_out_graph("long", 4, 20), {"x": "long question"}, 0.0),
                                 run(fan_out_graph("short", 1, 2), {"x": "short question"}, 0.15))
            finished[policy] = order
            assert time.monotonic() - t0 < 30
        assert finished["fifo"] == ["long", "short"]
        assert finished["program"] == ["short", "long"]
        assert len(actors) == 1
    finally:
        remove_all(group="program")
