"""A fake LLM replica that batches like a serving engine — for the cluster simulation, not a model.

:class:`~ayo_core.runtime.fakes.FakeLLM` times each sequence on its own: a slot, then a prefill and
a per-token cost fixed when it starts. That is enough for a graph's critical path; it is not how a
replica behaves when it is busy, which is what routing and scheduling across replicas act on. A
serving engine (vLLM) runs *steps*: one forward pass per output token for every running sequence,
whose cost grows with the batch and with the context the step reads, new prompts prefilled in
chunks inside the same steps; it admits a waiting request only while its KV cache has room for it,
taking waiting requests by priority (vLLM's ``--scheduling-policy priority``) and otherwise in
arrival order. Under load, requests queue there, and that queue is what a scheduling policy orders.

:class:`ServingFakeLLM` models exactly that, on the event loop's clock (with
:class:`~ayo_core.runtime.clock.VirtualClock`, in no real time). Simplifications, each on the side
of fewer surprises: a request reserves KV for its prompt and its whole output budget when admitted
(vLLM allocates as it decodes and preempts when full; reserving never preempts); cached prefix
blocks are shared for the cost of prefill but not for the reservation; the prefix cache is LRU over
the KV cache's blocks. The answers are FakeLLM's (deterministic text from the prompt).
"""

from __future__ import annotations

import asyncio
import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ayo_core.engines.llm_client import STOPPED, StopStream
from ayo_core.runtime.fakes import FakeLLM, FakeLLMResult, _CallLog, output_tokens, token_ids


@dataclass(frozen=True)
class StepModel:
    """Seconds per engine step, and the replica's capacity.

    One step: ``step_base`` (reading the weights once, plus overhead) + ``per_sequence`` for each
    further decoding sequence + ``per_context_token`` for every token of KV the step reads (each
    decoding sequence's prompt and output so far) + ``per_prefill_token`` for each prompt token
    prefilled in it (at most ``prefill_chunk`` per step). ``fixed`` is paid once per request before
    it reaches the engine (HTTP, tokenization). Capacity: ``kv_tokens`` of KV cache, ``max_seqs``
    running sequences.
    """

    fixed: float = 0.005
    step_base: float = 0.015
    per_sequence: float = 0.0001
    per_context_token: float = 3.0e-7
    per_prefill_token: float = 0.000125
    prefill_chunk: int = 2048
    kv_tokens: int = 100_000
    max_seqs: int = 256

    def step(self, decoding: int, context: int, prefill: int) -> float:
        return (self.step_base + self.per_sequence * max(0, decoding - 1) + self.per_context_token * context
                + self.per_prefill_token * prefill)


@dataclass
class _Sequence:
    ids: list[int]
    out: list[str]
    max_tokens: int
    stream_cb: Callable[[str], Any] | None
    fut: asyncio.Future
    reserve: int
    cached: int = 0
    prefill_left: int = 0
    emitted: int = 0
    decoding: bool = False
    text: list[str] = field(default_factory=list)


