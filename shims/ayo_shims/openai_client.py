"""A client shim for the openai SDK: a model's requests go to Ayo's LLM engine, answered as the SDK would.

Why a client shim instead of re-typing the request: a framework's OpenAI model
(langchain-openai's ``ChatOpenAI`` / ``OpenAI``) builds the request (message conversion,
``max_completion_tokens``, ``stop``, ``extra_body``, ``model_kwargs``) and turns the response
into its own message / text, fires callbacks and maps errors in its own code. We keep all
of that: a *copy* of the user's model gets an async client resource whose
``create(**payload)`` sends the very payload the stock client would send through the LLM
engine (priority, stream callbacks, application context), and answers with what the
OpenAI SDK would have parsed. Tool-calling requests (``tools``, ``tool_choice``,
``parallel_tool_calls``) go through the engine too: a non-streamed one as one request whose
body comes back as the server wrote it, a streamed one with the server's tool-call deltas
passed on chunk by chunk. Anything the engine does not speak (response formats, ``n > 1``,
logprobs) goes to the original client.

The engine to use is taken from a context variable that a graph node sets around its
model call (:func:`route`), so the same model copy serves every query of a batch. Nothing
here imports ``ayo_core``: the adapter passes the engine's error classes (``engine_errors``)
when it builds a shim.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ayo_shims import openai_sdk

log = logging.getLogger(__name__)

# Request keys the engine forwards verbatim; anything else means "not ours".
_CHAT_KEYS = {
    "model", "stream", "stream_options", "messages", "temperature", "max_tokens",
    "max_completion_tokens", "stop", "top_p", "seed", "presence_penalty",
    "frequency_penalty", "n", "extra_body", "logprobs", "top_logprobs", "logit_bias", "user",
}
_TOOL_KEYS = {"tools", "tool_choice", "parallel_tool_calls"}
_COMPLETION_KEYS = (_CHAT_KEYS - {"messages", "max_completion_tokens"}) | {"prompt", "best_of", "echo", "suffix"}
_CHAT_KEYS |= _TOOL_KEYS
_ids = itertools.count()
_TIMED_OUT = object()


@dataclass(frozen=True)
class _Opening:
    delta: dict[str, Any] | None
    role_with_text: bool = False


_VLLM_OPENING = _Opening({"role": "assistant", "content": ""})  # vLLM opens a chat stream with an empty role chunk


@dataclass
class _ToolDeltas:
    """A stream event's ``delta.tool_calls`` (in the shim's chunk queue, beside text deltas)."""

    deltas: list[dict[str, Any]]


@dataclass
class Route:
    """Where the next model request of this task goes, and who listens to its text."""

    llm: Any  # LLMEngine or the runtime's scheduled view of it (ctx.llm)
    priority: int | None = None  # None: the engine scheduler's policy decides
    on_delta: Callable[[str], None] | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop | None = None  # the engine's loop: a sync client's request is answered there


_ROUTE: contextvars.ContextVar[Route | None] = contextvars.ContextVar("ayo_openai_client_route", default=None)


@contextlib.contextmanager
def route(r: Route) -> Iterator[Route]:
    """Send the model requests made inside this block (this task and its children) to ``r.llm``."""
    token = _ROUTE.set(r)
    try:
        yield r
    finally:
        _ROUTE.reset(token)


def current_route() -> Route | None:
    """The route set by the enclosing graph node, if any."""
    return _ROUTE.get()


def _engine_model(llm: Any) -> str | None:
    return getattr(llm, "model", None) or getattr(getattr(llm, "engine", None), "model", None)


def _engine_can_serve(r: Route | None, payload: dict, keys: set[str]) -> bool:
    if r is None:
        return False
    if set(payload) - keys:
        return False
    if payload.get("n") not in (None, 1) or payload.get("logprobs") or payload.get("top_logprobs"):
        return False
    if payload.get("echo") or payload.get("suffix") or payload.get("best_of") not in (None, 1):
        return False
    model = _engine_model(r.llm)
    return model is None or payload.get("model") == model


def engine_kwargs(payload: dict, drop: set[str]) -> dict[str, Any]:
    """The engine call's keyword arguments for an OpenAI ``payload``.

    ``extra_body`` is flattened the way the OpenAI SDK merges it into the JSON body;
    ``max_completion_tokens`` stays as ChatOpenAI names it. Keys the user never set stay
    absent: an unset ``temperature`` means the server's default, not the engine's 0.0.
    """
    out = {k: v for k, v in payload.items() if k not in drop and k != "extra_body"}
    out.update(payload.get("extra_body") or {})
    # The engine omits None, so an unset max_tokens / temperature stays unset (server default).
    out.setdefault("max_tokens", None)
    out.setdefault("temperature", None)
    return out


class _Raw:
    """What ``with_raw_response.create`` returns: ``parse()`` gives the response."""

    def __init__(self, value: Any) -> None:
        self._value = value
        self.headers: dict[str, str] = {}
        self.http_response = None

    def parse(self) -> Any:
        return self._value


class _RawView:
    def __init__(self, owner: _ShimBase) -> None:
        self._owner = owner

    async def create(self, **payload: Any) -> Any:
        routed = self._owner._routed(payload)
        original = self._owner._original.with_raw_response.create
        if routed is None:
            return await original(**payload)
        return await self._owner._answer(routed, payload, raw=True)


class _Stream:
    """An async chunk stream with the context-manager shape of the SDK's ``AsyncStream``."""

    def __init__(self, agen: AsyncIterator[dict]) -> None:
        self._agen = agen

    async def __aenter__(self) -> _Stream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[dict]:
        return self._agen

    async def aclose(self) -> None:
        close = getattr(self._agen, "aclose", None)
        if close is not None:
            await close()


