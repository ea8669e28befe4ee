"""What a node sees while it runs: :class:`NodeContext`, engine proxies, :class:`Expand`, :class:`Engines`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ayo_core.graph import Node
from ayo_core.runtime.engine_scheduler import STREAM_END, Dispatcher, EngineRequest, _resolve
from ayo_core.runtime.errors import MissingEngine
from ayo_core.trace import NodeSpan, Trace


class Engines:
    """The engines a runtime schedules, by kind: ``Engines(llm=..., embed=..., vector=..., rerank=...)``."""

    def __init__(self, llm: Any = None, embed: Any = None, vector: Any = None, **others: Any):
        self._by_kind = {k: v for k, v in {"llm": llm, "embed": embed, "vector": vector, **others}.items()
                         if v is not None}

    @property
    def llm(self) -> Any:
        return self._by_kind.get("llm")

    @property
    def embed(self) -> Any:
        return self._by_kind.get("embed")

    @property
    def vector(self) -> Any:
        return self._by_kind.get("vector")

    def get(self, kind: str) -> Any:
        return self._by_kind.get(kind)

    def __getitem__(self, kind: str) -> Any:
        return self._by_kind[kind]

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def items(self):
        return self._by_kind.items()

    def __repr__(self) -> str:
        return "Engines(" + ", ".join(f"{k}={type(v).__name__}" for k, v in self._by_kind.items()) + ")"


@dataclass(frozen=True)
class Expand:
    """Returned by a node to grow the graph at run time.

    ``nodes`` are added to the running query's graph (their inputs may name any
    existing node or each other); the returning node's value becomes the value
    of ``output`` once it is computed, and its consumers wait for that.
    """

    nodes: Sequence[Node]
    output: str


class EngineProxy:
    """Stands in for an engine: every method call becomes a request to that engine's scheduler.

    Methods are forwarded generically by name, so new engine methods need no
    change here. Every forwarded method is awaitable (a sync engine method runs
    in a thread); async-generator methods (``stream_complete``) are async
    iterables. ``priority`` is filled in from the scheduling policy when the
    engine method takes one and the caller did not pass it.
    """

    def __init__(self, kind: str, dispatcher: Dispatcher, ctx: NodeContext):
        self._kind, self._dispatcher, self._ctx = kind, dispatcher, ctx

    @property
    def engine(self) -> Any:
        """The real engine object (calling it directly bypasses scheduling and tracing)."""
        return self._dispatcher.engine

    @property
    def running_requests(self) -> int:
        """Requests its scheduler has at the engine now (0 without a scheduler: the reference interpreter)."""
        statistics = getattr(self._dispatcher, "statistics", None)
        return statistics().running_requests if statistics is not None else 0

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        try:
            _, how = _resolve(type(self._dispatcher.engine), method)
        except AttributeError:
            raise AttributeError(f"{self._kind} engine {type(self._dispatcher.engine).__name__} has no method "
                                 f"{method!r} (node {self._ctx.node.name!r})") from None
        if how == "stream":
            return lambda *args, **kwargs: self._stream(method, args, kwargs)
        return lambda *args, **kwargs: self._call(method, args, kwargs)

    def _request(self, method: str, args: tuple, kwargs: dict[str, Any]) -> EngineRequest:
        ctx = self._ctx
        return EngineRequest(self._kind, method, args, kwargs, query_id=ctx.query_id, node=ctx.node.name,
                             module=ctx.node.module, depth=ctx.depth, slack=ctx.slack, query_start=ctx.query_start,
                             split_group=ctx.node.meta.get("split_of"), trace=ctx.trace, span=ctx.span)

    async def _call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        return await self._dispatcher.submit(self._request(method, args, kwargs))

    async def _stream(self, method: str, args: tuple, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        req = self._request(method, args, kwargs)
        req.stream_queue = queue = asyncio.Queue()
        task = asyncio.ensure_future(self._dispatcher.submit(req))
        try:
            while True:
                item = await queue.get()
                if item is STREAM_END:
                    break
                yield item
            await task
        finally:
            if not task.done():
                task.cancel()


class NodeContext:
    """The first argument of every node fn.

    ``ctx.llm`` / ``ctx.embed`` / ``ctx.vector`` (or ``ctx.engine(kind)``) reach
    engines through their schedulers; ``ctx.emit(part)`` publishes one finished
    part of a streamable node's output; ``ctx.stream_cb`` (``None`` unless some
    consumer takes parts early) is a ``stream_cb`` for ``llm.complete``/``chat``
    that parses the text so far with ``node.meta["parts"]`` and emits finished
    parts (all but the last, which may still grow); on a node marked ``early_stop``
    (``ayo_core.passes.early_stop``) it ends the decode once ``meta["keep_parts"]``
    parts are final.
    """

    def __init__(self, *, query_id: str, node: Node, dispatchers: Mapping[str, Dispatcher], trace: Trace | None,
                 span: NodeSpan | None = None, depth: int = 0, slack: float = 0.0, query_start: float = 0.0,
                 emit: Callable[[Any], None] | None = None, streaming: bool = False):
        self.query_id, self.node, self.trace, self.span = query_id, node, trace, span
        self.depth, self.slack, self.query_start = depth, slack, query_start
        self._dispatchers = dispatchers
        self._emit = emit
        self._proxies: dict[str, EngineProxy] = {}
        self._text = ""
        self._deltas = 0  # non-empty text deltas so far: each is at least one decoded token
        self.emitted: list[Any] = []
        self.stream_cb: Callable[[str], None] | None = self._on_delta if streaming else None
        if emit is not None and span is not None:
            span.part_deltas = []

    def engine(self, kind: str) -> EngineProxy:
        proxy = self._proxies.get(kind)
        if proxy is None:
            dispatcher = self._dispatchers.get(kind)
            if dispatcher is None:
                raise MissingEngine(f"node {self.node.name!r} (module {self.node.module!r}) needs a {kind!r} engine, "
                                    f"but the runtime has only {sorted(self._dispatchers)}: pass Engines({kind}=...)")
            proxy = self._proxies[kind] = EngineProxy(kind, dispatcher, self)
        return proxy

    @property
    def llm(self) -> EngineProxy:
        return self.engine("llm")

    @property
    def embed(self) -> EngineProxy:
        return self.engine("embed")

    @property
    def vector(self) -> EngineProxy:
        return self.engine("vector")

    def emit(self, part: Any) -> None:
        """Publish the next finished part of this node's output (in order)."""
        self._publish(part, None)

    def _publish(self, part: Any, deltas: int | None) -> None:
        """Publish ``part``, noting where in the decode it was (``deltas``; None: by the node's own code)."""
        self.emitted.append(part)
        if self.span is not None and self.span.part_deltas is not None:  # the lower bound's
            self.span.part_deltas.append(deltas)
        if self._emit is not None:
            self._emit(part)

    def _on_delta(self, delta: str) -> None:
        self._text += delta
        self._deltas += bool(delta)
        parser = self.node.meta.get("parts")
        if parser is None:
            return
        parts = parser(self._text)
        for part in parts[len(self.emitted):-1]:  # the last part may still grow
            self._publish(part, self._deltas)
        keep = self.node.meta.get("keep_parts")
        if self.node.meta.get("early_stop") and keep is not None and len(parts) - 1 >= keep:
            from ayo_core.engines.llm_client import StopStream  # the engines' signal (httpx only when used)

            raise StopStream  # the consumer keeps only these parts: the rest is never decoded
