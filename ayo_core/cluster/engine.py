"""``ClusterLLMEngine``: one LLM engine over many replicas, with routing and failover.

It has the interface of :class:`~ayo_core.engines.llm_client.LLMEngine` (``complete``,
``chat``, ``prefill``, ``stream_*``, ``tokenize``, ``detokenize``, ``health``), so the
engine registry can hand it out in its place and nothing above changes. Each request:

1. is routed to a live replica by the named :mod:`~ayo_core.cluster.routing` router
   (the prompt's prefix blocks go with it, for prefix affinity);
2. waits for one of that replica's ``max_inflight`` slots, the lowest ``priority`` first
   (the engine scheduler's policy sets it: ``program`` gives least-attained-service order);
3. is sent; if the replica dies meanwhile (a transport failure, or Ray reporting its actor
   dead), the replica is marked down, the set of replicas is re-read from the source (Ray
   restarts dead replicas, possibly elsewhere, with a new address) and the request is sent
   again to a live one. Decoding is greedy, so the answer is the same; a stream resumes
   after the text already delivered, so no consumer sees a part twice.

Server errors that are the request's fault (HTTP 4xx) are not failovers: they propagate.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ayo_core.cluster.routing import ReplicaLoad, Router, get_router, prompt_blocks
from ayo_core.engines.llm_client import DEFAULT_MODEL, LLMEngineError, LLMRequestError, LLMResult

log = logging.getLogger(__name__)

# (name, engine) of every replica currently reachable; the engine is LLMEngine-like.
ReplicaList = Sequence[tuple[str, Any]]
ReplicaSource = Callable[[], Awaitable[ReplicaList]]

# Ray's exceptions for an actor that died or is restarting (matched by name: no Ray import here).
_RAY_FAILURES = frozenset({"RayActorError", "ActorDiedError", "ActorUnavailableError", "ActorUnschedulableError",
                           "NodeDiedError", "WorkerCrashedError", "OwnerDiedError", "ObjectLostError"})


def is_replica_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the replica (not the request) failed: re-sending elsewhere is right."""
    if isinstance(exc, LLMRequestError):
        return exc.status_code in (502, 503, 504)
    if isinstance(exc, LLMEngineError):
        return True
    return any(cls.__name__ in _RAY_FAILURES for cls in type(exc).__mro__)


def static_replicas(replicas: ReplicaList) -> ReplicaSource:
    """A source over a fixed list (tests; a cluster whose replicas are known)."""
    fixed = list(replicas)

    async def source() -> ReplicaList:
        return fixed

    return source


@dataclass
class _Replica:
    engine: Any
    load: ReplicaLoad
    waiters: list[tuple[int, int, asyncio.Future]] = field(default_factory=list)


@dataclass
class _Delivered:
    """How much of a streamed answer its consumer has seen (to resume after a failover)."""

    chars: int = 0
    tool_events: int = 0  # stream events with tool-call deltas handed on


def _work(blocks: tuple[int, ...], max_tokens: int | None) -> float:
    return len(blocks) + float(max_tokens or 16)


