"""Running graphs: the reference interpreter, the graph scheduler and its engine schedulers.

``Runtime(engines, policy).run(graph, inputs)`` runs an optimized graph on shared
engines; ``reference_run(graph, inputs, engines)`` runs the unoptimized graph
sequentially and is the source of truth for tests. Adapters share what a process
needs once: ``shared_runtime(engines, policy)`` (one runtime per engine set, policy
and event loop; one scheduler per engine) and :mod:`ayo_core.runtime.bridge` (one
background event loop for sync callers).
"""

from ayo_core.runtime.context import EngineProxy, Engines, Expand, NodeContext
from ayo_core.runtime.engine_scheduler import (
    DEFAULT_CONFIGS,
    Batch,
    EngineRequest,
    EngineScheduler,
    SchedulePlan,
    SchedulerConfig,
    SchedulerStatistics,
)
from ayo_core.runtime.errors import AyoError, MissingEngine, NodeFailed, QueryTimeout, QueueFull
from ayo_core.runtime.interpreter import reference_run
from ayo_core.runtime.policies import POLICIES, PRIORITY_SPAN, CostModel, NeverBelowDefault, get_policy
from ayo_core.runtime.scheduler import Runtime
from ayo_core.runtime.shared import (
    LoopRuntimes,
    llm_config,
    runtime_on_shared_schedulers,
    shared_runtime,
    shared_schedulers,
)
from ayo_core.runtime.states import NodeState, RequestState

__all__ = [
    "DEFAULT_CONFIGS", "POLICIES", "PRIORITY_SPAN", "AyoError", "Batch", "CostModel", "EngineProxy", "EngineRequest",
    "EngineScheduler", "Engines", "Expand", "LoopRuntimes", "MissingEngine", "NeverBelowDefault", "NodeContext", "NodeFailed",
    "NodeState", "QueryTimeout", "QueueFull", "RequestState", "Runtime", "SchedulePlan", "SchedulerConfig",
    "SchedulerStatistics", "get_policy", "llm_config", "reference_run", "runtime_on_shared_schedulers",
    "shared_runtime", "shared_schedulers",
]
