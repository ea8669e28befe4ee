"""Zero-load service times: what each request of a query would cost alone on an idle engine.

A lower bound on latency (:mod:`ayo_bench.lower_bound`) needs each request's *service* time, not
the time it took in Ayo's run (that includes queueing and sharing the engine, which a better
schedule might avoid). Service times come from a model of the engine, never from Ayo's schedule.

A service model is any object with the two methods of :class:`ServiceModel`
(``ayo_core.emulate``'s ``Profile`` has them). Optional extras, read with ``getattr``:

* ``llm_engine_floor_s(requests) -> float``: the least time the LLM engine must be busy to serve
  all these requests under *any* batching. Absent, :func:`llm_engine_floor_s` derives one from a
  ``.llm`` :class:`~ayo_core.runtime.fake_serving.StepModel` if the object has one, else it falls
  back to the longest single request (true of any engine, batching or not).
* ``call_s(engine, method, items) -> float | None``: service of one call to another engine
  (a vector store); None or absent: that call counts as 0 (always safe).

Adapters here: :class:`StepServiceModel` (the serving-engine model of the fake replicas and of
the emulator's profiles), :class:`FakeEnginesServiceModel` (the plain fakes of
``ayo_core.runtime.fakes``) and :class:`MeasuredServiceModel` (a real run with no profile).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ayo_core.runtime.fake_serving import StepModel
from ayo_core.runtime.fakes import LatencyModel


@runtime_checkable
class ServiceModel(Protocol):
    """Zero-load service times of the LLM server and of the embedding engine (seconds)."""

    def llm_alone_s(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """One request alone on an idle LLM server, from sending it to its last token."""

    def embed_batch_s(self, texts: int, tokens: int) -> float:
        """One embedding batch alone on an idle embedding engine."""


@dataclass(frozen=True)
class LLMRequest:
    """One model request's work: its token counts (what the recorder or the fake engine saw)."""

    prompt_tokens: int
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def uncached_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens)


# ---- the serving-engine step model -----------------------------------------------------
def _prefill_tokens(r: LLMRequest) -> int:
    """Tokens the engine prefills for ``r`` (ServingFakeLLM: at least one, unless the prompt is empty)."""
    return max(1, r.uncached_tokens) if r.prompt_tokens else 0


def _decode_steps(r: LLMRequest) -> int:
    """Steps after the prefill: the step ending a prefill also samples the first token."""
    return max(0, r.completion_tokens - 1) if r.prompt_tokens else r.completion_tokens


def _context_read(r: LLMRequest) -> int:
    """KV tokens the decode steps of ``r`` read, summed: the same in any schedule."""
    first = 1 if r.prompt_tokens else 0  # tokens already emitted when the first decode step runs
    steps = _decode_steps(r)
    return steps * r.prompt_tokens + steps * first + steps * (steps - 1) // 2


