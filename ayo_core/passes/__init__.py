"""Optimization passes, each a pure function ``Graph -> PassResult(graph, changed)``.

Run all of them in the paper's order with :func:`optimize_graph`.
"""

from ayo_core.passes.base import PassResult
from ayo_core.passes.early_stop import early_stop
from ayo_core.passes.manager import DEFAULT_PASSES, PASSES, PassError, optimize_graph, resolve_passes
from ayo_core.passes.pipeline import decode_pipelining
from ayo_core.passes.prefill import prefill_splitting
from ayo_core.passes.prune import conflicts, dependency_pruning
from ayo_core.passes.stage import stage_decomposition

__all__ = [
    "DEFAULT_PASSES", "PASSES", "PassError", "PassResult", "conflicts", "decode_pipelining",
    "dependency_pruning", "early_stop", "optimize_graph", "prefill_splitting", "resolve_passes", "stage_decomposition",
]
