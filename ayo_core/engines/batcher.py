"""One forward pass for the requests of concurrent callers: a combining batcher for blocking model calls.

Callers are threads that each hold a list of items (a query's (query, passage) pairs) and want the
model's outputs for them. A caller that finds the model idle runs its own items at once (a lone
query waits for nothing: no window, no sleep); callers that arrive while a pass runs queue up, and
when the pass ends one of them runs every queued request in one call, then hands each caller the
slice of the outputs that belongs to it.

Used where the model is the user's own object and its own code makes the call (the LlamaIndex
adapter's ``SentenceTransformerRerank``: ``ayo_llamaindex.cross_encoder``), so it batches blocking
calls from worker threads rather than requests on Ayo's event loop. It imports no framework.

Merging changes numbers in the last float bit: a batched forward pass pads to the batch's longest
sequence and runs kernels of another shape (measured on CPU, all-MiniLM-L6-v2 with a fresh scoring
head: up to 6e-8 on sigmoid scores, 9 of 160 queries not bit-identical, no ranking flipped). Callers
that promise bit-identical answers offer it as an opt-in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class BatcherStatistics:
    """A snapshot: requests served, forward passes run (retries alone included), items, largest pass."""

    requests: int
    passes: int
    items: int
    largest: int
    waiting: int


@dataclass
class _Request(Generic[T]):
    items: Sequence[T]
    done: bool = False
    result: Any = None
    error: BaseException | None = None


class CombiningBatcher(Generic[T, R]):
    """Runs ``run(items) -> outputs`` (one output per item, in order) for concurrent callers, merged.

    ``submit(items, run)`` blocks until the caller's outputs are ready. Every caller of one batcher
    passes an equivalent ``run`` (the same model's call): the caller that leads a pass uses its own.
    ``max_items`` caps a merged pass (a request larger than it still runs, alone). When a merged pass
    raises, each of its requests runs again alone, so each caller gets what its own call would have
    given (its outputs or its own error), never a neighbour's failure.
    """

    def __init__(self, name: str = "batcher", max_items: int | None = None) -> None:
        self.name, self.max_items = name, max_items
        self._cond = threading.Condition()
        self._queue: list[_Request[T]] = []
        self._busy = False
        self._requests = self._passes = self._items = self._largest = 0

    def submit(self, items: Sequence[T], run: Callable[[list[T]], Sequence[R]]) -> Sequence[R]:
        """The outputs of ``run`` for ``items``, computed in one pass with whatever else is waiting."""
        request: _Request[T] = _Request(items)
        with self._cond:
            self._queue.append(request)
        while True:
            with self._cond:
                while self._busy and not request.done:
                    self._cond.wait()
                if request.done:
                    break
                self._busy = True  # the model is idle: lead a pass with what is queued (a cap may leave ours)
                batch = self._take_locked()
            try:
                self._run_batch(batch, run)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        if request.error is not None:
            raise request.error
        return request.result

    def _take_locked(self) -> list[_Request[T]]:
        batch, total = [], 0
        while self._queue:
            n = len(self._queue[0].items)
            if batch and self.max_items is not None and total + n > self.max_items:
                break
            batch.append(self._queue.pop(0))
            total += n
        return batch

    def _run_batch(self, batch: list[_Request[T]], run: Callable[[list[T]], Sequence[R]]) -> None:
        items = [item for request in batch for item in request.items]
        try:
            outputs = self._call(run, items)
            if len(outputs) != len(items):
                raise ValueError(f"{self.name}: the model returned {len(outputs)} outputs for {len(items)} items")
        except BaseException as exc:  # noqa: BLE001 - handed to the callers below
            if len(batch) == 1:
                self._finish(batch[0], error=exc)
                return
            log.debug("%s: a merged pass of %d requests failed (%r): each runs alone", self.name, len(batch), exc)
            for request in batch:
                self._run_batch([request], run)
            return
        start = 0
        for request in batch:
            self._finish(request, outputs[start:start + len(request.items)])
            start += len(request.items)

    def _call(self, run: Callable[[list[T]], Sequence[R]], items: list[T]) -> Sequence[R]:
        with self._cond:
            self._passes += 1
            self._items += len(items)
            self._largest = max(self._largest, len(items))
        return run(items)

    def _finish(self, request: _Request[T], outputs: Any = None, error: BaseException | None = None) -> None:
        with self._cond:
            request.result, request.error, request.done = outputs, error, True
            self._requests += 1
            self._cond.notify_all()

    def statistics(self) -> BatcherStatistics:
        with self._cond:
            return BatcherStatistics(self._requests, self._passes, self._items, self._largest, len(self._queue))
