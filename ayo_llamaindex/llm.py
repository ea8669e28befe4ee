"""How Ayo calls a user's LlamaIndex LLM: the same request, through Ayo's LLM engine.

Identical answers need identical requests. For an ``OpenAI`` / ``OpenAILike`` LLM the
request is built with the LLM object's own code — ``_get_messages`` / ``_get_prompt``
(templates, system prompt, ``messages_to_prompt`` / ``completion_to_prompt``, output
parser), ``to_openai_message_dicts`` and ``_get_model_kwargs`` (model, temperature,
max_tokens, additional_kwargs) — and ``metadata.is_chat_model`` picks chat vs.
completions exactly as ``LLM.predict`` does. Only *when* and *how batched* it is sent
changes. Any other LLM class (or an OpenAI subclass that overrides how requests are
made) is called as the user's object: an opaque call, run in a worker thread so it
still overlaps with independent work.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import BasePromptTemplate

from ayo_core.engines.llm_client import LLMEngineError, StopStream
from ayo_core.engines.openai_request import CLIENT_ONLY_KWARGS, LLMRequest, json_body, with_outer_retries
from ayo_core.introspect import overrides_reason
from ayo_core.runtime.caller import call_stock
from ayo_llamaindex import events
from ayo_shims import llamaindex as shim

log = logging.getLogger(__name__)

# Methods whose stock behaviour we reproduce. A subclass overriding any of them
# changes what is sent, so it stays opaque.
_REQUEST_METHODS = shim.LLM_REQUEST_MIRRORED


@dataclass
class LLMBinding:
    """A user LLM object and how Ayo calls it (engine request, or opaque call)."""

    llm: Any
    recognized: bool = field(init=False)
    reason: str = field(init=False)

    def __post_init__(self) -> None:
        self.recognized, self.reason = recognize_llm(self.llm)

    # -- identity of the serving endpoint (for the engine registry) --
    @property
    def endpoint(self) -> tuple[str, str, str]:
        """``(base_url, model, api_key)`` of the OpenAI-compatible server."""
        return (str(self.llm.api_base).rstrip("/"), str(self.llm.model), str(self.llm.api_key or ""))

    @property
    def label(self) -> str:
        name = type(self.llm).__name__
        model = getattr(self.llm, "model", None)
        return f"{name}({model})" if model else name

    @property
    def is_chat(self) -> bool:
        return bool(self.llm.metadata.is_chat_model)

    # -- request building: LlamaIndex's own code, nothing re-typed --
    def predict_request(self, prompt: BasePromptTemplate, **prompt_args: Any) -> LLMRequest:
        """The request ``llm.predict(prompt, **prompt_args)`` sends."""
        llm = self.llm
        if llm.metadata.is_chat_model:
            return self.chat_request(shim.llm_messages(llm, prompt, **prompt_args))
        return self._completion_request(shim.llm_prompt(llm, prompt, **prompt_args))

    def complete_request(self, prompt: str) -> LLMRequest:
        """The request ``llm.complete(prompt)`` (``formatted=False``) sends."""
        from llama_index.core.base.llms.generic_utils import prompt_to_messages
        from llama_index.llms.openai_like import OpenAILike

        llm = self.llm
        if isinstance(llm, OpenAILike):  # OpenAI.complete ignores `formatted`; OpenAILike does not
            prompt = llm.completion_to_prompt(prompt)
        if shim.uses_chat_completions(llm):
            return self.chat_request(prompt_to_messages(prompt))
        return self._completion_request(prompt)

    def chat_request(self, messages: list[Any], **kwargs: Any) -> LLMRequest:
        """The request ``llm.chat(messages, **kwargs)`` sends (``kwargs``: request options such as
        ``max_tokens``, merged by the LLM's own ``_get_model_kwargs``; client-side ones are not sent)."""
        from llama_index.llms.openai.utils import to_openai_message_dicts

        llm = self.llm
        if not shim.uses_chat_completions(llm):  # OpenAILike(is_chat_model=False).chat
            return self._completion_request(llm.messages_to_prompt(messages))
        return LLMRequest("chat", {"messages": to_openai_message_dicts(messages, model=llm.model),
                                   **json_body(shim.model_kwargs(llm, **kwargs))})

    def _completion_request(self, prompt: str) -> LLMRequest:
        kwargs = shim.model_kwargs(self.llm)
        shim.update_max_tokens(self.llm, kwargs, prompt)
        return LLMRequest("completion", {"prompt": prompt, **json_body(kwargs)})

    def parse(self, text: str) -> str:
        """``LLM.predict``'s post-processing of the raw text (the LLM's output parser)."""
        return shim.llm_parse_output(self.llm, text)

    # -- calling --
    async def predict(
        self, send: Callable[..., Any] | None, prompt: BasePromptTemplate, *,
        stream_cb: Callable[[str], None] | None = None, **prompt_args: Any,
    ) -> str:
        """``llm.predict(prompt, **prompt_args)``: through ``send`` when recognized, else opaque."""
        if not self.recognized or send is None:
            return await call_stock(self.llm.predict, self.llm.apredict, prompt, **prompt_args)
        request = self.predict_request(prompt, **prompt_args)
        result = await events.predict(self.llm, prompt, prompt_args, lambda: self.send(send, request, stream_cb))
        return self.parse(result.text)

    async def complete(
        self, send: Callable[..., Any] | None, prompt: str, *, stream_cb: Callable[[str], None] | None = None,
    ) -> str:
        """``llm.complete(prompt).text``: through ``send`` when recognized, else opaque."""
        if not self.recognized or send is None:
            response = await call_stock(self.llm.complete, self.llm.acomplete, prompt)
            if stream_cb is not None and response.text:
                with contextlib.suppress(StopStream):  # the whole text is already here
                    stream_cb(response.text)
            return response.text
        request = self.complete_request(prompt)
        result = await events.complete(self.llm, prompt, lambda: self.send(send, request, stream_cb))
        return result.text

    async def send(self, send: Callable[..., Any], request: LLMRequest, stream_cb: Any = None) -> Any:
        """The engine's result (text, token usage), retried as the stock class retries.

        Stock retries twice over: the openai SDK retries each request ``max_retries`` times (the
        engine does the same, same backoff), and the class's ``llm_retry_decorator`` (tenacity)
        repeats that whole call up to ``max_retries`` attempts within 60 s on connection, timeout,
        rate-limit and server errors (``ayo_core.engines.openai_request.with_outer_retries``).
        """
        max_retries = int(getattr(self.llm, "max_retries", 0) or 0)
        return await with_outer_retries(
            lambda cb: send(request, stream_cb=cb, max_retries=max_retries), attempts=max_retries,
            stream_cb=stream_cb, to_error=lambda exc: sdk_error(self.llm, request, exc),
            retryable=_outer_retryable, label=self.label)


def _outer_retryable(error: BaseException) -> bool:
    try:
        import openai
    except ImportError:
        return False
    return isinstance(error, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                              openai.InternalServerError))


