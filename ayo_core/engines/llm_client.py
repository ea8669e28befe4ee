"""Async client engine for a vLLM OpenAI-compatible server.

One ``LLMEngine`` per server; every call is one HTTP request, so batching
happens inside vLLM (continuous batching) and ordering through the per-request
``priority`` (the server runs ``--scheduling-policy priority``). Transport
failures and timeouts become ``LLMEngineError`` naming the server, so a dead
engine fails its pending calls instead of hanging them. Other OpenAI-compatible servers
(``transformers serve``) work too: streams are read as the OpenAI SDK reads them
(:mod:`ayo_core.engines.sse`), and what vLLM adds (``priority``) is dropped where refused.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx

from ayo_core.engines import capabilities
from ayo_core.engines.http_client import AsyncHTTPClient
from ayo_core.engines.sse import iter_sse
from ayo_core.runtime.bridge import for_this_loop, per_loop_map

log = logging.getLogger(__name__)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
Prompt = str | list[int]
Messages = list[dict[str, Any]]
StreamCallback = Callable[[str], None] | Callable[[str], Awaitable[None]]
# Called with each stream event's ``delta.tool_calls`` list, as the server sent it.
ToolCallCallback = Callable[[list[dict[str, Any]]], None]


class LLMEngineError(RuntimeError):
    """The LLM engine (a vLLM server) failed, died or timed out; ``base_url`` names it."""

    def __init__(self, message: str, base_url: str, status_code: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.base_url = base_url
        self.status_code = status_code
        self.body = body  # the server's raw error body (adapters rebuild the client SDK's own error from it)


class LLMRequestError(LLMEngineError):
    """The server answered with an HTTP error (bad request, prompt too long, unknown model...)."""


class StopStream(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a ``stream_cb`` when the rest of the answer cannot matter to its consumer.

    The engine stops reading, closes the stream (vLLM aborts the request and frees its
    batch slot) and returns the text received so far with ``finish_reason="ayo_stop"``.
    """


STOPPED = "ayo_stop"


@dataclass
class LLMResult:
    """One generation. ``cached_tokens`` is how many prompt tokens hit vLLM's prefix cache."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # last JSON body (logprobs...)
    # a chat answer's tool calls (OpenAI's shape); a stream's deltas merged by their index
    tool_calls: list[dict[str, Any]] | None = None
    # a stream's event that carried the finish_reason, as the server sent it: servers differ in whether
    # it also carries the last text (vLLM's length cut) and the usage (transformers serve)
    finish_event: dict[str, Any] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class StreamOpening:
    """How a server opens a chat stream: ``delta``, the first event's delta when that event carries no
    text (vLLM: ``{"role": "assistant", "content": ""}``; transformers serve: ``{"role": "assistant"}``),
    or None when the first event already carries text; ``role_with_text``: that first text's delta also
    names the role. A client reading the engine's stream as the server's (the OpenAI-client shim)
    opens it the same way."""

    delta: dict[str, Any] | None = field(default_factory=lambda: {"role": "assistant", "content": ""})
    role_with_text: bool = False

    @staticmethod
    def of(event: dict[str, Any]) -> StreamOpening | None:
        """The opening a stream's first event shows; None for an event without a choice (it tells nothing)."""
        choices = event.get("choices") or []
        if not choices:
            return None
        delta = choices[0].get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            return StreamOpening(None, "role" in delta)
        return StreamOpening(dict(delta))


