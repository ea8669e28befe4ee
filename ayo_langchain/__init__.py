"""Ayo for LangChain: ``fast = ayo_langchain.optimize(chain)``, nothing else changes.

``optimize`` captures an LCEL runnable (sequences, parallel maps and dict literals,
passthrough/assign, itemgetter, lambdas, branches and routing functions, prompts,
ChatOpenAI/OpenAI, Chroma vector retrievers, MultiQueryRetriever, EnsembleRetriever,
ContextualCompressionRetriever with LLMChainExtractor/LLMChainFilter, RunnableEach (``.map()``),
output parsers), lowers it to Ayo's primitive graph and returns a ``Runnable`` with
``invoke``/``ainvoke``/``batch``/``abatch``/``stream``/``astream`` that gives the
same outputs, plus ``explain()`` and ``last_trace``. What Ayo does not recognize runs
as the user's own object, as one node of the graph.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ayo_core.caller_code import running_ayo_code
from ayo_langchain import capture as cap
from ayo_langchain import (  # noqa: F401 - each registers its recognizers and lowerings
    compressors,
    each,
    history,
    retrieval,
)
from ayo_langchain.runnable import OptimizedRunnable, Options
from ayo_shims import langchain as shims
from ayo_shims import langgraph as lg_shims

__all__ = ["OptimizedRunnable", "Options", "optimize"]
log = logging.getLogger(__name__)


def optimize(runnable: Any, *, runtime: Any = None, options: Options | None = None, **knobs: Any) -> Any:
    """Wrap ``runnable`` (any LCEL runnable, or a dict / callable LCEL would coerce).

    ``options`` is an :class:`Options` (``ayo_core.pipeline.Options``, the knobs both adapters take);
    ``knobs`` are its fields given one by one (``policy``, ``prefill_split``, ``min_prefill_tokens``,
    ``exact_embeddings``, ``passes``, ``timeout``, ``llm_inflight``...), over ``options`` when both are given;
    ``runtime`` shares an existing :class:`ayo_core.runtime.Runtime` (and its engines).
    Raises :class:`ayo_shims.touchpoints.ShimError` when an installed langchain-core, langchain-openai,
    openai or pydantic release lacks an internal Ayo relies on (checked once per process).
    A compiled LangGraph graph gives a copy of that graph (same class API, plus ``explain()``) whose
    LCEL-runnable nodes run on Ayo (:mod:`ayo_langchain.graph`); anything else an :class:`OptimizedRunnable`.
    """
    with running_ayo_code():  # capture is Ayo's time (ayo_core.caller_code)
        return _optimize(runnable, runtime, options, knobs)


def _optimize(runnable: Any, runtime: Any, options: Options | None, knobs: dict[str, Any]) -> Any:
    shims.verify_all()
    options = dataclasses.replace(options, **knobs) if options is not None else Options(**knobs)
    if (why := cap.not_runnable_reason(runnable)) is not None:  # a graph builder, a store...: never refused
        log.warning("ayo_langchain.optimize: %s", why)
        return runnable
    if isinstance(runnable, OptimizedRunnable):  # optimized again (other options): from the user's chain
        runnable = runnable.wrapped
    if lg_shims.is_compiled_graph(runnable):  # LangGraph (create_agent too): Pregel runs it, nodes run on Ayo
        from ayo_langchain.graph import optimize_graph

        return optimize_graph(runnable, options, runtime=runtime)
    return OptimizedRunnable(runnable, options, runtime=runtime)
