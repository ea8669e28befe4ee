"""Faults during a run of queries: an LLM replica killed, a node leaving. None is lost or answered twice.

Replicas are fake-engine actors (deterministic text, latency in real time) so the test spends
no shared CPU on a model; the faults are real: Ray kills the actor process, the node's raylet
and workers are removed, Ray restarts the replicas (elsewhere for the node's).
"""

from __future__ import annotations

import asyncio

import ray

from ayo_core.cluster.engine import ClusterLLMEngine
from ayo_core.cluster.ray_env import NAMESPACE
from ayo_core.cluster.replicas import ClusterSpec, deploy, ray_replica_source, remove_all, wait_ready
from ayo_core.runtime.fakes import FakeLLM, LatencyModel

N_QUERIES = 50


async def test_killing_a_replica_and_a_node_mid_run_loses_no_query(ray_cluster):
    extra = ray_cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1", object_store_memory=80 * 1024 * 1024)
    spec = ClusterSpec(llm_replicas=3, detached=False, group="faults", llm_cpus=0.5,
                       fake_llm={"latency": {"fixed": 0.01, "per_token": 0.01}, "max_concurrency": 4})
    actors = deploy(spec)
    wait_ready(actors, timeout=180)
    nodes = {name: ray.get(actor.node_id.remote()) for name, actor in actors.items()}
    doomed_node = extra.node_id
    assert doomed_node in nodes.values(), f"SPREAD put no replica on the extra node: {nodes}"
    killed = next(n for n, node in nodes.items() if node != doomed_node)
    engine = ClusterLLMEngine(ray_replica_source("llm", group="faults"), router="least_outstanding")
    expected_llm = FakeLLM(LatencyModel())
    prompts = [f"question {i}: which replica answers me?" for i in range(N_QUERIES)]
    streamed: dict[int, list[str]] = {i: [] for i in range(N_QUERIES)}
    started = asyncio.Event()
    try:
        async def query(i: int) -> str:
            await asyncio.sleep(0.05 * i)  # an open-loop trickle over ~2.5 s
            if i == 5:
                started.set()
            result = await engine.complete(prompts[i], max_tokens=12, stream_cb=streamed[i].append)
            return result.text

        async def faults() -> None:
            await started.wait()
            ray.kill(ray.get_actor(killed, namespace=NAMESPACE), no_restart=False)  # Ray restarts it
            await asyncio.sleep(0.6)
            await asyncio.to_thread(ray_cluster.remove_node, extra)  # its replica is restarted elsewhere

        answers, _ = await asyncio.gather(asyncio.gather(*(query(i) for i in range(N_QUERIES))), faults())
        expected = [(await expected_llm.complete(p, max_tokens=12)).text for p in prompts]
        assert answers == expected  # all answered, each the same greedy text
        assert all("".join(streamed[i]) == expected[i] for i in range(N_QUERIES))  # no part delivered twice
        assert engine.resent >= 1  # the faults really hit requests in flight
        # Ray restarted the killed replica and replaced the node's: all three answer again.
        for _ in range(120):
            await engine.refresh()
            if len(engine.replicas) == 3:
                break
            await asyncio.sleep(0.5)
        assert len(engine.replicas) == 3
        moved = {name: ray.get(actor.node_id.remote(), timeout=60) for name, actor in actors.items()}
        assert doomed_node not in moved.values()
    finally:
        remove_all(group="faults")
