"""``RetrySourceQueryEngine``'s per-source evaluations, run at once.

When the evaluation of a response fails, stock ``RetrySourceQueryEngine._query`` evaluates the
response against each of its source nodes, one ``evaluate`` after another: each is an LLM call
awaited alone (``asyncio_run`` of ``aevaluate``), though none needs another's result. The stand-in's
running copy of the engine holds :class:`ConcurrentSourceEvaluator` instead of the user's evaluator:
as soon as a response evaluation fails, it starts every per-source evaluation stock is about to make,
concurrently (the LLM server batches their decodes), and hands each ``evaluate`` call its result in
stock's order. The evaluator's own code (prompt, LLM, parsing) is what runs; so are the engine's
own loop and retries (a retry engine is built with this evaluator, so its evaluations overlap too).

Differences a user could see: none in results, spans or events (the evaluations run in one
``asyncio_run``, under the same active span as stock's, each in its own task). When one per-source
evaluation raises, the ones stock would not have reached have already run; the error is the same,
raised at the same call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from llama_index.core.async_utils import asyncio_run
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType

log = logging.getLogger(__name__)

Key = tuple[str | None, str | None, tuple[str, ...]]


def evaluates_through_aevaluate(evaluator: Any) -> bool:
    """Whether the evaluator's ``evaluate`` is the base one (``asyncio_run(self.aevaluate(...))``), so running
    ``aevaluate`` ahead computes exactly what stock's ``evaluate`` call will."""
    return isinstance(evaluator, BaseEvaluator) and type(evaluator).evaluate is BaseEvaluator.evaluate


async def _raised(exc: BaseException) -> EvaluationResult:
    raise exc


class ConcurrentSourceEvaluator(BaseEvaluator):
    """The user's evaluator, whose failed response evaluation starts the per-source ones at once."""

    def __init__(self, evaluator: BaseEvaluator) -> None:
        self._evaluator = evaluator
        self._ready: dict[Key, deque[EvaluationResult | BaseException]] = {}
        self._lock = threading.Lock()  # one stand-in may serve queries from several threads
        self.started = 0  # per-source evaluations run ahead (explain() and tests read it)

    @property
    def evaluator(self) -> BaseEvaluator:
        return self._evaluator

    def _get_prompts(self) -> PromptDictType:
        return self._evaluator.get_prompts()

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        self._evaluator.update_prompts(prompts)

    def evaluate_response(self, query: str | None = None, response: Any = None, **kwargs: Any) -> EvaluationResult:
        result = self._evaluator.evaluate_response(query=query, response=response, **kwargs)
        sources = getattr(response, "source_nodes", None) or []
        if not result.passing and not kwargs and len(sources) > 1:
            self._run_ahead(query, response.response, [node.get_content() for node in sources])
        return result

    async def aevaluate_response(self, query: str | None = None, response: Any = None,
                                 **kwargs: Any) -> EvaluationResult:
        return await self._evaluator.aevaluate_response(query=query, response=response, **kwargs)

    def evaluate(self, query: str | None = None, response: str | None = None,
                 contexts: Sequence[str] | None = None, **kwargs: Any) -> EvaluationResult:
        ready = None if kwargs else self._take((query, response, tuple(contexts or ())))
        if ready is None:
            return self._evaluator.evaluate(query=query, response=response, contexts=contexts, **kwargs)
        if isinstance(ready, BaseException):
            self._drop(query, response)  # stock stops at this call: the ones after it are never taken
            return asyncio_run(_raised(ready))  # through asyncio_run, which rewraps some errors as stock's call does
        return ready

    async def aevaluate(self, query: str | None = None, response: str | None = None,
                        contexts: Sequence[str] | None = None, **kwargs: Any) -> EvaluationResult:
        return await self._evaluator.aevaluate(query=query, response=response, contexts=contexts, **kwargs)

    def _run_ahead(self, query: str | None, response: str | None, contents: list[str]) -> None:
        """Stock's next ``evaluate`` calls (one per source, in order), all at once; results kept by arguments."""
        async def all_at_once() -> list[Any]:
            calls = [self._evaluator.aevaluate(query=query, response=response, contexts=[c]) for c in contents]
            return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio_run(all_at_once())
        log.debug("ran %d per-source evaluations at once", len(results))
        with self._lock:
            self.started += len(results)
            for content, result in zip(contents, results, strict=True):
                self._ready.setdefault((query, response, (content,)), deque()).append(result)

    def _take(self, key: Key) -> EvaluationResult | BaseException | None:
        with self._lock:
            queue = self._ready.get(key)
            if not queue:
                return None
            result = queue.popleft()
            if not queue:
                del self._ready[key]
            return result

    def _drop(self, query: str | None, response: str | None) -> None:
        with self._lock:
            for key in [k for k in self._ready if k[:2] == (query, response)]:
                del self._ready[key]

    def __getattr__(self, name: str) -> Any:
        # the rest of the evaluator's API (its llm, templates, ...) is the user's evaluator's
        if name.startswith("__") or name in ("_evaluator", "_ready", "_lock"):
            raise AttributeError(name)
        return getattr(self._evaluator, name)
