"""Speculative execution of a consumer on a partial input, kept only when the final input matches.

Decode pipelining across an edge whose consumer needs the producer's *whole* output
(a rerank's selection feeding synthesis). The producer streams its text (one stream
per part, e.g. per rerank batch); after every finished line the adapter's ``guess``
turns the finished lines so far into the consumer's input as it would be if the
producer stopped here (LlamaIndex: the reranker's own parser and sort). Once that guess
stays the same (by ``key``: what the consumer reads) for ``stable`` lines, the consumer
starts on it, concurrently with the rest of the producer's decode. When the producer is
done, the consumer's node calls :meth:`SpeculationBoard.take` with the final input:
equal key -> the speculative value is the stock value (same input, greedy decoding) and
is used (after ``keep``, e.g. replaying its recorded events); different -> it is
cancelled and the consumer runs normally. A wrong guess only costs compute.

The adapter supplies the hooks (``guess``, ``key``, ``run``, ``keep``); the core owns the
stability rule, the task, its trace span, the hit/miss counts and the record in
``graph.meta["optimizations"]`` (:func:`attach_speculation`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from ayo_core.graph import Graph, Op
from ayo_core.runtime.owned import start_owned
from ayo_core.trace import NodeSpan

log = logging.getLogger(__name__)

MAX_STARTS = 2  # speculative runs per query (a changed guess restarts once)
STABLE_LINES = 2  # finished lines over which the guess must not change


class Speculation:
    """One query's speculation: fed the producer's text deltas per part, owns at most one consumer task.

    ``guess(finished_texts) -> input | None`` (None: not enough yet), ``key(input)``: what the
    consumer reads, ``start(ctx, input)``: the consumer's run (awaitable).
    """

    def __init__(self, parts: list[Any], guess: Callable[[list[str]], Any], key: Callable[[Any], Hashable],
                 start: Callable[[Any, Any], Awaitable[Any]], max_starts: int = MAX_STARTS,
                 stable: int = STABLE_LINES) -> None:
        self.parts, self.guess, self.key_of, self._start = parts, guess, key, start
        self.max_starts, self.stable = max_starts, stable
        self.ctx: Any = None  # the context of a producer node: the consumer sends through its engines
        self.texts = [""] * len(parts)
        self.deltas = [0] * len(parts)  # non-empty deltas per part so far
        self.line_deltas = [0] * len(parts)  # ... through each part's last finished line (what a guess reads)
        self.launched_at: list[int] = []  # line_deltas when the running task was launched
        self.task: asyncio.Future | None = None
        self.key: Hashable | None = None
        self.starts = 0
        self.hit: bool | None = None
        self._last: Hashable | None = None
        self._stable = 0

    def index_of(self, part: Any) -> int:
        return next(i for i, p in enumerate(self.parts) if p is part)

    def stream_cb(self, ctx: Any, part: Any) -> Callable[[str], None]:
        """The ``stream_cb`` of the producer's decode for ``part`` (run with context ``ctx``)."""
        self.ctx, index = ctx, self.index_of(part)
        return lambda delta: self.on_delta(index, delta)

    def on_delta(self, index: int, delta: str) -> None:
        self.texts[index] += delta
        self.deltas[index] += bool(delta)
        if "\n" not in delta:
            return
        self.line_deltas[index] = self.deltas[index]
        if self.starts >= self.max_starts or self.ctx is None:
            return
        guess = self.guess([text[: text.rfind("\n") + 1] for text in self.texts])
        if guess is None:
            self._last, self._stable = None, 0
            return
        key = self.key_of(guess)
        self._stable = self._stable + 1 if key == self._last else 1
        self._last = key
        if self._stable >= self.stable and key != self.key:
            self._launch(guess, key)

    def _launch(self, guess: Any, key: Hashable) -> None:
        self.cancel()
        self.key, self.starts = key, self.starts + 1
        self.launched_at = list(self.line_deltas)  # what the run read (its trace span notes it)
        self.task = start_owned(self._start(self.ctx, guess), f"speculation #{self.starts}")
        log.debug("speculative run #%d started", self.starts)

    async def take(self, final: Any) -> tuple[bool, Any]:
        """``(True, value)`` when the speculation ran on exactly ``final``'s key, else ``(False, None)``."""
        task, key = self.task, self.key
        if task is None or key != self.key_of(final):
            self.hit = False if task is not None else None
            self.cancel()
            return False, None
        try:
            value = await task
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the normal path runs (and reports) it again
            log.debug("speculative run failed; the consumer runs normally", exc_info=True)
            self.hit = False
            return False, None
        finally:
            self.task = None
        self.hit = True
        return True, value

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.task = None