class _ShimBase:
    """Common part of the chat and completion client shims."""

    keys: set[str] = set()
    object_name = ""
    opening_chunk = True  # a chat stream may open with a role chunk (the server's way), a completion stream not

    def __init__(self, original: Any, engine_errors: tuple[type[BaseException], ...] = ()) -> None:
        self._original = original
        self.engine_errors = engine_errors  # the LLM engine's failures (others propagate as they are)

    @property
    def with_raw_response(self) -> _RawView:
        return _RawView(self)

    async def create(self, **payload: Any) -> Any:
        routed = self._routed(payload)
        if routed is None:
            return await self._original.create(**payload)
        return await self._answer(routed, payload)

    async def _answer(self, routed: Any, payload: dict, raw: bool = False) -> Any:
        """The engine's answer within the user's timeout; the stock outcome when the engine fails."""
        try:
            value = await asyncio.wait_for(routed, self.read_timeout) if self.read_timeout else await routed
        except self.engine_errors as exc:
            return await self._fallback(payload, exc, raw=raw)
        except TimeoutError:
            return await self._timed_out(payload, raw=raw)
        return _Raw(value) if raw else value

    @property
    def read_timeout(self) -> float | None:
        """How long the user's client waits for the server's answer (``ChatOpenAI(timeout=...)``:
        httpx's read timeout); None when unset (the SDK then waits as long as it takes)."""
        timeout = getattr(openai_sdk.resource_client(self._original), "timeout", None)
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            return float(timeout) if timeout > 0 else None
        read = getattr(timeout, "read", None)
        return float(read) if isinstance(read, (int, float)) and read > 0 else None

    async def _timed_out(self, payload: dict, raw: bool = False) -> Any:
        """No answer within the user's timeout: the request goes through the model's own client,
        which applies that timeout and its retries, as stock's did (the SDK's timeout error, or an
        answer when a retry is quicker)."""
        log.warning("LLM engine gave no answer within the model's timeout (%.3g s); sending the request "
                    "through the model's own client", self.read_timeout)
        return await self._original_create(payload, raw)

    async def _original_create(self, payload: dict, raw: bool) -> Any:
        """The request sent through the model's own client, as stock sends it."""
        create = self._original.with_raw_response.create if raw else self._original.create
        return await create(**payload)

    @property
    def max_retries(self) -> int:
        """The retries the user's client would make (``ChatOpenAI(max_retries=N)``, SDK default 2)."""
        n = getattr(openai_sdk.resource_client(self._original), "max_retries", 0)
        return n if isinstance(n, int) and n > 0 else 0

    async def _fallback(self, payload: dict, exc: BaseException, raw: bool = False) -> Any:
        """The engine failed after the user's ``max_retries``: give the user the stock outcome.

        An HTTP error becomes the SDK's own exception, built by the SDK from the server's status
        and body, without another request: the request is the one stock sends, so stock got this
        answer too (another request through the model's client would also meet its pooled
        connections of closed event loops, which stock does not touch at that moment). A transport
        failure (server gone) is sent through the model's own client, so the SDK raises its own
        connection error after its retries.
        """
        rebuilt = _sdk_status_error(self._original, exc)
        if rebuilt is not None:
            raise rebuilt
        log.warning("LLM engine failed (%s: %s); sending the request through the model's own client",
                    type(exc).__name__, exc)
        try:
            return await self._original_create(payload, raw)
        except Exception as stock_exc:
            # The SDK's "Connection error." names no server: say which engine was gone.
            stock_exc.add_note(f"(Ayo's engine failed first: {exc})")
            raise

    def _routed(self, payload: dict) -> Any:
        r = current_route()
        if not _engine_can_serve(r, payload, self.keys):
            if r is not None:
                log.debug("request not routed to the engine (unsupported keys): %s", sorted(payload))
            return None
        if payload.get("stream"):
            return self._stream(r, payload)
        return self._once(r, payload)

    async def _stream(self, r: Route, payload: dict) -> _Stream:
        return _Stream(self._chunks(r, payload))

    async def _call(self, r: Route, payload: dict, on_delta: Callable[[str], None] | None,
                    on_tool_delta: Callable[[list[dict]], None] | None = None) -> Any:
        raise NotImplementedError

    async def _once(self, r: Route, payload: dict) -> dict:
        raise NotImplementedError

    async def _chunks(self, r: Route, payload: dict) -> AsyncIterator[dict]:
        """Run the request with a stream callback and yield SDK-shaped chunk dicts as text arrives."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        def on_delta(text: str) -> None:
            if r.on_delta is not None:
                r.on_delta(text)
            queue.put_nowait(text)

        def on_tool_delta(deltas: list[dict]) -> None:
            queue.put_nowait(_ToolDeltas(deltas))

        task = asyncio.ensure_future(self._call(r, payload, on_delta, on_tool_delta))
        task.add_done_callback(lambda _t: queue.put_nowait(None))
        rid, created = f"ayo-{next(_ids)}", int(time.time())
        sent = False
        # The latest chunk waits for the next delta: vLLM sends a length-cut answer's finish_reason on the
        # last token's chunk (not on a chunk of its own), and so must the stream here.
        held: dict | None = None
        try:
            while (delta := await self._next_delta(queue, sent)) is not None:
                if delta is _TIMED_OUT:  # nothing within the user's timeout: stock's client takes over
                    task.cancel()
                    async for chunk in _sdk_chunks(await self._timed_out(payload)):
                        yield chunk
                    return
                if delta:
                    opening = None if sent else self._opening(r)
                    if opening is not None and opening.delta is not None:
                        yield self._opening_chunk(rid, created, payload, opening.delta)
                    sent = True
                    if held is not None:
                        yield held
                    held = (self._tool_chunk(rid, created, payload, delta.deltas) if isinstance(delta, _ToolDeltas)
                            else self._chunk(rid, created, payload, delta, None,
                                             first=opening is not None and opening.role_with_text))
            if task.exception() is not None and not sent and isinstance(task.exception(), self.engine_errors):
                async for chunk in _sdk_chunks(await self._fallback(payload, task.exception())):
                    yield chunk
                return
            if not sent and (opening := self._opening(r)) is not None and opening.delta is not None:
                yield self._opening_chunk(rid, created, payload, opening.delta)
            if held is not None and task.exception() is not None:
                yield held  # what arrived before the failure, then the engine's error
            for chunk in self._closing_chunks(rid, created, payload, held, task.result()):
                yield chunk
        finally:
            if not task.done():
                task.cancel()

    def _opening(self, r: Route) -> Any:
        """How the server behind the engine opens a chat stream, as the engine last saw it (its
        ``chat_stream_opening``: ``delta``, the opening event's delta or None, ``role_with_text``);
        vLLM's way for an engine that does not say (a remote replica); None for a completion stream."""
        if not self.opening_chunk:
            return None
        engine = getattr(r.llm, "engine", r.llm)  # the scheduled view's engine
        return getattr(engine, "chat_stream_opening", None) or _VLLM_OPENING

    def _opening_chunk(self, rid: str, created: int, payload: dict, delta: dict[str, Any]) -> dict:
        return {"id": rid, "object": self.object_name, "created": created, "model": payload.get("model"),
                "choices": [{"index": 0, "delta": dict(delta), "finish_reason": None, "logprobs": None}]}

    def _closing_chunks(self, rid: str, created: int, payload: dict, held: dict | None, result: Any) -> list[dict]:
        """The held chunk, the finishing chunk and the usage chunk, as vLLM ends a stream: a length cut
        finishes on the held (last token's) chunk; vLLM puts the response-level fields on the last event:
        the usage event when the request asked for usage, else the finishing chunk (the engine always
        asks for usage)."""
        finish = result.finish_reason or "stop"
        # Servers differ in how a stream ends; follow the one that answered when the engine saw it:
        # transformers serve finishes on an empty chunk of its own that carries the usage too.
        server_finish = getattr(result, "finish_event", None)
        on_last_token = _carries_output(server_finish) if isinstance(server_finish, dict) else finish == "length"
        out = []
        if held is not None and on_last_token:
            last = {**held, "choices": [{**held["choices"][0], "finish_reason": finish}]}
        else:
            out += [held] if held is not None else []
            last = self._chunk(rid, created, payload, "", finish)
        extras = _server_extras(result)
        if isinstance(server_finish, dict) and server_finish.get("usage"):
            return [*out, {**last, "usage": _usage(result), **extras}]  # no usage chunk of its own
        with_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        out.append(last if with_usage else {**last, **extras})
        if with_usage:
            out.append({"id": rid, "object": self.object_name, "created": created, "model": payload.get("model"),
                        "choices": [], "usage": _usage(result), **extras})
        return out

    async def _next_delta(self, queue: asyncio.Queue, sent: bool) -> Any:
        """The next text delta; ``_TIMED_OUT`` when the first one takes longer than the user's timeout
        (once text has reached the user, a new request would repeat it: the stream then waits)."""
        if sent or not self.read_timeout:
            return await queue.get()
        try:
            return await asyncio.wait_for(queue.get(), self.read_timeout)
        except TimeoutError:
            return _TIMED_OUT

    def _chunk(self, rid: str, created: int, payload: dict, text: str, finish: str | None, first: bool = False) -> dict:
        raise NotImplementedError

    def _tool_chunk(self, rid: str, created: int, payload: dict, deltas: list[dict]) -> dict:
        """A chunk carrying the server's tool-call deltas (chat only: completions have no tools)."""
        return {"id": rid, "object": self.object_name, "created": created, "model": payload.get("model"),
                "choices": [{"index": 0, "delta": {"tool_calls": deltas}, "finish_reason": None, "logprobs": None}]}


async def _sdk_chunks(stream: Any) -> AsyncIterator[dict]:
    """The chunks of a stream the model's own client answered with, as dicts (the shim's chunk shape)."""
    async for chunk in stream:
        yield chunk if isinstance(chunk, dict) else chunk.model_dump()


def _sdk_status_error(original: Any, exc: BaseException) -> BaseException | None:
    """The OpenAI SDK's exception for the server's HTTP error in ``exc``, built by the SDK itself
    (same class and message as stock); None when ``exc`` carries no HTTP status."""
    from ayo_shims.openai_errors import sdk_error

    client = openai_sdk.resource_client(original)
    if client is None:
        return None
    return sdk_error(client, str(getattr(client, "base_url", "http://localhost/")), exc, transport=False)


def _parsed(kind: str, body: dict[str, Any]) -> Any:
    """``body`` parsed into the OpenAI SDK's ``ChatCompletion`` / ``Completion``, as the stock client
    parses a server's answer (its unset optional fields, e.g. ``usage.completion_tokens_details``,
    then read as stock's do); the dict itself if the SDK will not take it."""
    from openai.types import Completion
    from openai.types.chat import ChatCompletion

    model = ChatCompletion if kind == "ChatCompletion" else Completion
    try:
        return model.model_validate(body)
    except ValueError:  # pydantic's ValidationError: keep the dict, which the model also reads
        log.debug("answer not parsed into the SDK's %s", kind, exc_info=True)
        return body


def _is_full_body(raw: Any, kind: str) -> bool:
    """``raw`` is a complete non-streamed response body of ``kind`` (not a stream's last event)."""
    return isinstance(raw, dict) and raw.get("object") == kind and bool(raw.get("choices"))


def _carries_output(event: dict[str, Any]) -> bool:
    """The server's finishing stream event also carries text or tool calls (vLLM's length cut does)."""
    choice = (event.get("choices") or [{}])[0]
    delta = choice.get("delta") or {}
    return bool(choice.get("text") or delta.get("content") or delta.get("tool_calls"))


def _server_extras(result: Any) -> dict[str, Any]:
    """Response-level fields of the server's last stream event that the SDK chunks carry
    (``system_fingerprint``, ``service_tier``)."""
    raw = getattr(result, "raw", None) or {}
    return {k: raw[k] for k in ("system_fingerprint", "service_tier") if raw.get(k) is not None}


def _response_fields(result: Any) -> dict[str, Any]:
    """A non-streamed body's id, creation time and server extras for an answer the engine streamed
    (to a listener): the server's own, from its stream's events (the request's id there is the one a
    non-streamed answer would carry; vLLM sends ``system_fingerprint`` on the last event); Ayo's own id
    for an answer made of several requests."""
    raw = getattr(result, "raw", None) or {}
    return {"id": raw.get("id") or f"ayo-{next(_ids)}", "created": raw.get("created") or int(time.time()),
            **_server_extras(result)}


def _usage(result: Any) -> dict[str, Any]:
    raw = getattr(result, "raw", None)
    server = raw.get("usage") if isinstance(raw, dict) else None
    if isinstance(server, dict) and server.get("total_tokens") is not None:
        return dict(server)  # the server's own usage event: its numbers and fields, as stock reads them
    usage = {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }
    cached = getattr(result, "cached_tokens", None)
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


# vLLM writes a stream's usage event without its null fields (``vllm/entrypoints/openai/chat_completion/
# serving.py``: ``final_usage_chunk.model_dump_json(exclude_unset=True, exclude_none=True)``) and a
# non-streamed body with them (``UsageInfo``, ``PromptTokenUsageInfo`` in ``vllm/entrypoints/serve/engine/
# protocol.py``: ``multimodal_tokens`` is null for a text prompt)
_VLLM_USAGE_FIELDS = ("prompt_tokens_details", "completion_tokens_details")
_VLLM_PROMPT_DETAILS_FIELDS = ("cached_tokens", "created_cache_tokens", "multimodal_tokens")


def _full_body_usage(result: Any) -> dict[str, Any]:
    """The usage a non-streamed answer would carry, for an answer the engine streamed (to a listener):
    the stream's usage, with the null fields a vLLM server leaves out of a stream only."""
    usage = _usage(result)
    if not str(_server_extras(result).get("system_fingerprint", "")).startswith("vllm"):
        return usage
    usage = {**dict.fromkeys(_VLLM_USAGE_FIELDS), **usage}
    if isinstance(usage["prompt_tokens_details"], dict):
        usage["prompt_tokens_details"] = {**dict.fromkeys(_VLLM_PROMPT_DETAILS_FIELDS), **usage["prompt_tokens_details"]}
    return usage


def _message(result: Any) -> dict[str, Any]:
    """The assistant message of an answer the engine did not return whole (OpenAI's shape: no text
    beside tool calls is ``content: None``)."""
    calls = getattr(result, "tool_calls", None)
    if not calls:
        return {"role": "assistant", "content": result.text}
    return {"role": "assistant", "content": result.text or None, "tool_calls": calls}


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class SyncClientShim:
    """Stands in for the sync client (``OpenAI().completions``) on a copy of a model whose async client is
    ``async_shim``: a request made under a :class:`Route` with a loop (a worker thread of a sync call, the
    route copied into it) is answered by ``async_shim`` on that loop, so the model's sync code runs as in
    stock's ``invoke`` (``BaseOpenAI._generate`` reads what its ``_agenerate`` does not: the
    ``system_fingerprint``, an ``error`` body). Anything else goes to the SDK's own client."""

    def __init__(self, original: Any, async_shim: _ShimBase) -> None:
        self._original, self._async = original, async_shim

    def create(self, **payload: Any) -> Any:
        r = current_route()
        if r is None or r.loop is None or payload.get("stream") or _running_loop() is r.loop:
            # on the engine's loop itself a wait for the loop would never end: the SDK's own client
            return self._original.create(**payload)
        return asyncio.run_coroutine_threadsafe(self._async.create(**payload), r.loop).result()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class ChatCompletionsShim(_ShimBase):
    """Stands in for ``AsyncOpenAI().chat.completions`` on a copy of a ``ChatOpenAI``."""

    keys = _CHAT_KEYS
    object_name = "chat.completion.chunk"

    async def _call(self, r: Route, payload: dict, on_delta: Callable[[str], None] | None,
                    on_tool_delta: Callable[[list[dict]], None] | None = None) -> Any:
        kwargs = engine_kwargs(payload, {"model", "stream", "stream_options", "messages"})
        if r.priority is not None:
            kwargs["priority"] = r.priority
        if on_tool_delta is not None and payload.get("tools"):
            kwargs["tool_call_cb"] = on_tool_delta
        if payload.get("stream") is False:
            kwargs["stream"] = False  # as the SDK sends it (a streamed engine call sets its own)
        return await r.llm.chat(payload["messages"], stream_cb=on_delta, max_retries=self.max_retries, **kwargs)

    async def _once(self, r: Route, payload: dict) -> Any:
        # A request with tools is not streamed for a listener: the server's own non-streamed body
        # (its tool-call parser's arguments, as stock receives them) comes back as it is.
        result = await self._call(r, payload, None if payload.get("tools") else r.on_delta)
        if _is_full_body(result.raw, "chat.completion"):
            # the server's own answer, parsed as the SDK parses it: the same message, metadata, extras
            from openai.types.chat import ChatCompletion

            return ChatCompletion.construct(**result.raw)
        return _parsed("ChatCompletion", {
            **_response_fields(result),
            "object": "chat.completion",
            "model": payload.get("model"),
            "choices": [{
                "index": 0,
                "message": _message(result),
                "finish_reason": result.finish_reason or "stop",
            }],
            "usage": _full_body_usage(result),
        })

    def _chunk(self, rid: str, created: int, payload: dict, text: str, finish: str | None, first: bool = False) -> dict:
        delta: dict[str, Any] = {"content": text}
        if first:
            delta["role"] = "assistant"
        return {"id": rid, "object": self.object_name, "created": created, "model": payload.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}


class CompletionsShim(_ShimBase):
    """Stands in for ``AsyncOpenAI().completions`` on a copy of an ``OpenAI`` (text completion) model."""

    keys = _COMPLETION_KEYS
    object_name = "text_completion"
    opening_chunk = False

    async def _call(self, r: Route, payload: dict, on_delta: Callable[[str], None] | None,
                    on_tool_delta: Callable[[list[dict]], None] | None = None) -> Any:
        # the prompt goes as the payload has it (BaseOpenAI sends a one-item list)
        prompt = payload["prompt"]
        kwargs = engine_kwargs(payload, {"model", "stream", "stream_options", "prompt"})
        if r.priority is not None:
            kwargs["priority"] = r.priority
        return await r.llm.complete(prompt, stream_cb=on_delta, max_retries=self.max_retries, **kwargs)

    async def _once(self, r: Route, payload: dict) -> Any:
        prompts = payload["prompt"]
        if isinstance(prompts, list) and len(prompts) > 1 and all(isinstance(p, str) for p in prompts):
            # several prompts in one request (BaseOpenAI.batch): the engine answers one each
            calls = [{**payload, "prompt": [p]} for p in prompts]
        else:
            calls = [payload]
        results = await asyncio.gather(*(self._call(r, c, r.on_delta) for c in calls))
        if len(results) == 1 and _is_full_body(results[0].raw, "text_completion"):
            from openai.types import Completion

            return Completion.construct(**results[0].raw)
        if len(results) == 1:
            usage = _full_body_usage(results[0])
        else:  # Ayo's answer of several requests: their counts added up
            usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            for res in results:
                for k, v in _usage(res).items():
                    if k in usage:
                        usage[k] += v
        return _parsed("Completion", {
            **_response_fields(results[0] if len(results) == 1 else None),
            "object": "text_completion",
            "model": payload.get("model"),
            "choices": [{"index": i, "text": res.text, "finish_reason": res.finish_reason or "stop",
                         "logprobs": None} for i, res in enumerate(results)],
            "usage": usage,
        })

    def _chunk(self, rid: str, created: int, payload: dict, text: str, finish: str | None, first: bool = False) -> dict:
        return {"id": rid, "object": self.object_name, "created": created, "model": payload.get("model"),
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}

