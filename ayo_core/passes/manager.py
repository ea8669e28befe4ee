"""The pass manager: runs passes in order, lints in debug mode, names the failing pass."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

from ayo_core.graph import Graph
from ayo_core.passes.base import PassResult
from ayo_core.passes.early_stop import early_stop
from ayo_core.passes.pipeline import decode_pipelining
from ayo_core.passes.prefill import prefill_splitting
from ayo_core.passes.prune import dependency_pruning
from ayo_core.passes.stage import stage_decomposition

log = logging.getLogger(__name__)

Pass = Callable[[Graph], PassResult | tuple[Graph, bool]]

DEFAULT_PASSES: tuple[Pass, ...] = (dependency_pruning, stage_decomposition, prefill_splitting, decode_pipelining,
                                    early_stop)
PASSES: dict[str, Pass] = {p.__name__: p for p in DEFAULT_PASSES}


class PassError(RuntimeError):
    """A pass raised or broke an invariant; names it and the passes that ran before it."""


def _name(p: Pass) -> str:
    return getattr(p, "__name__", None) or getattr(getattr(p, "func", None), "__name__", None) or repr(p)


def resolve_passes(passes: Sequence[Pass | str] | None) -> list[Pass]:
    """``passes`` as functions; None: ``$AYO_PASSES`` (comma-separated names, "" for none) or all five."""
    if passes is None:
        env = os.environ.get("AYO_PASSES")
        if env is None:
            return list(DEFAULT_PASSES)
        passes = [name.strip() for name in env.split(",") if name.strip()]
    out = []
    for p in passes:
        if isinstance(p, str):
            if p not in PASSES:
                raise ValueError(f"unknown pass {p!r}; valid passes: {', '.join(PASSES)}")
            p = PASSES[p]
        out.append(p)
    return out


def optimize_graph(g: Graph, passes: Sequence[Pass | str] | None = None, debug: bool = False) -> Graph:
    """Run ``passes`` (default: all five, in order) on ``g``; return the optimized graph.

    The result's ``meta["passes"]`` lists ``(pass name, changed)``; its
    ``meta["overhead"]["passes"]`` adds the seconds spent. With ``debug`` the
    graph is linted before and after every pass.
    """
    t0 = time.perf_counter()
    ran: list[str] = []
    history: list[tuple[str, bool]] = []
    if debug:
        g.lint()
    for p in resolve_passes(passes):
        name = _name(p)
        where = f"pass {name!r} (after {ran or 'no other pass'})"
        try:
            result = p(g)
            new_g, changed = result
        except Exception as exc:
            raise PassError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
        if debug:
            try:
                new_g.lint()
            except Exception as exc:
                raise PassError(f"{where} produced an invalid graph: {exc}") from exc
        log.debug("%s changed=%s", name, changed)
        g = new_g
        ran.append(name)
        history.append((name, bool(changed)))
    g = g.copy()
    g.meta["passes"] = g.meta.get("passes", []) + history
    overhead = dict(g.meta.get("overhead", {}))
    overhead["passes"] = overhead.get("passes", 0.0) + time.perf_counter() - t0
    g.meta["overhead"] = overhead
    return g