class ReplicaPool:
    """Replicas from ``source``, a router, per-replica admission by priority, and failover."""

    def __init__(self, source: ReplicaSource, model: str = DEFAULT_MODEL, router: str | Router = "prefix_affinity",
                 max_inflight_per_replica: int = 64, failover_timeout: float = 180.0,
                 name: str = "cluster", refresh_interval: float = 10.0) -> None:
        self.source, self.model, self.name = source, model, name
        self.router = get_router(router)
        self.max_inflight = max_inflight_per_replica
        self.failover_timeout = failover_timeout
        self.accepts_priority = True
        self.replicas: dict[str, _Replica] = {}
        self.resent = 0  # requests sent again after their replica failed
        self._seq = itertools.count()
        self._refreshing = False  # a flag, not an asyncio.Lock: the engine serves several event loops
        # Replicas that join (or answered too slowly at the last listing) are picked up this often.
        self.refresh_interval = refresh_interval
        self._refreshed_at = float("-inf")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, model={self.model!r}, router={self.router.name!r})"

    # -- replicas ---------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """A live replica's base URL (replicas run the same model and flags: capabilities agree)."""
        for rep in self.replicas.values():
            url = getattr(rep.engine, "base_url", None)
            if rep.load.alive and url:
                return str(url)
        return f"ray://{self.name}"

    @property
    def root_url(self) -> str | None:
        url = self.base_url
        return None if url.startswith("ray://") else (url[:-3] if url.endswith("/v1") else url)

    async def refresh(self) -> None:
        """Re-read the replica set from the source: new or restarted replicas join, gone ones leave."""
        listed = await self.source()
        fresh: dict[str, _Replica] = {}
        for name, engine in listed:
            old = self.replicas.get(name)
            if old is not None and old.engine is engine and old.load.alive:
                fresh[name] = old
            elif old is not None and old.engine is engine:
                continue  # still the dead endpoint: Ray has not restarted it yet
            else:
                fresh[name] = _Replica(engine, ReplicaLoad(name))
        for name, old in self.replicas.items():
            if name not in fresh:
                self._wake_all(old)
        self.replicas = fresh

    def loads(self) -> list[ReplicaLoad]:
        """A snapshot of every known replica's load and prefix-cache counts."""
        return [ReplicaLoad(**vars(r.load)) for r in self.replicas.values()]

    def statistics(self) -> dict[str, Any]:
        return {"router": self.router.name, "resent": self.resent,
                "replicas": {r.load.name: {"alive": r.load.alive, "outstanding": r.load.outstanding,
                                           "served": r.load.served, "hit_rate": round(r.load.hit_rate, 4)}
                             for r in self.replicas.values()}}

    def _mark_down(self, rep: _Replica, exc: BaseException) -> None:
        if rep.load.alive:
            log.warning("LLM replica %s failed (%s: %s); re-sending its requests elsewhere",
                        rep.load.name, type(exc).__name__, exc)
        rep.load.alive = False
        self.router.forget(rep.load.name)
        self._wake_all(rep)

    @staticmethod
    def _wake_all(rep: _Replica) -> None:
        for _, _, fut in rep.waiters:
            _settle(fut, False)  # not admitted: route again
        rep.waiters.clear()

    async def _live_replicas(self) -> list[_Replica]:
        deadline = time.monotonic() + self.failover_timeout
        while True:
            live = [r for r in self.replicas.values() if r.load.alive]
            stale = time.monotonic() - self._refreshed_at > self.refresh_interval
            if live and not (stale and not self._refreshing):
                return live
            if not self._refreshing:
                self._refreshed_at = time.monotonic()
                self._refreshing = True
                try:
                    await self.refresh()
                except Exception as exc:  # noqa: BLE001 - the cluster may be restarting: retry until the deadline
                    log.info("listing replicas of %s failed: %s", self.name, exc)
                finally:
                    self._refreshing = False
            if any(r.load.alive for r in self.replicas.values()) or live:
                continue
            if time.monotonic() > deadline:
                raise LLMEngineError(f"no live LLM replica in cluster {self.name!r} for {self.failover_timeout:.0f} s; "
                                     "check `ayo cluster status` (are the replicas restarting? does a node have "
                                     "free resources for them?)", self.base_url)
            await asyncio.sleep(0.5)

    # -- dispatch ---------------------------------------------------------------------------------

    async def _admit(self, rep: _Replica, priority: int) -> bool:
        if rep.load.outstanding < self.max_inflight and not rep.waiters:
            return True
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(rep.waiters, (priority, next(self._seq), fut))
        return bool(await fut)

    def _release(self, rep: _Replica) -> None:
        while rep.waiters and rep.load.outstanding < self.max_inflight:
            _, _, fut = heapq.heappop(rep.waiters)
            if not fut.done():
                _settle(fut, True)
                return

    async def _dispatch(self, blocks: tuple[int, ...], work: float, priority: int,
                        call: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run ``call(engine)`` on a routed replica; on replica failure, again on another one."""
        while True:
            live = await self._live_replicas()
            load = self.router.choose(blocks, [r.load for r in live])
            rep = self.replicas[load.name]
            if not await self._admit(rep, priority) or not rep.load.alive:
                continue
            rep.load.outstanding += 1
            rep.load.outstanding_work += work
            try:
                result = await call(rep.engine)
            except Exception as exc:
                if not is_replica_failure(exc):
                    raise
                self._mark_down(rep, exc)
                self.resent += 1
                continue
            finally:
                rep.load.outstanding -= 1
                rep.load.outstanding_work -= work
                self._release(rep)
            self.router.record(blocks, rep.load)
            rep.load.served += 1
            if isinstance(result, LLMResult) or hasattr(result, "cached_tokens"):
                rep.load.prompt_tokens += int(getattr(result, "prompt_tokens", 0) or 0)
                rep.load.cached_tokens += int(getattr(result, "cached_tokens", 0) or 0)
            return result



class ClusterLLMEngine(ReplicaPool):
    """An ``LLMEngine`` whose requests go to the LLM replicas ``source`` lists (see module doc)."""

    async def _generate(self, method: str, first: Any, blocks: tuple[int, ...], max_tokens: int | None,
                        priority: int, stream_cb: Any, kwargs: dict[str, Any]) -> LLMResult:
        delivered = _Delivered()
        tool_cb = kwargs.pop("tool_call_cb", None)

        async def call(engine: Any) -> LLMResult:
            cb = None if stream_cb is None else _resuming_callback(stream_cb, delivered)
            extra: dict[str, Any] = {} if cb is None else {"stream_cb": cb}
            if tool_cb is not None:
                extra["tool_call_cb"] = _resuming_tool_callback(tool_cb, delivered)
            return await getattr(engine, method)(first, max_tokens=max_tokens, priority=priority, **extra, **kwargs)

        return await self._dispatch(blocks, _work(blocks, max_tokens), priority, call)

    async def complete(self, prompt: Any, max_tokens: int | None = None, priority: int = 0,
                       stream_cb: Any = None, **kwargs: Any) -> LLMResult:
        return await self._generate("complete", prompt, prompt_blocks(prompt), max_tokens, priority, stream_cb, kwargs)

    async def chat(self, messages: list[dict[str, Any]], max_tokens: int | None = None, priority: int = 0,
                   stream_cb: Any = None, **kwargs: Any) -> LLMResult:
        return await self._generate("chat", messages, prompt_blocks(messages=messages), max_tokens, priority,
                                    stream_cb, kwargs)

    async def prefill(self, prompt: Any = None, messages: list[dict[str, Any]] | None = None, priority: int = 0,
                      **extra: Any) -> LLMResult:
        blocks = prompt_blocks(prompt, messages)
        return await self._dispatch(blocks, len(blocks), priority,
                                    lambda e: e.prefill(prompt=prompt, messages=messages, priority=priority, **extra))

    async def stream_complete(self, prompt: Any, max_tokens: int | None = None, priority: int = 0,
                              **kwargs: Any) -> AsyncIterator[str]:
        async for part in self._stream("complete", prompt, prompt_blocks(prompt), max_tokens, priority, kwargs):
            yield part

    async def stream_chat(self, messages: list[dict[str, Any]], max_tokens: int | None = None, priority: int = 0,
                          **kwargs: Any) -> AsyncIterator[str]:
        async for part in self._stream("chat", messages, prompt_blocks(messages=messages), max_tokens, priority,
                                       kwargs):
            yield part

    async def _stream(self, method: str, first: Any, blocks: tuple[int, ...], max_tokens: int | None,
                      priority: int, kwargs: dict[str, Any]) -> AsyncIterator[str]:
        # The callback form resumes exactly after a failover; a queue turns it into a generator.
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()

        async def run() -> None:
            try:
                await self._generate(method, first, blocks, max_tokens, priority, queue.put_nowait, kwargs)
            except BaseException as exc:  # handed to the consumer
                queue.put_nowait(exc)
            else:
                queue.put_nowait(done)

        task = asyncio.get_running_loop().create_task(run())
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            task.cancel()

    async def tokenize(self, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
                       **extra: Any) -> list[int]:
        result: list[int] = await self._dispatch((), 1.0, 0, lambda e: e.tokenize(prompt=prompt, messages=messages,
                                                                               **extra))
        return result

    async def detokenize(self, tokens: list[int]) -> str:
        return str(await self._dispatch((), 1.0, 0, lambda e: e.detokenize(tokens)))

    async def health(self) -> bool:
        """True when some replica answers its health check."""
        try:
            live = await asyncio.wait_for(self._live_replicas(), timeout=5.0)
        except (TimeoutError, LLMEngineError):
            return False
        for rep in live:
            try:
                if await rep.engine.health():
                    return True
            except Exception:  # noqa: BLE001 - an unreachable replica is simply not healthy
                continue
        return False

    async def aclose(self) -> None:
        for rep in self.replicas.values():
            close = getattr(rep.engine, "aclose", None)
            if close is not None:
                await close()


def _settle(fut: asyncio.Future, value: bool) -> None:
    """Resolve ``fut`` from whichever loop (the engine is shared by the bridge loop and callers' loops)."""
    loop = fut.get_loop()
    try:
        same = asyncio.get_running_loop() is loop
    except RuntimeError:
        same = False
    if same:
        if not fut.done():
            fut.set_result(value)
    else:
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(value))


def _resuming_callback(stream_cb: Any, delivered: _Delivered) -> Callable[[str], Any]:
    """Wrap ``stream_cb`` for one attempt: pass on only text beyond what earlier attempts delivered
    (greedy decoding repeats the same text, so the consumer sees every part exactly once). Sync,
    returning what ``stream_cb`` returns: engines await it when it is awaitable."""
    seen = 0

    def cb(delta: str) -> Any:
        nonlocal seen
        start, seen = seen, seen + len(delta)
        if seen <= delivered.chars:
            return None
        part = delta[max(0, delivered.chars - start):]
        delivered.chars += len(part)
        return stream_cb(part)

    return cb


def _resuming_tool_callback(tool_call_cb: Any, delivered: _Delivered) -> Callable[[list[dict[str, Any]]], Any]:
    """Like :func:`_resuming_callback` for a stream's tool-call deltas: an attempt after a failover
    passes on only the events beyond those earlier attempts delivered (greedy decoding repeats them)."""
    seen = 0

    def cb(deltas: list[dict[str, Any]]) -> Any:
        nonlocal seen
        seen += 1
        if seen <= delivered.tool_events:
            return None
        delivered.tool_events += 1
        return tool_call_cb(deltas)

    return cb