@dataclass(frozen=True)
class SpeculationHooks:
    """The adapter's side of a speculation.

    ``guess(state, finished_texts) -> input | None`` (``state``: what the producer's first node
    handed :meth:`SpeculationBoard.open`, e.g. the reranker and the query); ``key(input)``;
    ``run(ctx, state, input)``: the consumer (its side effects, such as callback events, recorded, not emitted);
    ``keep(value) -> value``: awaited on a used value (e.g. replay its recorded events).
    """

    guess: Callable[[Any, list[str]], Any]
    key: Callable[[Any], Hashable]
    run: Callable[[Any, Any, Any], Awaitable[Any]]
    keep: Callable[[Any], Awaitable[Any]] | None = None


class SpeculationBoard:
    """Per-graph: each query's :class:`Speculation`, shared by the producer's nodes and the consumer node.

    ``consumer``/``module`` name the speculative run's trace span (``{consumer}.speculative``).
    """

    def __init__(self, hooks: SpeculationHooks, consumer: str, module: str) -> None:
        self.hooks, self.consumer, self.module = hooks, consumer, module
        self.by_query: dict[str, Speculation] = {}
        self.hits = self.misses = 0

    def open(self, query_id: str, parts: list[Any], state: Any) -> Speculation:
        """A fresh speculation for ``query_id`` over the producer's ``parts`` (an older one is cancelled)."""
        self.pop(query_id)
        spec = self.by_query[query_id] = Speculation(
            parts, lambda texts: self.hooks.guess(state, texts), self.hooks.key,
            lambda ctx, guess: self._run(ctx, state, guess, spec.launched_at))
        return spec

    def get(self, query_id: str) -> Speculation | None:
        return self.by_query.get(query_id)

    def pop(self, query_id: str, cancel: bool = True) -> Speculation | None:
        spec = self.by_query.pop(query_id, None)
        if spec is not None and cancel:
            spec.cancel()
        return spec

    async def take(self, spec: Speculation | None, final: Any) -> tuple[bool, Any]:
        """The speculative value if ``spec`` ran on ``final`` (counted as a hit), else ``(False, None)``."""
        if spec is None:
            return False, None
        used, value = await spec.take(final)
        if not used:
            self.misses += spec.starts > 0
            return False, None
        self.hits += 1
        return True, (await self.hooks.keep(value) if self.hooks.keep is not None else value)

    async def _run(self, ctx: Any, state: Any, guess: Any, read_deltas: list[int]) -> Any:
        """The speculative run, recorded in the query's trace as its own span."""
        loop = asyncio.get_running_loop()
        span = NodeSpan(ctx.query_id, f"{self.consumer}.speculative", self.module, Op.DECODE.value,
                        ctx.node.engine, loop.time(), read_deltas=read_deltas)
        if ctx.trace is not None:
            ctx.trace.nodes.append(span)
        try:
            return await self.hooks.run(ctx, state, guess)
        except BaseException:
            span.status = "cancelled"
            raise
        finally:
            span.end = loop.time()


def attach_speculation(g: Graph, board: SpeculationBoard, producer: str) -> None:
    """Put ``board`` on ``g`` (``meta["speculation"]``) and list it in ``meta["optimizations"]``."""
    g.meta["speculation"] = board
    g.meta["optimizations"] = [*g.meta.get("optimizations", []), {
        "name": "speculation", "node": board.consumer,
        "detail": f"starts on {producer}'s partial output; kept only when its final output reads the same"}]
