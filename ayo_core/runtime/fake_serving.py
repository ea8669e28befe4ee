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
:class:`~ayo_core.runtime.clock.VirtualClock`, in no real time): its timing is
:class:`~ayo_core.emulate.step_engine.StepEngine`'s, the same engine model the emulated deployment
(``ayo emulate``) runs in wall-clock time, with its simplifications. The answers are FakeLLM's
(deterministic text from the prompt).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ayo_core.emulate.step_engine import StepEngine, StepModel
from ayo_core.engines.llm_client import STOPPED
from ayo_core.runtime.fakes import FakeLLM, FakeLLMResult, _CallLog, output_tokens, token_ids

__all__ = ["ServingFakeLLM", "StepModel"]


class ServingFakeLLM(FakeLLM):
    """A fake LLM replica with continuous batching, chunked prefill, a KV-cache bound and a priority
    queue (see the module doc). Same engine API and answers as :class:`FakeLLM`."""

    def __init__(self, model: StepModel | None = None, responder: Callable[[str, int], str] | None = None,
                 block: int = 16) -> None:
        self.engine = StepEngine(model, block=block)
        self.model = self.engine.model
        super().__init__(responder=responder, max_concurrency=self.model.max_seqs, block=block)

    # the engine's counters, read by the cluster simulation
    steps = property(lambda self: self.engine.steps)
    busy_s = property(lambda self: self.engine.busy_s)
    sequence_s = property(lambda self: self.engine.sequence_s)
    max_waiting = property(lambda self: self.engine.max_waiting)
    waiting = property(lambda self: self.engine.waiting)

    @property
    def active(self) -> int:
        return self.engine.active if hasattr(self, "engine") else 0

    @active.setter
    def active(self, value: int) -> None:  # FakeLLM's slot counter; the engine counts for itself
        pass

    async def _generate(self, method: str, prompt: str, max_tokens: int, priority: int,
                        stream_cb: Callable[[str], None] | None) -> FakeLLMResult:
        loop = asyncio.get_running_loop()
        log = _CallLog(method, prompt, priority, loop.time())
        self.calls.append(log)
        budget = max(0, max_tokens)
        out = output_tokens(self.responder(prompt, max_tokens).lstrip())[:budget] if budget else []
        emit: Any = None if stream_cb is None else (lambda k: stream_cb(out[k]))
        try:
            done = await self.engine.generate(token_ids(prompt), len(out), budget, priority, emit)
        finally:
            log.end = loop.time()
        log.cached_tokens = done.cached
        reason = STOPPED if done.finish == "stopped" else done.finish
        return FakeLLMResult("".join(out[:done.emitted]), len(token_ids(prompt)), done.emitted, done.cached, reason)
