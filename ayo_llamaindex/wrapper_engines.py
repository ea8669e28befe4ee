"""Query engines that wrap another engine in their own control flow: ``RetryQueryEngine``,
``RetryGuidelineQueryEngine``, ``RetrySourceQueryEngine``, ``MultiStepQueryEngine``, and a user's
``CustomQueryEngine`` whose fields hold the query engines its ``custom_query`` calls.

Their loops (evaluate, transform the query, retry; decompose, answer, decompose again) depend on each
answer in turn, so there is nothing to overlap between their steps: their code stays the user's and
runs as it is, and the engine they call inside (``_query_engine``) is Ayo's optimized stand-in for it,
so each of its answers is lowered (retrieval, postprocessors, synthesis on Ayo's engines, with
whatever the inner engine's lowering runs concurrently). What the user observes is stock's: the
wrapper's own events and spans come from its own code, the inner engine's from the stand-in, which
mirrors them (the inner ``_query`` a retry engine calls directly opens the stock engine's span).
A ``CustomQueryEngine``'s ``custom_query`` is the user's code: it runs as written, over the optimized
stand-ins of the engines in its fields (what it runs at once, it runs at once; what it awaits in turn,
in turn).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.query_engine import (
    CustomQueryEngine,
    MultiStepQueryEngine,
    RetryGuidelineQueryEngine,
    RetryQueryEngine,
    RetrySourceQueryEngine,
)
from llama_index.core.schema import QueryBundle

from ayo_core.explain import Explanation
from ayo_core.introspect import overrides_reason
from ayo_llamaindex.source_evaluations import ConcurrentSourceEvaluator, evaluates_through_aevaluate
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

log = logging.getLogger(__name__)

WRAPPERS = (RetryQueryEngine, RetryGuidelineQueryEngine, RetrySourceQueryEngine, MultiStepQueryEngine)
INNER = "_query_engine"  # where each of them keeps the engine it calls


def inner_engines(target: Any) -> list[str]:
    """The attributes holding the query engines ``target``'s own code calls: a Retry*/MultiStep engine's
    ``_query_engine``; a ``CustomQueryEngine``'s fields that hold query engines (``custom_query`` is the
    user's code, it calls them). Empty for any other engine."""
    if isinstance(target, WRAPPERS):
        return [INNER] if isinstance(getattr(target, INNER, None), BaseQueryEngine) else []
    if isinstance(target, CustomQueryEngine):
        return [name for name in type(target).model_fields if isinstance(getattr(target, name, None), BaseQueryEngine)]
    return []


def optimize_wrapper(target: Any, policy: str, options: Any = None) -> OptimizedWrapperEngine | None:
    """The stand-in for an engine whose own code calls other engines (those optimized); None for any other."""
    if not inner_engines(target):
        return None
    return OptimizedWrapperEngine(target, policy=policy, options=options)


def evaluates_sources_at_once(engine: Any) -> bool:
    """Whether the stand-in of ``engine`` runs its per-source evaluations at once: a ``RetrySourceQueryEngine``
    whose ``_query`` is stock's, with an evaluator whose ``evaluate`` is the base one."""
    return (isinstance(engine, RetrySourceQueryEngine)
            and not overrides_reason(engine, RetrySourceQueryEngine, eng.RETRY_SOURCE_MIRRORED)
            and evaluates_through_aevaluate(eng.retry_source_evaluator(engine)))


def concurrent_source_evaluator(running: BaseQueryEngine) -> ConcurrentSourceEvaluator | None:
    """On a running copy that qualifies (:func:`evaluates_sources_at_once`): its evaluator swapped for one
    that runs the per-source evaluations at once (:mod:`ayo_llamaindex.source_evaluations`)."""
    if not evaluates_sources_at_once(running):
        return None
    concurrent = ConcurrentSourceEvaluator(eng.retry_source_evaluator(running))
    eng.set_retry_source_evaluator(running, concurrent)
    return concurrent


class OptimizedWrapperEngine(BaseQueryEngine):
    """A wrapping engine whose own code runs as the user's, over the optimized inner engine.

    ``query``/``aquery`` are the wrapper's own (a shallow copy of it holding the stand-in), so its
    events and spans are the ones it opens; the user's object is left untouched (``stock``).
    """

    def __init__(self, wrapper: BaseQueryEngine, policy: str = "critical_path", options: Any = None) -> None:
        from ayo_llamaindex import optimize

        self._stock, self._policy = wrapper, policy
        self._inners = {name: optimize(getattr(wrapper, name), policy=policy, options=options)
                        for name in inner_engines(wrapper)}
        self._inner = next(iter(self._inners.values()))
        self._running = copy.copy(wrapper)  # the user's control flow, calling the stand-ins
        for name, stand_in in self._inners.items():
            setattr(self._running, name, stand_in)
        self._source_evaluator = concurrent_source_evaluator(self._running)
        super().__init__(callback_manager=wrapper.callback_manager)

    @property
    def stock(self) -> BaseQueryEngine:
        return self._stock

    @property
    def inner(self) -> Any:
        """The optimized stand-in of the engine the wrapper calls (the first, for a custom engine calling several)."""
        return self._inner

    @property
    def inners(self) -> dict[str, Any]:
        """Each attribute holding an engine the wrapper calls, and that engine's optimized stand-in."""
        return dict(self._inners)

    @property
    def last_trace(self) -> Any:
        return getattr(self._inner, "last_trace", None)

    def _get_prompt_modules(self) -> PromptMixinType:
        return shim.prompt_modules(self._stock)

    # the wrapper's own methods open its own spans and events: none here on top
    @shim.mark_spanned_elsewhere
    def query(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        return self._running.query(str_or_query_bundle)

    @shim.mark_spanned_elsewhere
    async def aquery(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        return await self._running.aquery(str_or_query_bundle)

    @shim.mark_spanned_elsewhere
    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        run_query, _ = shim.engine_spanned_query_methods(self._running)  # an outer wrapper calls it so
        return run_query(query_bundle)

    @shim.mark_spanned_elsewhere
    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        _, run_aquery = shim.engine_spanned_query_methods(self._running)
        return await run_aquery(query_bundle)

    def __getattr__(self, name: str) -> Any:
        # the rest of the wrapper's API (max_retries, _evaluator, ...) is the running copy's
        if name.startswith("__") or name in ("_running", "_stock", "_inner", "_inners", "_source_evaluator"):
            raise AttributeError(name)
        return getattr(self._running, name)

    def explain(self) -> Explanation:
        """The inner engine's explanation (a fresh one), titled with the wrapper that calls it."""
        inner = self._inner.explain()
        called = ", ".join(f"{name}: {type(getattr(self._stock, name)).__name__}" for name in self._inners)
        title = (f"{type(self._stock).__name__}: its own control flow runs as the user's code; "
                 f"{'the engines it calls are' if len(self._inners) > 1 else 'the engine it calls is'} optimized "
                 f"({called})")
        if self._source_evaluator is not None:
            title += ("; when a response fails its evaluation, the per-source evaluations run at once "
                      f"({type(self._source_evaluator.evaluator).__name__}'s own code)")
        inner.title = f"{title}\n{inner.title}" if inner.title else title
        return inner

    def __repr__(self) -> str:
        return f"OptimizedWrapperEngine({type(self._stock).__name__} over {self._inner!r})"
