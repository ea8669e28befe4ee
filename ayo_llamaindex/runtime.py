"""Where optimized LlamaIndex pipelines run: shared engines, one Ayo Runtime, one event loop.

All optimized query engines and functions of a process share one background event
loop thread and, per set of engines, one ``ayo_core.runtime.Runtime``: concurrent
queries from any thread meet in the same engine schedulers (that is where
cross-query batching and critical-path priorities happen). Synchronous callers
block on a future; async callers await it without blocking their own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ayo_llamaindex.embedding import EmbedBinding
from ayo_llamaindex.llm import LLMBinding, LLMRequest

log = logging.getLogger(__name__)

# Threads of the embedding engine's worker. When indexing overlaps decoding (doc-QA with
# query expansion) one thread leaves the second core to vLLM; otherwise torch's default
# (all cores, as stock HuggingFaceEmbedding uses, which also gives stock's exact vectors).
# AYO_EMBED_THREADS overrides both.
OVERLAP_EMBED_THREADS = 1


def embed_threads(overlap: bool) -> int | None:
    forced = os.environ.get("AYO_EMBED_THREADS")
    if forced:
        return int(forced)
    return OVERLAP_EMBED_THREADS if overlap else None


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The default handler, except for other loops' HTTP clients finalized on ours.

    The openai SDK's async client closes itself from ``__del__`` with a task on *the running
    loop*: when the garbage collector happens to collect a client of a caller's finished
    ``asyncio.run`` while this thread runs, that task lands here and fails with "Event loop is
    closed" (its sockets belong to the dead loop), logged as "Task exception was never
    retrieved". Nothing of ours failed, and there is nothing left to close: debug log only.
    """
    exc, task = context.get("exception"), context.get("future")
    coro = getattr(task, "get_coro", lambda: None)()
    if (isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc)
            and getattr(coro, "__qualname__", "").endswith("aclose")):
        log.debug("ignored a foreign client's close on Ayo's loop: %s", context.get("message"))
        return
    loop.default_exception_handler(context)