class ServingFakeLLM(FakeLLM):
    """A fake LLM replica with continuous batching, chunked prefill, a KV-cache bound and a priority
    queue (see the module doc). Same engine API and answers as :class:`FakeLLM`."""

    def __init__(self, model: StepModel | None = None, responder: Callable[[str, int], str] | None = None,
                 block: int = 16) -> None:
        self.model = model or StepModel()
        super().__init__(responder=responder, max_concurrency=self.model.max_seqs, block=block)
        self._queue: list[tuple[int, int, _Sequence]] = []
        self._running: list[_Sequence] = []
        self._kv_used = 0
        self._stepping: asyncio.Task | None = None
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.steps = 0
        self.busy_s = 0.0  # time with at least one sequence running
        self.sequence_s = 0.0  # running sequences x time: over a run's length, the mean batch
        self.max_waiting = 0

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, s in self._queue if not s.fut.done())

    async def _generate(self, method: str, prompt: str, max_tokens: int, priority: int,
                        stream_cb: Callable[[str], None] | None) -> FakeLLMResult:
        loop = asyncio.get_running_loop()
        log = _CallLog(method, prompt, priority, loop.time())
        self.calls.append(log)
        await asyncio.sleep(self.model.fixed)
        ids = token_ids(prompt)
        budget = max(0, max_tokens)
        if len(ids) + budget > self.model.kv_tokens:
            raise ValueError(f"prompt of {len(ids)} tokens plus max_tokens={budget} does not fit this replica's "
                             f"KV cache ({self.model.kv_tokens} tokens); shorten the prompt or lower max_tokens")
        out = output_tokens(self.responder(prompt, max_tokens).lstrip())[:budget] if budget else []
        seq = _Sequence(ids, out, budget, stream_cb, loop.create_future(), reserve=len(ids) + budget)
        heapq.heappush(self._queue, (priority, next(self._seq), seq))
        self.max_waiting = max(self.max_waiting, len(self._queue))
        if self._stepping is None or self._stepping.done():
            self._stepping = loop.create_task(self._run_steps())
        try:
            result: FakeLLMResult = await seq.fut
            return result
        finally:
            log.end, log.cached_tokens = loop.time(), seq.cached

    # ---- the engine's loop ------------------------------------------------------------------
    async def _run_steps(self) -> None:
        while True:
            self._admit()
            if not self._running:
                return
            prefilled, prefill = self._plan_prefill()
            decoding = [s for s in self._running if s.decoding]
            context = sum(len(s.ids) + s.emitted for s in decoding)
            seconds = self.model.step(len(decoding), context, prefill)
            await asyncio.sleep(seconds)
            self.steps += 1
            self.busy_s += seconds
            self.sequence_s += seconds * len(self._running)
            for s in prefilled:
                self._remember(s.ids)
                s.decoding = True
            for s in decoding + prefilled:  # the step that ends a prefill also samples its first token
                self._emit(s)

    def _admit(self) -> None:
        for s in [s for s in self._running if s.fut.done()]:  # cancelled by its caller
            self._finish(s, None)
        while self._queue and len(self._running) < self.model.max_seqs:
            _, _, s = self._queue[0]
            if s.fut.done():
                heapq.heappop(self._queue)
                continue
            if self._kv_used + s.reserve > self.model.kv_tokens:
                break  # the head waits for room; vLLM's waiting queue does not skip it either
            heapq.heappop(self._queue)
            s.cached = self._cached_prefix(s.ids)
            s.prefill_left = max(1, len(s.ids) - s.cached) if s.ids else 0
            s.decoding = not s.prefill_left
            self._kv_used += s.reserve
            self._running.append(s)
        self.active = len(self._running)

    def _plan_prefill(self) -> tuple[list[_Sequence], int]:
        """This step's prefill chunk, in admission order: the sequences it completes, and its tokens."""
        budget, tokens, completed = self.model.prefill_chunk, 0, []
        for s in self._running:
            if s.decoding or not s.prefill_left or not budget:
                continue
            take = min(budget, s.prefill_left)
            s.prefill_left -= take
            budget -= take
            tokens += take
            if not s.prefill_left:
                completed.append(s)
        return completed, tokens

    def _emit(self, s: _Sequence) -> None:
        if s.fut.done():
            self._finish(s, None)
            return
        if s.emitted >= len(s.out):  # a prefill, or nothing to say
            self._finish(s, "length" if s.emitted >= s.max_tokens else "stop")
            return
        token = s.out[s.emitted]
        s.emitted += 1
        s.text.append(token)
        if s.stream_cb is not None:
            try:
                s.stream_cb(token)
            except StopStream:  # the real engine's early stop: the text so far, the rest never decoded
                self._finish(s, STOPPED)
                return
        if s.emitted >= len(s.out):
            self._finish(s, "length" if s.emitted >= s.max_tokens else "stop")

    def _finish(self, s: _Sequence, reason: str | None) -> None:
        if s in self._running:
            self._running.remove(s)
            self._kv_used -= s.reserve
        if reason is not None and not s.fut.done():
            s.fut.set_result(FakeLLMResult("".join(s.text), len(s.ids), s.emitted, s.cached, reason))

    # ---- prefix cache: LRU over the KV cache's blocks ----------------------------------------
    def _cached_prefix(self, ids: list[int]) -> int:
        n = 0
        for k, h in enumerate(self._block_hashes(ids)):
            if h not in self._lru:
                break
            self._lru.move_to_end(h)
            n = (k + 1) * self.block
        return n

    def _remember(self, ids: list[int]) -> None:
        for h in self._block_hashes(ids):
            self._lru[h] = None
            self._lru.move_to_end(h)
        while len(self._lru) > self.model.kv_tokens // self.block:
            self._lru.popitem(last=False)
