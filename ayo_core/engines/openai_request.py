"""An OpenAI-compatible request exactly as a framework's LLM class builds it, and how Ayo sends it.

Adapters build the JSON body with the framework's own code (nothing re-typed); what is
framework-independent lives here: which SDK keyword arguments reach the body, how a body
becomes an engine call (through a node's engine proxy, so the engine scheduler batches and
prioritizes it), and the outer retry loop LLM integrations wrap around the SDK's own
retries (tenacity in ``llama_index.llms.openai``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ayo_core.engines.llm_client import LLMEngineError
from ayo_core.engines.prefix_warming import STAND_INS

log = logging.getLogger(__name__)

# Client-side options of the openai SDK that are not part of the JSON body.
CLIENT_ONLY_KWARGS = ("extra_headers", "extra_query", "timeout")

# marks where a late value (one retrieval produces) lands in a rendered request
SENTINEL = "\u2063ayo-late\u2063"

# tenacity's stop_after_delay in the integrations' retry decorators: no new attempt after 60 s
OUTER_RETRY_WINDOW_S = 60.0


@dataclass(frozen=True)
class LLMRequest:
    """One request exactly as the stock LLM class would send it (minus ``stream``)."""

    kind: Literal["chat", "completion"]
    body: dict[str, Any]

    @property
    def text(self) -> str:
        """The prompt text (completion) or the concatenated message contents (chat)."""
        if self.kind == "completion":
            return str(self.body["prompt"])
        return "\n".join(str(m.get("content", "")) for m in self.body["messages"])

    @property
    def tokenize_args(self) -> dict[str, Any]:
        """``{"prompt": text}`` or ``{"messages": [...]}``: what the server's ``/tokenize`` takes for it."""
        if self.kind == "completion":
            return {"prompt": str(self.body["prompt"])}
        return {"messages": self.body["messages"]}

    @property
    def path(self) -> str:
        """The endpoint path the SDK posts this request to."""
        return "/chat/completions" if self.kind == "chat" else "/completions"


def request_prefix(render: Callable[[str], LLMRequest]) -> dict[str, Any] | None:
    """The head of the request ``render(late_value)`` builds, before the late value (``tokenize_args``
    shape); None when the late value is not in the request or comes first (nothing is known early)."""
    request = render(SENTINEL)
    if request.kind == "completion":
        text = str(request.body["prompt"])
        cut = text.find(SENTINEL)
        return {"prompt": text[:cut]} if cut > 0 else None
    messages = request.body["messages"]
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str) and SENTINEL in content:
            head = {**m, "content": content[: content.find(SENTINEL)]}
            return {"messages": [*messages[:i], head]}
    return None


def stand_in_renders(render: Callable[[str], LLMRequest]) -> list[dict[str, Any]] | None:
    """``tokenize`` arguments of ``render``'s request with each prefix-warming stand-in as the late
    value (what :func:`ayo_core.engines.prefix_warming.warm_prefix` takes); None as :func:`request_prefix`."""
    if request_prefix(render) is None:
        return None
    return [render(stand_in).tokenize_args for stand_in in STAND_INS]


def json_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """SDK keyword arguments as they land in the JSON body (the openai SDK merges ``extra_body``)."""
    body = {k: v for k, v in kwargs.items() if k not in CLIENT_ONLY_KWARGS and k != "extra_body"}
    body.update(kwargs.get("extra_body") or {})
    body.pop("stream", None)
    return body


async def send_request(proxy: Any, request: LLMRequest, priority: int | None = None, stream_cb: Any = None,
                       max_retries: int = 0) -> Any:
    """``request`` through an LLM engine (or a node's engine proxy): the ``LLMResult`` (text, token usage).
    A 429 / 5xx answer is retried ``max_retries`` times by the engine, as the openai SDK does."""
    body = dict(request.body)
    kw: dict[str, Any] = {"max_tokens": body.pop("max_tokens", None), "temperature": body.pop("temperature", None),
                          "stop": body.pop("stop", None), "max_retries": max_retries}
    if stream_cb is not None:
        kw["stream_cb"] = stream_cb
    if priority is not None:
        kw["priority"] = priority
    if request.kind == "chat":
        return await proxy.chat(body.pop("messages"), **kw, **body)
    return await proxy.complete(body.pop("prompt"), **kw, **body)


def outer_retry_wait(attempt: int) -> float:
    """tenacity's ``wait_random_exponential(min=1, max=20)`` after attempt number ``attempt``."""
    high = max(1.0, min(20.0, 2.0 ** (attempt - 1)))
    return random.uniform(1.0, high)


async def with_outer_retries(call: Callable[[Callable[[str], Any] | None], Awaitable[Any]], *, attempts: int,
                             stream_cb: Callable[[str], Any] | None, to_error: Callable[[LLMEngineError], BaseException],
                             retryable: Callable[[BaseException], bool], label: str) -> Any:
    """``call(stream_cb)`` repeated as an integration's retry decorator repeats the SDK call.

    Up to ``attempts`` attempts within :data:`OUTER_RETRY_WINDOW_S`, on the errors ``retryable``
    accepts (``to_error`` turns the engine's failure into the one the stock SDK raises, which is
    what is raised in the end), so a server restarting for ten seconds is survived. A streamed
    call is only repeated while nothing was streamed yet (deltas already went on).
    """
    streamed = False

    def on_delta(delta: str) -> Any:
        nonlocal streamed
        streamed = True
        return stream_cb(delta)

    started, attempt = time.monotonic(), 1
    while True:
        try:
            return await call(on_delta if stream_cb is not None else None)
        except LLMEngineError as exc:
            error = to_error(exc)
            if (streamed or attempt >= attempts or not retryable(error)
                    or time.monotonic() - started >= OUTER_RETRY_WINDOW_S):
                raise error from exc
            wait = outer_retry_wait(attempt)
            log.warning("Retrying %s in %.1f s as it raised %s (attempt %d of %d, as stock)",
                        label, wait, type(error).__name__, attempt, attempts)
            await asyncio.sleep(wait)
            attempt += 1