@dataclass(frozen=True)
class StepServiceModel:
    """:class:`ServiceModel` of a :class:`StepModel` replica (and optionally a fake embedder).

    ``llm_alone_s`` is exactly what :class:`~ayo_core.runtime.fake_serving.ServingFakeLLM` takes
    for the request alone: ``fixed``, the prefill in ``prefill_chunk`` chunks (one step each), then
    one step per further token reading the context so far. ``embed`` is the embedding engine's
    :class:`LatencyModel` (None: embedding counts as 0).
    """

    llm: StepModel
    embed: LatencyModel | None = None

    def llm_alone_s(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        alone = getattr(self.llm, "alone_s", None)
        if callable(alone):  # the model's own account of a lone request: one source of truth
            return float(alone(prompt_tokens, cached_tokens, completion_tokens))
        m, r = self.llm, LLMRequest(prompt_tokens, cached_tokens, completion_tokens)
        prefill = _prefill_tokens(r)
        steps = math.ceil(prefill / m.prefill_chunk) + _decode_steps(r)
        return m.fixed + steps * m.step_base + m.per_prefill_token * prefill + m.per_context_token * _context_read(r)

    def embed_batch_s(self, texts: int, tokens: int) -> float:
        return self.embed.items_cost(texts) if self.embed is not None and texts > 0 else 0.0

    def llm_engine_floor_s(self, requests: Sequence[LLMRequest]) -> float:
        return step_engine_floor_s(self.llm, requests)


def step_engine_floor_s(m: StepModel, requests: Sequence[LLMRequest]) -> float:
    """Least busy time of a :class:`StepModel` replica serving ``requests``, batched in any way.

    Every schedule prefills the same tokens and its decode steps read the same context (both
    fixed by the token counts), and it runs at least as many steps as the longest request needs
    alone and as the prefill chunks need. A step with ``d`` decoding sequences costs
    ``per_sequence * (d - 1)`` more, so ``D`` decode sequence-steps in ``S`` steps cost at least
    ``per_sequence * (D - S)``; the total is least at one of the two ends of ``S``. A step is also
    never cheaper than ``token_roofline_s`` per token it computes (decoding sequences + prefill
    tokens), and those tokens are the same in any schedule. ``fixed`` is not engine time (it
    overlaps other requests' steps).
    """
    if not requests:
        return 0.0
    prefill = sum(_prefill_tokens(r) for r in requests)
    lone = max(math.ceil(_prefill_tokens(r) / m.prefill_chunk) + _decode_steps(r) for r in requests)
    least_steps = max(lone, math.ceil(prefill / m.prefill_chunk))
    seq_steps = sum(_decode_steps(r) for r in requests)
    steps_cost = min(m.step_base * s + m.per_sequence * max(0, seq_steps - s)
                     for s in (least_steps, max(least_steps, seq_steps)))
    steps_cost = max(steps_cost, getattr(m, "token_roofline_s", 0.0) * (seq_steps + prefill))
    return steps_cost + m.per_prefill_token * prefill + m.per_context_token * sum(_context_read(r) for r in requests)


# ---- the plain fakes -------------------------------------------------------------------
@dataclass(frozen=True)
class FakeEnginesServiceModel:
    """:class:`ServiceModel` of ``ayo_core.runtime.fakes``' FakeLLM, FakeEmbedding and FakeVectorStore.

    FakeLLM alone: ``fixed + per_prompt_token * uncached + per_token * completion``, holding one of
    ``llm_slots`` slots all along; so ``n`` requests keep the slots busy for at least the sum of
    their alone times, spread over ``llm_slots`` at best. Embedding and search: ``items_cost``.
    """

    llm: LatencyModel
    llm_slots: int = 8
    embed: LatencyModel | None = None
    vector_query: LatencyModel | None = None

    def llm_alone_s(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        uncached = max(0, prompt_tokens - cached_tokens)
        return self.llm.fixed + self.llm.per_prompt_token * uncached + self.llm.per_token * completion_tokens

    def embed_batch_s(self, texts: int, tokens: int) -> float:
        return self.embed.items_cost(texts) if self.embed is not None and texts > 0 else 0.0

    def llm_engine_floor_s(self, requests: Sequence[LLMRequest]) -> float:
        alone = [self.llm_alone_s(r.prompt_tokens, r.cached_tokens, r.completion_tokens) for r in requests]
        return max(max(alone, default=0.0), sum(alone) / max(1, self.llm_slots))

    def call_s(self, engine: str, method: str, items: int) -> float | None:
        if engine == "vector" and method in ("query", "aquery") and self.vector_query is not None:
            return self.vector_query.items_cost(items)
        return None


# ---- a real run with no profile --------------------------------------------------------
Shape = tuple[int, int, int]  # (prompt tokens, uncached prompt tokens, completion tokens)


class MeasuredServiceModel:
    """Service times read off a real run's own requests (no profile given).

    Serving a request never takes less for more work, and a request's time, measured, is its
    service plus non-negative noise (sharing the server or the CPU, the collector, the scheduler).
    Shape ``r`` is at most as much work as shape ``q`` when it has no more prompt tokens (the
    context every decode step reads), no more uncached prompt tokens (the prefill) and no more
    completion tokens (the steps). So:

    * a request that ran alone (no other recorded request overlapping it) measures its own
      service, noise included;
    * every recorded request of at least ``r``'s work, alone or not, took at least ``r``'s service:
      the fastest of them caps ``r``'s estimate, which takes the noise of a slow lone measurement
      out (a maximum over raw lone times is biased upward: it read above Ayo's own latency);
    * ``q`` costs at least the capped estimate of every lone shape of no more work than ``q``.

    ``exclude=(t0, t1)``: requests that started in that window (the measured call itself) are no
    lone shape: the estimates come from the rest of the run (stock's requests of the same question
    among them). They still cap, as every request does: a request's service is at most what it took,
    so no request is priced above its own time in the call, and the bound lies between the bound at
    true service times (noise only adds) and the call's latency. A shape with no smaller lone
    request elsewhere counts 0 (always safe). With no model of batching, the LLM engine's floor is
    only the longest single request. Embedding: 0.
    """

    name = "measured (lone requests of the run, each capped by the fastest request of as much work)"

    def __init__(self, rows: Iterable[dict[str, Any]], exclude: tuple[float, float] | None = None) -> None:
        rows = list(rows)
        keep = (lambda r: True) if exclude is None else (lambda r: not exclude[0] <= r["start"] <= exclude[1])
        observed = [(shape, s) for r in rows for shape, s in _shape_time(r)]
        lone = [(shape, s) for r in lone_rows(rows) if keep(r) for shape, s in _shape_time(r)]
        self.lone: list[tuple[Shape, float]] = [
            (shape, min([s] + [t for other, t in observed if _no_more_work(shape, other)])) for shape, s in lone]

    def llm_alone_s(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        q = (prompt_tokens, max(0, prompt_tokens - cached_tokens), completion_tokens)
        return max((s for shape, s in self.lone if _no_more_work(shape, q)), default=0.0)

    def embed_batch_s(self, texts: int, tokens: int) -> float:
        return 0.0


def _no_more_work(r: Shape, q: Shape) -> bool:
    return all(a <= b for a, b in zip(r, q, strict=True))


def _shape_time(r: dict[str, Any]) -> list[tuple[Shape, float]]:
    """``[(shape, seconds)]`` of a finished row with token counts, else ``[]``."""
    if r.get("end") is None or r.get("aborted") or r.get("prompt_tokens") is None or r.get("completion_tokens") is None:
        return []
    prompt = int(r["prompt_tokens"])
    shape = (prompt, max(0, prompt - int(r.get("cached_tokens") or 0)), int(r["completion_tokens"]))
    return [(shape, float(r["end"] - r["start"]))]


def lone_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The finished rows that no other finished row overlapped."""
    rows = sorted((r for r in rows if r.get("end") is not None and not r.get("aborted")), key=lambda r: r["start"])
    out, latest_end = [], -math.inf  # the latest end among the rows started before this one
    for i, r in enumerate(rows):
        before, latest_end = latest_end > r["start"], max(latest_end, r["end"])
        after = i + 1 < len(rows) and rows[i + 1]["start"] < r["end"]
        if not before and not after:
            out.append(r)
    return out


# ---- engine floors for any service model -----------------------------------------------
def service_name(service: Any) -> str:
    """How a results file names the service model a bound used."""
    return str(getattr(service, "name", None) or type(service).__name__)


def llm_engine_floor_s(service: Any, requests: Sequence[LLMRequest]) -> float:
    """Least busy time of the LLM engine for ``requests`` under any schedule (see the module doc)."""
    if not requests:
        return 0.0
    floor = getattr(service, "llm_engine_floor_s", None)
    if callable(floor):
        return float(floor(requests))
    step = getattr(service, "llm", None)
    if isinstance(step, StepModel) and getattr(service, "hosted", None) is None:  # a hosted API: no steps of ours
        return step_engine_floor_s(step, requests)
    return max(service.llm_alone_s(r.prompt_tokens, r.cached_tokens, r.completion_tokens) for r in requests)


def embed_engine_floor_s(service: Any, texts: int) -> float:
    """Least busy time of the embedding engine for ``texts`` texts batched in any way.

    A partition into batches of ``n_k`` texts costs ``sum f(n_k) = sum n_k * f(n_k)/n_k``, at least
    ``texts * min_n f(n)/n``: true of any cost function ``f = embed_batch_s(n, 0)``. Token counts
    are not in the trace; 0 tokens never costs more than the real ones.
    """
    if texts <= 0:
        return 0.0
    return texts * min(service.embed_batch_s(n, 0) / n for n in range(1, texts + 1))
