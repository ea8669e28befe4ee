"""Ayo for LangChain: ``fast = ayo_langchain.optimize(chain)``, nothing else changes.

``optimize`` captures an LCEL runnable (sequences, parallel maps and dict literals,
passthrough/assign, itemgetter, lambdas, branches and routing functions, prompts,
ChatOpenAI/OpenAI, Chroma vector retrievers, MultiQueryRetriever, EnsembleRetriever,
output parsers), lowers it to Ayo's primitive graph and returns a ``Runnable`` with
``invoke``/``ainvoke``/``batch``/``abatch``/``stream``/``astream`` that gives the
same outputs, plus ``explain()`` and ``last_trace``. What Ayo does not recognize runs
as the user's own object, as one node of the graph.
"""

from __future__ import annotations

from typing import Any

from ayo_langchain import history  # noqa: F401 - registers the chat-history recognizers and lowerings
from ayo_langchain.runnable import OptimizedRunnable, Options
from ayo_shims import langchain as shims

__all__ = ["OptimizedRunnable", "Options", "optimize"]


def optimize(runnable: Any, *, runtime: Any = None, **options: Any) -> OptimizedRunnable:
    """Wrap ``runnable`` (any LCEL runnable, or a dict / callable LCEL would coerce).

    ``options`` are :class:`Options` fields (``policy``, ``prefill_split``,
    ``min_prefill_tokens``, ``exact_embeddings``, ``passes``, ``timeout``);
    ``runtime`` shares an existing :class:`ayo_core.runtime.Runtime` (and its engines).
    Raises :class:`ayo_shims.touchpoints.ShimError` when an installed langchain-core, langchain-openai,
    openai or pydantic release lacks an internal Ayo relies on (checked once per process).
    """
    shims.verify_all()
    return OptimizedRunnable(runnable, Options(**options), runtime=runtime)
