"""A serving engine's timing, step by step: continuous batching, chunked prefill, KV-bound admission,
a priority queue and an LRU prefix cache — on the event loop's clock.

A serving engine (vLLM) runs *steps*: one forward pass per output token for every running sequence,
whose cost grows with the batch and with the context the step reads; new prompts are prefilled in
chunks inside the same steps; a waiting request is admitted only while the KV cache has room for it,
waiting requests taken by priority (vLLM's ``--scheduling-policy priority``), else in arrival order.

:class:`StepEngine` plays that out for requests whose output is already known (a recorded answer,
a fake model's text): it decides *when* each output token appears, never *what* it is. On a real
loop that is wall-clock time (the emulator, :mod:`ayo_core.emulate.server`); under
:class:`~ayo_core.runtime.clock.VirtualClock` it is simulated time (the cluster simulation's
:class:`~ayo_core.runtime.fake_serving.ServingFakeLLM`). Steps are paced by absolute deadlines, so a
loop that wakes late (a busy CPU) catches up instead of drifting: a GPU does not slow down because
its client's process was descheduled.

Simplifications, each on the side of fewer surprises: a request reserves KV for its prompt and its
whole output budget when admitted (vLLM allocates as it decodes and preempts when full; reserving
never preempts); cached prefix blocks are shared for the cost of prefill but not for the
reservation; the prefix cache is LRU over the KV cache's blocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ayo_core.engines.llm_client import StopStream


@dataclass(frozen=True)
class StepModel:
    """Seconds per engine step, and the engine's capacity.

    One step: the weights' part ``max(step_base + per_sequence * (decoding - 1), token_roofline_s *
    tokens)`` (a step is bound by reading the weights once until its batch of ``tokens`` = decoding
    sequences + prefill tokens makes it compute-bound) + ``per_context_token`` for every token of KV
    the step reads (each decoding sequence's prompt and output so far) + ``per_prefill_token`` for
    each prompt token prefilled in it (at most ``prefill_chunk`` per step) + ``per_prefill_pair`` for
    each (query, key) pair the prefill's attention reads (a chunk of ``p`` tokens after ``c`` already in
    the KV cache: ``p * (c + p / 2)``; 0 where attention is left in the linear term). ``fixed`` is paid once per
    request before it reaches the engine (HTTP, tokenization). Capacity: ``kv_tokens`` of KV cache,
    ``max_seqs`` running sequences.
    """

    fixed: float = 0.005
    step_base: float = 0.015
    per_sequence: float = 0.0001
    per_context_token: float = 3.0e-7
    per_prefill_token: float = 0.000125
    prefill_chunk: int = 2048
    kv_tokens: int = 100_000
    max_seqs: int = 256
    token_roofline_s: float = 0.0
    per_prefill_pair: float = 0.0

    def step(self, decoding: int, context: int, prefill: int, prefill_pairs: float = 0.0) -> float:
        weights = max(self.step_base + self.per_sequence * max(0, decoding - 1),
                      self.token_roofline_s * (decoding + prefill))
        return (weights + self.per_context_token * context + self.per_prefill_token * prefill
                + self.per_prefill_pair * prefill_pairs)

    def alone_s(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """Seconds one request takes on an idle engine: its zero-load service time."""
        todo = max(1, prompt_tokens - cached_tokens) if prompt_tokens else 0
        seconds, ctx = self.fixed, prompt_tokens
        while todo > 0:  # the step that ends the prefill samples the first token
            chunk = min(todo, self.prefill_chunk)
            seconds += self.step(0, 0, chunk, attention_pairs(prompt_tokens - todo, chunk))
            todo -= chunk
        for k in range(1, completion_tokens):
            seconds += self.step(1, ctx + k, 0)
        return seconds


def attention_pairs(before: int, chunk: int) -> float:
    """(query, key) pairs a prefill chunk of ``chunk`` tokens attends, ``before`` tokens already cached."""
    return chunk * (before + chunk / 2)


@dataclass
class GenerationResult:
    """What one request got: ``emitted`` tokens, ``cached`` prompt tokens, and why it ended."""

    emitted: int
    cached: int
    finish: str  # "stop" (its output ended), "length" (max_tokens), "stopped" (the caller stopped it)


@dataclass
class _Sequence:
    ids: Sequence[int]
    n_out: int
    max_tokens: int
    on_token: Callable[[int], Any] | None
    fut: asyncio.Future
    reserve: int
    cached: int = 0
    prefill_left: int = 0
    emitted: int = 0
    decoding: bool = False


class StepEngine:
    """One serving engine replica's timing (see the module doc).

    ``await engine.generate(prompt_ids, n_out, max_tokens, priority, on_token)``: ``n_out`` is how many
    tokens the answer has (it ends there with "stop" unless ``max_tokens`` cuts it first, "length");
    ``on_token(k)`` is called as token ``k`` (0-based) is produced and may raise :class:`StopStream`.
    Cancelling the awaiting task frees the sequence at the next step, as a client hang-up does.
    """

    def __init__(self, model: StepModel | None = None, block: int = 16) -> None:
        self.model = model or StepModel()
        self.block = block
        self._queue: list[tuple[int, int, _Sequence]] = []
        self._order = itertools.count()
        self._running: list[_Sequence] = []
        self._kv_used = 0
        self._stepping: asyncio.Task | None = None
        self._deadline = 0.0
        self._lru: OrderedDict[bytes, None] = OrderedDict()
        self.steps = 0
        self.busy_s = 0.0  # time with at least one sequence running
        self.sequence_s = 0.0  # running sequences x time: over a run's length, the mean batch
        self.max_waiting = 0

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, s in self._queue if not s.fut.done())

    @property
    def active(self) -> int:
        return len(self._running)

    def reset_prefix_cache(self) -> None:
        self._lru.clear()

    async def generate(self, prompt_ids: Sequence[int], n_out: int, max_tokens: int, priority: int = 0,
                       on_token: Callable[[int], Any] | None = None) -> GenerationResult:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.model.fixed)
        budget = max(0, max_tokens)
        if len(prompt_ids) + budget > self.model.kv_tokens:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens plus max_tokens={budget} does not fit this "
                             f"engine's KV cache ({self.model.kv_tokens} tokens); shorten the prompt or lower max_tokens")
        seq = _Sequence(prompt_ids, min(n_out, budget), budget, on_token, loop.create_future(),
                        reserve=len(prompt_ids) + budget)
        heapq.heappush(self._queue, (priority, next(self._order), seq))
        self.max_waiting = max(self.max_waiting, len(self._queue))
        if self._stepping is None or self._stepping.done():
            self._deadline = loop.time()
            self._stepping = loop.create_task(self._run_steps())
        try:
            return await seq.fut
        finally:
            if not seq.fut.done():
                seq.fut.cancel()

    # ---- the engine's loop ------------------------------------------------------------------
    async def _run_steps(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._admit()
            if not self._running:
                return
            prefilled, prefill, pairs = self._plan_prefill()
            decoding = [s for s in self._running if s.decoding]
            context = sum(len(s.ids) + s.emitted for s in decoding)
            seconds = self.model.step(len(decoding), context, prefill, pairs)
            # Absolute deadlines: a late wake-up shortens the next sleep instead of adding up.
            self._deadline = max(self._deadline + seconds, loop.time() - seconds)
            await asyncio.sleep(max(0.0, self._deadline - loop.time()))
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

    def _plan_prefill(self) -> tuple[list[_Sequence], int, float]:
        """This step's prefill chunk, in admission order: the sequences it completes, its tokens, and the
        attention pairs they read."""
        budget, tokens, pairs, completed = self.model.prefill_chunk, 0, 0.0, []
        for s in self._running:
            if s.decoding or not s.prefill_left or not budget:
                continue
            take = min(budget, s.prefill_left)
            pairs += attention_pairs(len(s.ids) - s.prefill_left, take)
            s.prefill_left -= take
            budget -= take
            tokens += take
            if not s.prefill_left:
                completed.append(s)
        return completed, tokens, pairs

    def _emit(self, s: _Sequence) -> None:
        if s.fut.done():
            self._finish(s, None)
            return
        if s.emitted >= s.n_out:  # a prefill-only request, or nothing to say
            self._finish(s, "length" if s.emitted >= s.max_tokens else "stop")
            return
        s.emitted += 1
        if s.on_token is not None:
            try:
                s.on_token(s.emitted - 1)
            except StopStream:  # the caller's early stop: the text so far, the rest never decoded
                self._finish(s, "stopped")
                return
        if s.emitted >= s.n_out:
            self._finish(s, "length" if s.emitted >= s.max_tokens else "stop")

    def _finish(self, s: _Sequence, reason: str | None) -> None:
        if s in self._running:
            self._running.remove(s)
            self._kv_used -= s.reserve
        if reason is not None and not s.fut.done():
            s.fut.set_result(GenerationResult(s.emitted, s.cached, reason))

    # ---- prefix cache: LRU over the KV cache's blocks ----------------------------------------
    def _block_hashes(self, ids: Sequence[int]) -> list[bytes]:
        """One hash per *full* block, chained (a block's hash covers the whole prefix), as vLLM's."""
        out, h = [], hashlib.blake2b(digest_size=16)
        for end in range(self.block, len(ids) + 1, self.block):
            h.update(",".join(map(str, ids[end - self.block:end])).encode())
            out.append(h.copy().digest())
        return out

    def _cached_prefix(self, ids: Sequence[int]) -> int:
        """Cached prompt tokens: whole blocks, never the last prompt token (vLLM recomputes it for its
        logits, so a hit is capped at ``len - 1`` tokens, rounded down to a block)."""
        n = 0
        for k, h in enumerate(self._block_hashes(ids[:max(0, len(ids) - 1)])):
            if h not in self._lru:
                break
            self._lru.move_to_end(h)
            n = (k + 1) * self.block
        return n

    def _remember(self, ids: Sequence[int]) -> None:
        for h in self._block_hashes(ids):
            self._lru[h] = None
            self._lru.move_to_end(h)
        while len(self._lru) > self.model.kv_tokens // self.block:
            self._lru.popitem(last=False)
