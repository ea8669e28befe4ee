"""Shared runtimes: where the queries of every optimized pipeline in a process meet.

``shared_runtime(engines, policy)`` returns one :class:`Runtime` per (engine set, policy,
event loop), and every such runtime (and every one made by :func:`runtime_on_shared_schedulers`)
gets its engine schedulers from one pool per (event loop, policy): a LlamaIndex query engine and two separately optimized LangChain chains on
one vLLM server queue in the *same* LLM scheduler even when their other engines differ
(their embedding settings, say), so cross-pipeline batching and priorities happen there.

Why per event loop: a scheduler's queue, futures and tasks belong to one loop. Sync calls
of both adapters all run on the bridge loop (:mod:`ayo_core.runtime.bridge`) and so share
one pool; LangChain's async methods run on the caller's loop, as stock does, and share per
loop. Loops are weak keys: a finished ``asyncio.run`` loop takes its runtimes with it.

Every shared runtime ranks requests with :class:`NeverBelowDefault` around the named
policy: no request of Ayo's is ever sent with a priority worse than a foreign client's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ayo_core.runtime.bridge import forget_closed_loops, per_loop_map
from ayo_core.runtime.context import Engines
from ayo_core.runtime.engine_scheduler import DEFAULT_CONFIGS, EngineScheduler, SchedulerConfig
from ayo_core.runtime.policies import CostModel, NeverBelowDefault, Policy
from ayo_core.runtime.scheduler import Runtime

_lock = threading.Lock()


@dataclass
class _LoopPool:
    """Everything shared on one event loop."""

    policies: dict[str, NeverBelowDefault] = field(default_factory=dict)
    schedulers: dict[tuple[str, int, str], EngineScheduler] = field(default_factory=dict)
    runtimes: dict[tuple, Runtime] = field(default_factory=dict)

    def scheduler(self, kind: str, engine: Any, policy: Policy, config: SchedulerConfig | None) -> EngineScheduler:
        """The loop's one scheduler for ``engine`` as ``kind`` under ``policy``.

        Pipelines may ask for different in-flight limits (LlamaIndex 64 LLM requests, LangChain
        ``Options.llm_inflight``): the scheduler admits the largest any of them asked for, since
        each limit only says how much that adapter lets the engine batch at once.
        """
        key = (kind, id(engine), policy.name)  # the scheduler holds the engine: its id stays unique
        with _lock:
            sched = self.schedulers.get(key)
            if sched is None:
                sched = self.schedulers[key] = EngineScheduler(kind, engine, policy, config)
            elif config is not None and config.max_inflight > sched.config.max_inflight:
                sched.config = dataclasses.replace(sched.config, max_inflight=config.max_inflight)
            return sched


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPool] = per_loop_map()


def _pool(loop: asyncio.AbstractEventLoop) -> _LoopPool:
    with _lock:
        pool = _pools.get(loop)
        if pool is None:
            forget_closed_loops(_pools)
            pool = _pools[loop] = _LoopPool()
        return pool


def engine_set_key(engines: Mapping[str, Any] | Engines) -> tuple[tuple[str, int], ...]:
    """What identifies an engine set: each kind and the identity of its engine."""
    return tuple(sorted((kind, id(engine)) for kind, engine in engines.items()))


def shared_runtime(engines: Mapping[str, Any] | Engines, policy: str = "critical_path", *,
                   configs: Mapping[str, SchedulerConfig] | None = None,
                   loop: asyncio.AbstractEventLoop | None = None) -> Runtime:
    """The process's ``Runtime`` over exactly ``engines`` (kind -> engine) under ``policy`` on ``loop``
    (default: the running loop). ``configs`` (per kind) apply when a scheduler is first made, except
    ``max_inflight``, which only grows (see :meth:`_LoopPool.scheduler`)."""
    loop = loop or asyncio.get_running_loop()
    pool = _pool(loop)
    key = (engine_set_key(engines), policy)
    with _lock:
        rt = pool.runtimes.get(key)
    if rt is None:
        rt = runtime_on_shared_schedulers(engines, policy, configs=configs, loop=loop)
        with _lock:
            rt = pool.runtimes.setdefault(key, rt)
    return rt


def runtime_on_shared_schedulers(engines: Mapping[str, Any] | Engines, policy: str = "critical_path", *,
                                 configs: Mapping[str, SchedulerConfig] | None = None,
                                 loop: asyncio.AbstractEventLoop | None = None,
                                 costs: CostModel | None = None) -> Runtime:
    """A new ``Runtime`` of the caller's own whose engine schedulers are the loop's shared ones.

    For a pipeline that grows its runtime (``Runtime.add_engines`` when a routing function picks a
    model met at run time: a runtime shared by engine set must not change under other pipelines)
    or learns its own ``costs``; its requests still meet every other pipeline's in the schedulers.
    """
    pool = _pool(loop or asyncio.get_running_loop())
    with _lock:
        ranked = pool.policies.get(policy)
        if ranked is None:
            ranked = pool.policies[policy] = NeverBelowDefault(policy)
    return Runtime(Engines(**dict(engines.items())), policy=ranked, configs=configs, costs=costs,
                   scheduler_factory=pool.scheduler)


def shared_schedulers(loop: asyncio.AbstractEventLoop | None = None) -> list[EngineScheduler]:
    """Every shared engine scheduler on ``loop`` (default: the running loop), for statistics and tests."""
    pool = _pools.get(loop or asyncio.get_running_loop())
    if pool is None:
        return []
    with _lock:
        return list(pool.schedulers.values())


def llm_config(max_inflight: int) -> SchedulerConfig:
    """The LLM scheduler's config admitting ``max_inflight`` requests (vLLM batches them itself)."""
    return dataclasses.replace(DEFAULT_CONFIGS["llm"], max_inflight=max_inflight)


class LoopRuntimes:
    """One pipeline's own runtimes, one per event loop, each on that loop's shared engine schedulers
    (:func:`runtime_on_shared_schedulers`), all learning into one ``costs`` model.

    For an adapter whose async methods run on the caller's loop (LangChain, as stock): a runtime's
    schedulers belong to one loop, so each loop gets its own; loops are weak keys.
    """

    def __init__(self, policy: str, costs: CostModel | None = None) -> None:
        self.policy, self.costs = policy, costs or CostModel()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Runtime] = per_loop_map()

    def get(self, engines: Mapping[str, Any], configs: Mapping[str, SchedulerConfig] | None = None) -> Runtime:
        """The runtime on the running loop (made over ``engines`` with ``configs`` when first asked there)."""
        loop = asyncio.get_running_loop()
        rt = self._by_loop.get(loop)
        if rt is None:
            forget_closed_loops(self._by_loop)
            rt = runtime_on_shared_schedulers(engines, self.policy, configs=configs, loop=loop, costs=self.costs)
            self._by_loop[loop] = rt
        return rt

    def add_engines(self, engines: Mapping[str, Any], configs: Mapping[str, SchedulerConfig] | None = None) -> None:
        """Engines met at run time (a routing function's choice): every loop's runtime schedules them too."""
        for rt in list(self._by_loop.values()):
            rt.add_engines(engines, configs)