def merge_tool_call_deltas(calls: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    """Fold a stream event's ``delta.tool_calls`` into ``calls``, as the OpenAI SDK's stream
    accumulator does: fields of the call at the same ``index`` are set once, ``arguments`` appended."""
    for delta in deltas:
        index = delta.get("index", 0)
        while len(calls) <= index:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = calls[index]
        call["id"] = call["id"] or delta.get("id")
        call["type"] = delta.get("type") or call["type"]
        function = delta.get("function") or {}
        call["function"]["name"] = call["function"]["name"] or function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""


def _usage_into(result: LLMResult, usage: dict[str, Any] | None) -> None:
    if not usage:
        return
    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    result.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    result.cached_tokens = int(details.get("cached_tokens") or 0)


async def _deliver(stream_cb: StreamCallback, delta: str) -> bool:
    """Hand ``delta`` to the callback; True when it raised :class:`StopStream`."""
    try:
        maybe = stream_cb(delta)
        if inspect.isawaitable(maybe):
            await maybe
    except StopStream:
        return True
    return False


def _choice_text(choice: dict[str, Any], chat: bool, streaming: bool) -> str:
    if not chat:
        return choice.get("text") or ""
    part = choice.get("delta" if streaming else "message") or {}
    return part.get("content") or ""


# What the OpenAI SDK retries (``openai._base_client``): timeouts, conflicts, rate limits,
# server errors, and transport failures; with its backoff, so a user's ``max_retries`` means
# under Ayo what it means in stock.
RETRY_STATUSES = frozenset({408, 409, 429})
INITIAL_RETRY_DELAY, MAX_RETRY_DELAY = 0.5, 8.0


def retry_delay(attempt: int, headers: Mapping[str, str] | None = None) -> float:
    """Seconds before retry number ``attempt + 1``: the server's ``retry-after`` when sane, else
    exponential backoff with jitter (as the OpenAI SDK waits)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = (headers or {}).get(name)
        try:
            wait = float(value) * scale if value is not None else None
        except ValueError:
            wait = None
        if wait is not None and 0 < wait <= 60:
            return wait
    return min(INITIAL_RETRY_DELAY * 2.0 ** attempt, MAX_RETRY_DELAY) * (1 - 0.25 * random.random())


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


class LLMEngine:
    """Async engine over one vLLM server (``base_url`` ends in ``/v1``).

    The HTTP client is created per event loop, so the engine can be shared
    process-wide (see ``registry``) and used from several ``asyncio.run`` calls.
    ``timeout`` bounds each read (for streams: the wait for the next chunk);
    ``connect_timeout`` bounds reaching the server.
    """

    def __init__(self, base_url: str, model: str = DEFAULT_MODEL, timeout: float = 300.0,
                 connect_timeout: float = 10.0, max_connections: int = 512) -> None:
        self.base_url = base_url.rstrip("/")
        # /tokenize, /detokenize and /health live at the server root, not under /v1.
        self.root_url = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        self.model = model
        self.timeout, self.connect_timeout, self.max_connections = timeout, connect_timeout, max_connections
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncHTTPClient] = per_loop_map()
        # False once the server rejected a request for its ``priority`` (servers without priority
        # scheduling may: older vLLM, other OpenAI-compatible servers); Ayo then sends none.
        self.accepts_priority = True
        # How the server opens a chat stream, as last seen (until then vLLM's way): see ``StreamOpening``
        self.chat_stream_opening = StreamOpening()

    def __repr__(self) -> str:
        return f"LLMEngine({self.base_url!r}, model={self.model!r})"

    def _client(self) -> AsyncHTTPClient:
        """This event loop's HTTP client (httpx's API over aiohttp: see ``http_client``)."""
        return for_this_loop(self._clients, lambda: AsyncHTTPClient(self.timeout, self.connect_timeout,
                                                                    self.max_connections), lambda c: c.is_closed)

    async def aclose(self) -> None:
        """Close this event loop's HTTP client (others close when their loop is collected)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    # -- errors -----------------------------------------------------------------------------------

    def _transport_error(self, op: str, exc: Exception) -> LLMEngineError:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
        return LLMEngineError(
            f"LLM engine {self.model!r} at {self.base_url} {kind} during {op}: {type(exc).__name__}: {exc}. "
            "Is the vLLM server still running? (its log is in $AYO_HOME/logs)", self.base_url)

    def _status_error(self, op: str, status: int, body: str) -> LLMRequestError:
        try:
            detail = json.loads(body)
            detail = detail.get("error", detail) if isinstance(detail, dict) else detail
            if isinstance(detail, dict):
                detail = detail.get("message", detail)
        except ValueError:
            detail = body[:500]
        return LLMRequestError(f"LLM engine {self.model!r} at {self.base_url} rejected {op} "
                               f"(HTTP {status}): {detail}", self.base_url, status, body=body)

    def _without_rejected_priority(self, status: int, text: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """``body`` minus ``priority`` when the server rejected the request for it, else None.

        Priorities only order requests: a server that cannot take them still gives the same
        answers, so Ayo drops them (once, for every later request) instead of failing the query.
        """
        if status not in (400, 422) or "priority" not in body or "priority" not in text.lower():
            return None
        if self.accepts_priority:
            self.accepts_priority = False
            log.warning("LLM engine at %s rejected a request priority (HTTP %s); sending none from now on. "
                        "Start vLLM with --scheduling-policy priority to let Ayo order requests.",
                        self.base_url, status)
        return {k: v for k, v in body.items() if k != "priority"}

    # -- plumbing ---------------------------------------------------------------------------------

    async def _post(self, url: str, body: dict[str, Any], op: str, max_retries: int = 0) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                resp = await self._client().post(url, json=body)
            except httpx.HTTPError as exc:
                if attempt >= max_retries:
                    raise self._transport_error(op, exc) from exc
                await self._before_retry(op, attempt, f"{type(exc).__name__}", None)
                attempt += 1
                continue
            if resp.status_code == 200:
                break
            retry = self._without_rejected_priority(resp.status_code, resp.text, body)
            if retry is not None:
                body = retry
            elif attempt < max_retries and _retryable(resp.status_code):
                await self._before_retry(op, attempt, f"HTTP {resp.status_code}", resp.headers)
                attempt += 1
            else:
                raise self._status_error(op, resp.status_code, resp.text)
        try:
            data: dict[str, Any] = resp.json()
        except ValueError as exc:
            raise LLMEngineError(f"LLM engine at {self.base_url} sent a non-JSON answer to {op}: "
                                 f"{resp.text[:200]!r}", self.base_url) from exc
        return data

    async def _before_retry(self, op: str, attempt: int, why: str, headers: Mapping[str, str] | None) -> None:
        delay = retry_delay(attempt, headers)
        log.info("LLM engine at %s: %s failed (%s); retry %d in %.2f s", self.base_url, op, why, attempt + 1, delay)
        await asyncio.sleep(delay)

    async def _stream(self, url: str, body: dict[str, Any], op: str,
                      max_retries: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Yield the JSON events of a server-sent-event stream.

        A failed request is retried (up to ``max_retries`` times) only while no event has been
        yielded: after that the consumer has seen part of an answer, which a new request would repeat.
        """
        attempt = 0
        while True:
            yielded, retry_why, headers = False, "", None
            try:
                async with self._client().stream("POST", url, json=body) as resp:
                    if resp.status_code != 200:
                        text = (await resp.aread()).decode("utf-8", "replace")
                        retry = self._without_rejected_priority(resp.status_code, text, body)
                        if retry is not None:
                            body = retry
                            continue
                        if attempt >= max_retries or not _retryable(resp.status_code):
                            raise self._status_error(op, resp.status_code, text)
                        retry_why, headers = f"HTTP {resp.status_code}", resp.headers
                    else:
                        async with aclosing(self._events(resp, op)) as events:
                            async for event in events:
                                yielded = True
                                yield event
                        return
            except httpx.HTTPError as exc:
                if yielded or attempt >= max_retries:
                    raise self._transport_error(op, exc) from exc
                retry_why = type(exc).__name__
            await self._before_retry(op, attempt, retry_why, headers)
            attempt += 1

    async def _events(self, resp: Any, op: str) -> AsyncIterator[dict[str, Any]]:
        """The JSON events of an accepted stream, read as the OpenAI SDK reads them (see ``sse``).

        The stream ends at ``data: [DONE]`` or, as for the SDK, at the end of the body (servers such
        as ``transformers serve`` send no ``[DONE]``). A server that dies mid-answer still fails the
        call: its body ends early (an unfinished chunked body), which is a transport error.
        """
        lines = resp.aiter_lines()
        async with aclosing(iter_sse(lines)) as events:
            async for sse in events:
                if sse.data.startswith("[DONE]"):
                    # Read the body's end too: a stream left unfinished drops its
                    # connection (the server sees the client hang up) instead of reusing it.
                    async for _rest in lines:
                        pass
                    return
                if sse.data:  # an event without data (a named keep-alive) carries nothing: the spec drops it
                    yield self._event(sse.data, op)

    def _event(self, payload: str, op: str) -> dict[str, Any]:
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise LLMEngineError(f"LLM engine at {self.base_url} sent a malformed stream event in "
                                 f"{op}: {payload[:200]!r}", self.base_url) from exc
        if not isinstance(event, dict):
            raise LLMEngineError(f"LLM engine at {self.base_url} sent a stream event in {op} that is not a "
                                 f"JSON object: {payload[:200]!r}", self.base_url)
        if event.get("error"):  # an error event (``"error": null`` is none, as for the SDK)
            raise self._status_error(op, 500, payload)
        return event

    def _body(self, max_tokens: int | None, temperature: float | None, stop: str | list[str] | None,
              priority: int, extra: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if stop is not None:
            body["stop"] = stop
        if priority and self.accepts_priority:
            # vLLM extension; only sent when set, so servers without priority scheduling still work.
            body["priority"] = priority
        body.update(extra)
        return body

    async def _generate(self, path: str, body: dict[str, Any], chat: bool, stream_cb: StreamCallback | None,
                        max_retries: int, tool_call_cb: ToolCallCallback | None = None) -> LLMResult:
        op = f"POST {path}"
        url = self.base_url + path
        if stream_cb is None:
            data = await self._post(url, body, op, max_retries)
            choice = (data.get("choices") or [{}])[0]
            result = LLMResult(_choice_text(choice, chat, False), finish_reason=choice.get("finish_reason"), raw=data)
            result.tool_calls = (choice.get("message") or {}).get("tool_calls") if chat else None
            _usage_into(result, data.get("usage"))
            return result
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        parts: list[str] = []
        result = LLMResult("")
        events = self._stream(url, body, op, max_retries)
        opened = not chat
        try:
            async for event in events:
                if not opened and (opening := StreamOpening.of(event)) is not None:
                    self.chat_stream_opening, opened = opening, True
                for choice in event.get("choices") or []:
                    if chat and (tool_deltas := (choice.get("delta") or {}).get("tool_calls")):
                        if result.tool_calls is None:
                            result.tool_calls = []
                        merge_tool_call_deltas(result.tool_calls, tool_deltas)
                        if tool_call_cb is not None:
                            tool_call_cb(tool_deltas)
                    delta = _choice_text(choice, chat, True)
                    if delta:
                        parts.append(delta)
                        if await _deliver(stream_cb, delta):
                            result.text, result.finish_reason = "".join(parts), STOPPED
                            result.completion_tokens = len(parts)  # deltas: about one token each
                            return result
                    if choice.get("finish_reason"):
                        result.finish_reason, result.finish_event = choice["finish_reason"], event
                _usage_into(result, event.get("usage"))
                result.raw = event
        finally:
            await events.aclose()  # an early stop closes the HTTP stream: the server aborts the request
        result.text = "".join(parts)
        return result

    # -- public API -------------------------------------------------------------------------------

    async def complete(self, prompt: Prompt, max_tokens: int | None = None, temperature: float | None = 0.0,
                       stop: str | list[str] | None = None, priority: int = 0,
                       stream_cb: StreamCallback | None = None, max_retries: int = 0, **extra: Any) -> LLMResult:
        """``/v1/completions`` for a text or token-id prompt. ``extra`` goes into the body as is
        (seed, top_p, logprobs, ignore_eos, ...). With ``stream_cb`` the answer is streamed and
        each delta is passed to it (sync or async callable) as it arrives. ``max_retries``: how
        often a request that failed the way the OpenAI SDK retries (timeouts, 408/409/429/5xx,
        transport errors) is sent again, with the SDK's backoff; a stream only before its first delta."""
        body = self._body(max_tokens, temperature, stop, priority, extra)
        body["prompt"] = prompt
        return await self._generate("/completions", body, False, stream_cb, max_retries)

    async def chat(self, messages: Messages, max_tokens: int | None = None, temperature: float | None = 0.0,
                   stop: str | list[str] | None = None, priority: int = 0,
                   stream_cb: StreamCallback | None = None, max_retries: int = 0,
                   tool_call_cb: ToolCallCallback | None = None, **extra: Any) -> LLMResult:
        """``/v1/chat/completions``; same options as ``complete``. ``tools``, ``tool_choice`` ... go in
        ``extra``; the answer's calls are ``LLMResult.tool_calls``. When streamed, ``tool_call_cb`` gets
        each event's ``delta.tool_calls`` as it arrives (in order with ``stream_cb``'s text)."""
        body = self._body(max_tokens, temperature, stop, priority, extra)
        body["messages"] = messages
        return await self._generate("/chat/completions", body, True, stream_cb, max_retries, tool_call_cb)

    async def stream_complete(self, prompt: Prompt, max_tokens: int | None = None,
                              temperature: float | None = 0.0, stop: str | list[str] | None = None,
                              priority: int = 0, max_retries: int = 0, **extra: Any) -> AsyncIterator[str]:
        """Text deltas of ``complete`` as they are generated."""
        body = self._body(max_tokens, temperature, stop, priority, extra)
        body.update(prompt=prompt, stream=True)
        async for event in self._stream(self.base_url + "/completions", body, "POST /completions", max_retries):
            for choice in event.get("choices") or []:
                if delta := _choice_text(choice, False, True):
                    yield delta

    async def stream_chat(self, messages: Messages, max_tokens: int | None = None,
                          temperature: float | None = 0.0, stop: str | list[str] | None = None,
                          priority: int = 0, max_retries: int = 0, **extra: Any) -> AsyncIterator[str]:
        """Text deltas of ``chat`` as they are generated."""
        body = self._body(max_tokens, temperature, stop, priority, extra)
        body.update(messages=messages, stream=True)
        async for event in self._stream(self.base_url + "/chat/completions", body, "POST /chat/completions",
                                        max_retries):
            for choice in event.get("choices") or []:
                if delta := _choice_text(choice, True, True):
                    yield delta

    async def prefill(self, prompt: Prompt | None = None, messages: Messages | None = None, priority: int = 0,
                      **extra: Any) -> LLMResult:
        """Run only the prefill of ``prompt`` (or ``messages``) so a later request sharing the prefix
        hits vLLM's prefix cache. The cache matches whole token blocks: to warm part of a final
        request, pass a token-id prefix of it (see ``tokenize``)."""
        if (prompt is None) == (messages is None):
            raise ValueError("LLMEngine.prefill needs exactly one of prompt= or messages=")
        if messages is not None:
            return await self.chat(messages, max_tokens=1, temperature=0.0, priority=priority, **extra)
        assert prompt is not None
        return await self.complete(prompt, max_tokens=1, temperature=0.0, priority=priority, **extra)

    async def tokenize(self, prompt: str | None = None, messages: Messages | None = None,
                       **extra: Any) -> list[int]:
        """Token ids as the server sees them. With ``messages`` the chat template is rendered
        exactly as ``/v1/chat/completions`` does (generation prompt included by default)."""
        if (prompt is None) == (messages is None):
            raise ValueError("LLMEngine.tokenize needs exactly one of prompt= or messages=")
        body: dict[str, Any] = {"model": self.model, **extra}
        if messages is not None:
            body["messages"] = messages
        else:
            body["prompt"] = prompt
        try:
            data = await self._post(self.root_url + "/tokenize", body, "POST /tokenize")
        except LLMRequestError as exc:
            if exc.status_code == 404:  # not vLLM (transformers serve, ...): stop warming prefixes there
                capabilities.note_no_tokenize(self.root_url)
            raise
        return list(data["tokens"])

    async def detokenize(self, tokens: list[int]) -> str:
        data = await self._post(self.root_url + "/detokenize", {"model": self.model, "tokens": tokens},
                                "POST /detokenize")
        return str(data["prompt"])

    async def health(self) -> bool:
        """True when the server answers ``/health`` with 200."""
        try:
            resp = await self._client().get(self.root_url + "/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200