class _LoopThread:
    """One daemon thread running the adapter's event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self._thread or not self._thread.is_alive():
                ready = threading.Event()
                loop = asyncio.new_event_loop()
                loop.set_exception_handler(_exception_handler)

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    ready.set()
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="ayo-llamaindex-loop", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        loop = self.loop()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("an Ayo-optimized LlamaIndex call was made from inside Ayo's own event loop "
                               "(a node calling back into an optimized engine); call the stock object there")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the adapter loop and block this thread until it finishes."""
        fut = self.submit(coro)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    async def arun(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coro`` running on the adapter loop from any other event loop."""
        fut = self.submit(coro)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise


LOOP = _LoopThread()

# The caller's event loop while Ayo runs an ``aquery`` (None for a sync ``query``). Set inside
# the query's own task on Ayo's loop, so every node task of that query (a copy of its context)
# sees it and nothing leaks to other queries.
CALLER_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "ayo_llamaindex_caller_loop", default=None)


def in_async_call() -> bool:
    """Whether the running query came in through ``aquery`` (stock then takes the async paths)."""
    return CALLER_LOOP.get() is not None


async def call_stock(sync_fn: Callable[..., Any], async_fn: Callable[..., Awaitable[Any]], *args: Any,
                     **kwargs: Any) -> Any:
    """Call a user's (opaque) object the way the stock engine would at this point.

    Inside ``aquery`` stock awaits the object's async method on the caller's event loop; that
    is where it must run (a streaming synthesizer returns an ``AsyncStreamingResponse`` the
    caller iterates; async clients are bound to the loop they were made on), so it is sent
    there, the caller's loop being idle while it awaits us. Inside ``query`` stock calls the
    sync method: here in a worker thread, so other nodes keep running.
    """
    loop = CALLER_LOOP.get()
    if loop is None or loop.is_closed():
        return await asyncio.to_thread(sync_fn, *args, **kwargs)
    future = asyncio.run_coroutine_threadsafe(async_fn(*args, **kwargs), loop)
    return await asyncio.wrap_future(future)  # cancelling this cancels the task on the caller's loop


@dataclass
class EngineAssignment:
    """Which engine kind (scheduler) serves each recognized binding of a pipeline."""

    llm_kinds: dict[tuple[str, str, str], str] = field(default_factory=dict)
    embed_kinds: dict[tuple, str] = field(default_factory=dict)
    engines: dict[str, Any] = field(default_factory=dict)

    def llm_kind(self, binding: LLMBinding | None) -> str | None:
        if binding is None or not binding.recognized:
            return None
        return self.llm_kinds.get(binding.endpoint)

    def embed_kind(self, binding: EmbedBinding | None) -> str | None:
        if binding is None or not binding.recognized:
            return None
        return self.embed_kinds.get(_embed_key(binding))

    @property
    def key(self) -> tuple:
        return tuple(sorted((k, id(e)) for k, e in self.engines.items()))


def _embed_key(binding: EmbedBinding) -> tuple:
    return tuple(sorted(binding.engine_options().items()))


# api_key values that mean "no key" (the stock client still sends them; a keyless server ignores them)
PLACEHOLDER_KEYS = {"", "none", "null", "fake", "unused", "empty", "dummy", "not-needed", "no-key", "x", "-",
                    "sk-no-key-required", "token-abc123"}
_keyed: dict[tuple[str, str, str], Any] = {}


def llm_engine_for(base_url: str, model: str, api_key: str, timeout: float) -> Any:
    """The shared engine for an endpoint; one that sends the user's key when it is a real one."""
    from ayo_core.engines import get_llm_engine

    if api_key.strip().lower() in PLACEHOLDER_KEYS:
        return get_llm_engine(base_url, model=model, timeout=timeout)
    key = (base_url, model, api_key)
    with _runtimes_lock:
        if key not in _keyed:
            _keyed[key] = _keyed_engine_class()(base_url, model=model, timeout=timeout, api_key=api_key)
        return _keyed[key]


def _keyed_engine_class() -> type:
    from ayo_core.engines import LLMEngine

    class KeyedLLMEngine(LLMEngine):
        """``LLMEngine`` that authenticates like the openai SDK (``Authorization: Bearer <key>``)."""

        def __init__(self, *args: Any, api_key: str, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._auth = {"Authorization": f"Bearer {api_key}"}

        def _client(self) -> Any:
            client = super()._client()  # one httpx client per event loop, created by the base class
            client.headers.update(self._auth)
            return client

    return KeyedLLMEngine


def assign_engines(llms: list[LLMBinding], embeds: list[EmbedBinding], overlap: bool = False) -> EngineAssignment:
    """Shared engines (``ayo_core.engines`` registry) for every recognized binding; ``overlap``:
    embedding runs alongside decoding (see :func:`embed_threads`)."""
    from ayo_core.engines import get_embedding_engine

    out = EngineAssignment()
    for b in llms:
        if b.recognized and b.endpoint not in out.llm_kinds:
            kind = "llm" if not out.llm_kinds else f"llm{len(out.llm_kinds)}"
            base_url, model, api_key = b.endpoint
            out.llm_kinds[b.endpoint] = kind
            out.engines[kind] = llm_engine_for(base_url, model, api_key, float(b.llm.timeout or 300.0))
    for e in embeds:
        key = _embed_key(e) if e.recognized else None
        if key is not None and key not in out.embed_kinds:
            kind = "embed" if not out.embed_kinds else f"embed{len(out.embed_kinds)}"
            out.embed_kinds[key] = kind
            out.engines[kind] = get_embedding_engine(torch_threads=embed_threads(overlap), **e.engine_options())
    return out


_runtimes: dict[tuple, Any] = {}
_runtimes_lock = threading.Lock()
PRIORITY_SPAN = 60_000  # the slack (ms) range mapped below the server's default priority 0


class NeverBelowDefault:
    """A named policy whose engine priorities never rank our requests behind foreign traffic.

    vLLM serves lower ``priority`` first and every client that sets none sends 0. The core
    policies map slack (or depth) to priorities >= 0, so on a server shared with other
    clients a request with any slack waits for all their requests: we measured a query
    expansion starved for 40 s behind another app's load. Shifting by ``PRIORITY_SPAN``
    keeps the policy's order among Ayo's requests (critical path first) while nothing of
    ours is worse than the default; background work with more slack than the span sits
    at the default.
    """

    def __init__(self, name: str) -> None:
        from ayo_core.runtime import get_policy

        self.base = get_policy(name)
        self.name = self.base.name

    def key(self, req: Any) -> tuple:
        return self.base.key(req)

    def priority(self, req: Any) -> int:
        return min(0, int(self.base.priority(req)) - PRIORITY_SPAN)


def runtime_for(assignment: EngineAssignment, policy: str = "critical_path") -> Any:
    """The shared ``Runtime`` over exactly these engines (one per engine set and policy)."""
    from ayo_core.runtime import Engines, Runtime, SchedulerConfig

    key = (assignment.key, policy)
    with _runtimes_lock:
        rt = _runtimes.get(key)
        if rt is None:
            configs = {k: SchedulerConfig(max_inflight=64) for k in assignment.engines if k.startswith("llm")}
            rt = Runtime(Engines(**assignment.engines), policy=NeverBelowDefault(policy), configs=configs)
            _runtimes[key] = rt
        return rt


# -- what node fns use to reach engines ---------------------------------------------------

LLMSend = Callable[..., Awaitable[Any]]


def llm_send(ctx: Any, kind: str | None) -> LLMSend | None:
    """``send(request, stream_cb=None) -> LLMResult`` (text, token usage) through the ``kind``
    engine's scheduler; a 429 / 5xx answer is retried ``max_retries`` times, as the openai SDK does."""
    if kind is None:
        return None
    proxy = ctx.engine(kind)

    async def send(request: LLMRequest, priority: int | None = None, stream_cb: Any = None,
                   max_retries: int = 0) -> Any:
        body = dict(request.body)
        kw: dict[str, Any] = {"max_tokens": body.pop("max_tokens", None),
                              "temperature": body.pop("temperature", None), "stop": body.pop("stop", None),
                              "max_retries": max_retries}
        if stream_cb is not None:
            kw["stream_cb"] = stream_cb
        if priority is not None:
            kw["priority"] = priority
        if request.kind == "chat":
            result = await proxy.chat(body.pop("messages"), **kw, **body)
        else:
            result = await proxy.complete(body.pop("prompt"), **kw, **body)
        return result

    return send


def embed_send(ctx: Any, kind: str | None) -> Callable[..., Awaitable[list[list[float]]]] | None:
    """``send(texts, kind="text"|"query") -> vectors`` through the ``kind`` embedding scheduler."""
    if kind is None:
        return None
    proxy = ctx.engine(kind)

    async def send(texts: list[str], kind: str = "text", batch_size: int | None = None) -> list[list[float]]:
        # with batch_size the engine encodes in stock's batch shape (sorted by length, batch_size
        # at a time): one padded batch of every chunk would waste compute on padding
        return await proxy.aembed(list(texts), kind=kind, batch_size=batch_size)

    return send


def direct_embed_send(binding: EmbedBinding) -> Callable[..., Awaitable[list[list[float]]]] | None:
    """An embed ``send`` straight to the shared engine (no scheduler): for work outside any graph."""
    if not binding.recognized:
        return None
    from ayo_core.engines import get_embedding_engine

    engine = get_embedding_engine(torch_threads=embed_threads(False), **binding.engine_options())

    async def send(texts: list[str], kind: str = "text", batch_size: int | None = None) -> list[list[float]]:
        return await engine.aembed(list(texts), kind=kind, batch_size=batch_size)

    return send
