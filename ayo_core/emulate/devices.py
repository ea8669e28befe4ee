"""The emulated deployment's other timing models: a hosted API and an embedding device.

:class:`HostedEngine` has :class:`~ayo_core.emulate.step_engine.StepEngine`'s ``generate`` signature:
a provider's API answers every request alone (its own fleet absorbs the load), time to first token
then a constant time per token, and admits at most ``requests_per_minute`` requests per rolling
minute (a request over the limit waits, as a client's retry on 429 would).

:class:`EmbeddingDevice` is an encoder on a GPU of its own: requests that arrive while a batch runs
wait and go together into the next forward pass (up to ``max_batch`` texts), which costs
:meth:`~ayo_core.emulate.profile.EmbedCost.batch_s`.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from typing import Any

from ayo_core.emulate.profile import EmbedCost, HostedCost
from ayo_core.emulate.step_engine import GenerationResult
from ayo_core.engines.llm_client import StopStream


class HostedEngine:
    """A hosted LLM API's timing (see the module doc)."""

    def __init__(self, cost: HostedCost) -> None:
        self.cost = cost
        self._starts: collections.deque[float] = collections.deque()
        self._lock = asyncio.Lock()
        self.active = 0
        self.waiting = 0

    def reset_prefix_cache(self) -> None:
        """A hosted API's cache is not modelled (its latency does not depend on it)."""

    async def _admit(self) -> None:
        loop = asyncio.get_running_loop()
        async with self._lock:
            while len(self._starts) >= self.cost.requests_per_minute:
                wait = self._starts[0] + 60.0 - loop.time()
                if wait <= 0:
                    self._starts.popleft()
                    continue
                await asyncio.sleep(wait)
            self._starts.append(loop.time())

    async def generate(self, prompt_ids: Sequence[int], n_out: int, max_tokens: int, priority: int = 0,
                       on_token: Callable[[int], Any] | None = None) -> GenerationResult:
        self.waiting += 1
        try:
            await self._admit()
        finally:
            self.waiting -= 1
        loop = asyncio.get_running_loop()
        n = min(n_out, max(0, max_tokens))
        start, self.active = loop.time(), self.active + 1
        try:
            for k in range(n):
                due = start + self.cost.ttft_s + self.cost.tpot_s * k
                await asyncio.sleep(max(0.0, due - loop.time()))
                if on_token is not None:
                    try:
                        on_token(k)
                    except StopStream:
                        return GenerationResult(k + 1, 0, "stopped")
            if n == 0:
                await asyncio.sleep(self.cost.ttft_s)
        finally:
            self.active -= 1
        return GenerationResult(n, 0, "length" if n >= max_tokens else "stop")


class EmbeddingDevice:
    """An embedding model on its own device, batching what waits (see the module doc)."""

    def __init__(self, cost: EmbedCost) -> None:
        self.cost = cost
        self._waiting: collections.deque[tuple[int, int, asyncio.Future]] = collections.deque()
        self._worker: asyncio.Task | None = None
        self.batches = 0
        self.busy_s = 0.0

    async def run(self, texts: int, tokens: int) -> None:
        """Wait until a forward pass has encoded this request's ``texts``."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append((texts, tokens, fut))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        await fut

    async def _work(self) -> None:
        while self._waiting:
            batch, texts, tokens = [], 0, 0
            while self._waiting and (not batch or texts + self._waiting[0][0] <= self.cost.max_batch):
                n, t, fut = self._waiting.popleft()
                batch.append(fut)
                texts, tokens = texts + n, tokens + t
            seconds = self.cost.batch_s(texts, tokens)
            await asyncio.sleep(seconds)
            self.batches += 1
            self.busy_s += seconds
            for fut in batch:
                if not fut.done():
                    fut.set_result(None)
