"""Metadata extractors inside an optimized call: their model calls go through Ayo's engine.

LlamaIndex's extractors (``DocumentContextExtractor`` for Anthropic's contextual retrieval,
``TitleExtractor``, ``KeywordExtractor``, ``SummaryExtractor``, ``QuestionsAnsweredExtractor``) run
as transformations of ``VectorStoreIndex.from_documents`` or an ``IngestionPipeline``: each call runs
``aprocess_nodes`` under ``asyncio_run``, a new event loop for every call (in a worker thread,
``asyncio.run``) that is closed when the call ends. The LLM object caches its ``AsyncOpenAI``
client, whose pooled connections belong to the loop that opened them; the next call finds them
bound to a closed loop ("Event loop is closed"), and the SDK retries each such request after a
0.4-0.8 s backoff (contextual_retrieval's emulated runs: 67 of 84 extractor calls; the answers are
unchanged, only late).

Inside an optimized call, each chat request of the extractor's own LLM (a recognized
OpenAI-compatible chat model) is sent by Ayo's shared LLM engine, on Ayo's long-lived loop: the same
request, built by the LLM's own code (``_get_model_kwargs(max_tokens=...)``), with the class's
retries. Only the SDK call inside ``achat`` (``OpenAI._achat``) is replaced, so the callback events
and instrumentation spans around it (``achat``, ``apredict``) are stock's own, as are the
extractor's code, its worker limit (``num_workers``) and the metadata it writes.

Differences a user could see: the response's ``raw`` is the token usage, not the SDK's
``ChatCompletion`` object (as for every request Ayo sends, :mod:`ayo_llamaindex.events`);
``DocumentContextExtractor``'s ``anthropic-beta: prompt-caching`` header is not sent (only
Anthropic's API reads it, for billing; an OpenAI-compatible server caches prefixes by itself). A
call with any other option, or a completion model, runs stock.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatResponse

from ayo_core.engines.openai_request import send_request
from ayo_llamaindex.events import chat_response
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.runtime import LOOP, assign_engines
from ayo_shims import llamaindex as shim

# the one header DocumentContextExtractor adds: Anthropic's prompt-caching beta, no other server reads it
_IGNORED_HEADERS = frozenset({"anthropic-beta"})
_ROUTED_OPTIONS = frozenset({"max_tokens", "extra_headers"})


@dataclass(frozen=True)
class Route:
    """The LLM whose chat requests Ayo sends while one extractor runs, and how."""

    binding: LLMBinding
    send: Callable[..., Any]

    def takes(self, llm: Any, kwargs: dict[str, Any]) -> bool:
        """Whether this call (``llm._achat(messages, **kwargs)``) is one Ayo sends as stock would."""
        headers = kwargs.get("extra_headers") or {}
        return llm is self.binding.llm and set(kwargs) <= _ROUTED_OPTIONS and set(headers) <= _IGNORED_HEADERS

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        request = self.binding.chat_request(list(messages), **kwargs)
        return chat_response(await LOOP.arun(self.binding.send(self.send, request)))


_ROUTE: contextvars.ContextVar[Route | None] = contextvars.ContextVar("ayo_extractor_route", default=None)


def route_for(llm: Any) -> Route | None:
    """How Ayo sends ``llm``'s chat requests, or None when it cannot (not a recognized chat LLM)."""
    binding = LLMBinding(llm)
    if not binding.recognized or not shim.uses_chat_completions(llm):
        return None
    engine = assign_engines([binding], []).engines["llm"]
    return Route(binding, functools.partial(send_request, engine))


def install(active_call: Callable[[], Any]) -> None:
    """Route extractors' model calls while ``active_call()`` names an optimized call (its state, with
    ``lowered`` and ``modules`` lists for explain()); inert (one context-variable read) otherwise.
    Called once, by the doc-QA hooks' own one-time install."""

    def aprocess_nodes(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        state = active_call()
        llm = getattr(instance, "llm", None)
        route = None if state is None or llm is None else route_for(llm)
        if route is None:
            return wrapped(*args, **kwargs)
        _note(state, instance, route)
        return _routed(route, wrapped(*args, **kwargs))

    shim.wrap_extraction(aprocess_nodes, _achat)


def _note(state: Any, extractor: Any, route: Route) -> None:
    name = type(extractor).__name__
    if (name, "LLM calls") not in state.lowered:
        state.lowered.append((name, "LLM calls"))
        state.modules.append(f"extractor: {name}[llm={route.binding.label}] -> its model calls through Ayo's "
                             "LLM engine (stock's own extractor code and events)")


async def _routed(route: Route, coro: Any) -> Any:
    token = _ROUTE.set(route)
    try:
        return await coro
    finally:
        _ROUTE.reset(token)


def _achat(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    route = _ROUTE.get()
    if route is None or not route.takes(instance, kwargs) or len(args) != 1:
        return wrapped(*args, **kwargs)
    return route.achat(args[0], **kwargs)