def sdk_error(llm: Any, request: LLMRequest, exc: LLMEngineError) -> BaseException:
    """The exception the stock LLM's openai SDK raises for the same failure, Ayo's detail as a note
    (built by :func:`ayo_shims.openai_errors.sdk_error`); Ayo's own error when the SDK has none."""
    from ayo_shims.openai_errors import sdk_error as rebuild

    try:
        client = shim.sdk_client(llm)
    except Exception:  # noqa: BLE001 - no client to build the SDK's error with: Ayo's (clear) error
        log.debug("could not get the LLM's openai client", exc_info=True)
        return exc
    return rebuild(client, f"{str(llm.api_base).rstrip('/')}{request.path}", exc) or exc


def recognize_llm(llm: Any) -> tuple[bool, str]:
    """Whether Ayo can send this LLM's requests itself; if not, why (shown by explain())."""
    try:
        from llama_index.llms.openai import OpenAI
        from llama_index.llms.openai_like import OpenAILike
    except ImportError:  # the OpenAI integration is not installed: nothing to recognize
        return False, "llama-index-llms-openai is not installed"
    from llama_index.core.llms.structured_llm import StructuredLLM

    if not isinstance(llm, LLM):
        return False, f"{type(llm).__name__} is not a LlamaIndex LLM"
    if isinstance(llm, StructuredLLM) or not isinstance(llm, OpenAI):
        return False, f"{type(llm).__name__} is not an OpenAI-compatible LLM class Ayo knows"
    base = OpenAILike if isinstance(llm, OpenAILike) else OpenAI
    if over := overrides_reason(llm, base, _REQUEST_METHODS):
        return False, over
    if any(client is not None for client in shim.user_http_clients(llm)):
        return False, "it was given its own httpx client"
    for client in shim.cached_sdk_clients(llm):
        # the class caches the clients it builds itself; a client the user passed in may point elsewhere
        if client is not None and str(client.base_url).rstrip("/") != str(llm.api_base).rstrip("/"):
            return False, "it was given its own OpenAI client"
    if llm.modalities and "audio" in llm.modalities:
        return False, "audio modalities"
    if any(k in (llm.additional_kwargs or {}) for k in CLIENT_ONLY_KWARGS):
        return False, "additional_kwargs holds client-side options (extra_headers/extra_query/timeout)"
    if llm.default_headers:
        return False, "custom default_headers"
    return True, ""
