"""The graph scheduler: runs optimized per-query graphs concurrently on shared engines.

Each node of a query runs as an asyncio task that waits for its producers,
then calls its fn with a :class:`NodeContext` whose engine proxies go through
the :class:`Runtime`'s engine schedulers (one per engine kind, one policy by
name). Streaming: a consumer marked ``meta["pipelined"]`` (decode pipelining)
starts once its other inputs exist and runs once per part as its producer
emits them. A node may return :class:`Expand` to grow its query's graph. A
failing node fails its query (:class:`NodeFailed` naming node and module) and
cancels the rest of that query; other queries go on. A timeout or a caller's
cancellation cancels every task and engine request the query holds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ayo_core.graph import Graph, Op
from ayo_core.runtime.context import Engines, Expand
from ayo_core.runtime.engine_scheduler import EngineScheduler, SchedulerConfig, SchedulerStatistics
from ayo_core.runtime.errors import QueryTimeout
from ayo_core.runtime.policies import CostModel, Policy, get_policy
from ayo_core.runtime.query import QueryRun, is_stream_consumer, stream_sources
from ayo_core.trace import Trace

log = logging.getLogger(__name__)
_query_ids = itertools.count()
SchedulerFactory = Callable[[str, Any, Policy, "SchedulerConfig | None"], EngineScheduler]


class Runtime:
    """Runs graphs on shared engines with application-aware engine scheduling.

    ``policy`` is ``"fifo"``, ``"depth"`` or ``"critical_path"`` (an unknown name
    raises listing these); ``configs`` overrides :class:`SchedulerConfig` per
    engine kind; ``inline_sync`` runs plain (sync) node fns on the event loop
    instead of a thread (deterministic under a virtual clock; only for fns
    that do not block). ``scheduler_factory(kind, engine, policy, config)`` makes each
    engine's scheduler (default: a new :class:`EngineScheduler`; shared runtimes hand out
    one per engine and event loop, see :mod:`ayo_core.runtime.shared`).
    """

    def __init__(self, engines: Engines | None = None, policy: str | Policy = "critical_path",
                 configs: Mapping[str, SchedulerConfig] | None = None, inline_sync: bool = False,
                 costs: CostModel | None = None, scheduler_factory: SchedulerFactory | None = None):
        self.engines = engines or Engines()
        self.policy = get_policy(policy)
        self._scheduler_factory = scheduler_factory or EngineScheduler
        configs = configs or {}
        self.schedulers: dict[str, EngineScheduler] = {
            kind: self._scheduler_factory(kind, engine, self.policy, configs.get(kind))
            for kind, engine in self.engines.items()
        }
        self.inline_sync = inline_sync
        self.costs = costs or CostModel()

    def add_engines(self, engines: Mapping[str, Any], configs: Mapping[str, SchedulerConfig] | None = None) -> None:
        """Schedule engines met after construction (a routing function's choice, captured at run time):
        queries already running reach them too. Kinds already scheduled keep their engine."""
        added = {kind: engine for kind, engine in engines.items() if kind not in self.schedulers}
        if not added:
            return
        self.engines = Engines(**{**dict(self.engines.items()), **added})
        for kind, engine in added.items():
            self.schedulers[kind] = self._scheduler_factory(kind, engine, self.policy, (configs or {}).get(kind))

    async def run(self, graph: Graph, inputs: Mapping[str, Any] | None = None, timeout: float | None = None,
                  query_id: str | None = None) -> tuple[Any, Trace]:
        """Run one query; return ``(value of the output node, trace)``.

        Raises ``NodeFailed`` (a node raised), ``QueryTimeout`` (past ``timeout`` seconds);
        cancelling the calling task cancels the query. Either way the query releases
        everything it held before this returns.
        """
        if query_id is None and graph.query_id in ("q", ""):
            query_id = f"q{next(_query_ids)}"
        run = QueryRun(self, graph.copy(query_id), inputs or {})
        try:
            if timeout is None:
                value = await run.execute()
            else:
                try:
                    async with asyncio.timeout(timeout):
                        value = await run.execute()
                except TimeoutError:
                    if run.failure is not None:
                        raise
                    run.trace.status = "timeout"
                    raise QueryTimeout(run.graph.query_id, timeout, run.running_nodes()) from None
        except asyncio.CancelledError:
            run.trace.status = "cancelled"
            raise
        finally:
            await run.release()
        return value, run.trace

    async def run_many(self, jobs: list[tuple[Graph, Mapping[str, Any]]], timeout: float | None = None,
                       return_exceptions: bool = True) -> list[Any]:
        """Run several queries concurrently; results in order (exceptions in place when asked)."""
        return await asyncio.gather(*(self.run(g, inp, timeout=timeout) for g, inp in jobs),
                                    return_exceptions=return_exceptions)

    def statistics(self) -> dict[str, SchedulerStatistics]:
        """A snapshot of every engine scheduler."""
        return {kind: s.statistics() for kind, s in self.schedulers.items()}

    def __repr__(self) -> str:
        return f"Runtime(policy={self.policy.name!r}, engines={self.engines!r})"


__all__ = ["Runtime", "Expand", "Op", "is_stream_consumer", "stream_sources"]
