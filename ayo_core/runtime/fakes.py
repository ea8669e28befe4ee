"""Fake engines with a latency model — for unit tests and for planning only.

They are NOT models: the fake LLM answers with deterministic text derived from
the prompt (or from a ``responder`` the test gives), the fake embedding is a
bag-of-words hash, the fake vector store a brute-force cosine search. What they
do model is *time*: fixed + per-item + per-token costs, batch efficiency, a
bounded number of concurrent LLM sequences served by priority, and a block
prefix cache. Everything is deterministic given the order of calls and, with
:class:`~ayo_core.runtime.clock.VirtualClock`, runs in no real time.

They expose the method names of the real engines (``ayo_core.engines``):
``complete/chat/prefill/stream_complete/stream_chat/tokenize``, ``aembed/embed``,
``add/query`` with async variants ``aadd/aquery``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import re
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ayo_core.engines.llm_client import STOPPED, StopStream
from ayo_core.runtime.context import Engines


@dataclass(frozen=True)
class LatencyModel:
    """Seconds for one engine call: ``fixed`` + items + tokens, with batch efficiency.

    ``batch_efficiency`` in [0, 1]: 0 means n items cost n times one item, 1
    means a whole batch costs as much as one item (perfect batching).
    """

    fixed: float = 0.0
    per_item: float = 0.0
    per_token: float = 0.0
    per_prompt_token: float = 0.0
    batch_efficiency: float = 0.0

    def scale(self, n: int) -> float:
        """Work units for ``n`` items (or concurrent sequences) together."""
        return 0.0 if n <= 0 else 1.0 + (n - 1) * (1.0 - self.batch_efficiency)

    def items_cost(self, n: int) -> float:
        return self.fixed + self.per_item * self.scale(n)


@dataclass
class FakeLLMResult:
    """Same fields as ``ayo_core.engines.LLMResult``."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    finish_reason: str = "length"


def words(text: str) -> list[str]:
    return text.split()


def token_ids(text: str) -> list[int]:
    """Deterministic fake tokenization: one token per whitespace-separated word."""
    return [zlib.crc32(w.encode()) % 50_000 for w in words(text)]


def output_tokens(text: str) -> list[str]:
    """Fake output tokens: each word with the whitespace before it (joined they give the text back)."""
    return re.findall(r"\s*\S+", text)


def default_responder(prompt: str, max_tokens: int) -> str:
    h = zlib.crc32(prompt.encode())
    return " ".join(f"t{(h + 7 * i) % 997}" for i in range(max_tokens))


def render_messages(messages: list[dict[str, Any]]) -> str:
    return "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)


@dataclass
class _CallLog:
    method: str
    prompt: str
    priority: int
    start: float
    end: float = 0.0
    cached_tokens: int = 0


class FakeLLM:
    """Fake LLM engine (tests and planning only): deterministic text, modelled time.

    Latency: waiting for one of ``max_concurrency`` sequence slots (lowest
    ``priority`` first, like vLLM's priority scheduling), then ``fixed`` +
    ``per_prompt_token`` x uncached prompt tokens (prefill) + ``per_token`` x
    generated tokens x the slowdown of sharing the engine with the other
    running sequences (``batch_efficiency``). Prompts are cached in blocks of
    ``block`` tokens once prefilled, as vLLM's prefix cache does.
    """

    def __init__(self, latency: LatencyModel | None = None, responder: Callable[[str, int], str] | None = None,
                 max_concurrency: int = 8, block: int = 16):
        self.latency = latency or LatencyModel(fixed=0.002, per_token=0.01, per_prompt_token=0.0002,
                                               batch_efficiency=0.9)
        self.responder = responder or default_responder
        self.max_concurrency, self.block = max_concurrency, block
        self.calls: list[_CallLog] = []
        self.active = 0
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._cache: set[int] = set()

    # ---- engine API -----------------------------------------------------------------
    async def complete(self, prompt: str | list[int], max_tokens: int = 16, temperature: float = 0.0,
                       stop: list[str] | None = None, priority: int = 0,
                       stream_cb: Callable[[str], None] | None = None, **extra: Any) -> FakeLLMResult:
        text = prompt if isinstance(prompt, str) else " ".join(f"<{t}>" for t in prompt)
        return await self._generate("complete", text, max_tokens, priority, stream_cb)

    async def chat(self, messages: list[dict[str, Any]], max_tokens: int = 16, temperature: float = 0.0,
                   priority: int = 0, stream_cb: Callable[[str], None] | None = None, **extra: Any) -> FakeLLMResult:
        return await self._generate("chat", render_messages(messages), max_tokens, priority, stream_cb)

    async def prefill(self, prompt: str | list[int] | None = None, messages: list[dict[str, Any]] | None = None,
                      priority: int = 0) -> FakeLLMResult:
        text = render_messages(messages) if messages is not None else (
            prompt if isinstance(prompt, str) else " ".join(f"<{t}>" for t in prompt or []))
        return await self._generate("prefill", text, 0, priority, None)

    async def stream_complete(self, prompt: str | list[int], max_tokens: int = 16, **kw: Any) -> AsyncIterator[str]:
        async for delta in self._stream(self.complete, prompt, max_tokens, kw):
            yield delta

    async def stream_chat(self, messages: list[dict[str, Any]], max_tokens: int = 16, **kw: Any) -> AsyncIterator[str]:
        async for delta in self._stream(self.chat, messages, max_tokens, kw):
            yield delta

    async def tokenize(self, prompt: str | None = None, messages: list[dict[str, Any]] | None = None) -> list[int]:
        return token_ids(render_messages(messages) if messages is not None else prompt or "")

    # ---- model ----------------------------------------------------------------------
    async def _stream(self, method: Callable[..., Any], arg: Any, max_tokens: int, kw: dict) -> AsyncIterator[str]:
        queue: asyncio.Queue = asyncio.Queue()
        done = object()
        task = asyncio.ensure_future(method(arg, max_tokens=max_tokens, stream_cb=queue.put_nowait, **kw))
        task.add_done_callback(lambda _: queue.put_nowait(done))
        while (item := await queue.get()) is not done:
            yield item
        await task

    async def _generate(self, method: str, prompt: str, max_tokens: int, priority: int,
                        stream_cb: Callable[[str], None] | None) -> FakeLLMResult:
        loop = asyncio.get_running_loop()
        log = _CallLog(method, prompt, priority, loop.time())
        self.calls.append(log)
        await self._acquire(priority)
        try:
            ids = token_ids(prompt)
            cached = self._cached_prefix(ids)
            log.cached_tokens = cached
            await asyncio.sleep(self.latency.fixed + self.latency.per_prompt_token * (len(ids) - cached))
            self._remember(ids)
            out = output_tokens(self.responder(prompt, max_tokens).lstrip())[:max_tokens] if max_tokens > 0 else []
            per_token = self.latency.per_token * self.latency.scale(self.active)
            if stream_cb is None:
                await asyncio.sleep(per_token * len(out))
            else:
                for k, token in enumerate(out):
                    await asyncio.sleep(per_token)
                    try:
                        stream_cb(token)
                    except StopStream:  # the real engine's early stop: the text so far, the rest never decoded
                        return FakeLLMResult("".join(out[: k + 1]), len(ids), k + 1, cached, STOPPED)
            finish = "length" if len(out) >= max_tokens else "stop"
            return FakeLLMResult("".join(out), len(ids), len(out), cached, finish)
        finally:
            log.end = loop.time()
            self._release()

    async def _acquire(self, priority: int) -> None:
        if self.active < self.max_concurrency and not self._waiters:
            self.active += 1
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut  # _release hands its slot over (active stays counted)
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()  # the slot arrived just as we were cancelled
            self._waiters = [w for w in self._waiters if w[2] is not fut]
            heapq.heapify(self._waiters)
            raise

    def _release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self.active -= 1

    def _block_hashes(self, ids: list[int]) -> list[int]:
        hashes, h = [], 0
        for k in range(len(ids) // self.block):
            h = hash((h, tuple(ids[k * self.block:(k + 1) * self.block])))
            hashes.append(h)
        return hashes

    def _cached_prefix(self, ids: list[int]) -> int:
        n = 0
        for k, h in enumerate(self._block_hashes(ids)):
            if h not in self._cache:
                break
            n = (k + 1) * self.block
        return n

    def _remember(self, ids: list[int]) -> None:
        self._cache.update(self._block_hashes(ids))


def bag_of_words(text: str, dim: int = 64) -> list[float]:
    """A deterministic unit vector: hashed word counts (texts sharing words are close)."""
    vec = [0.0] * dim
    for w in words(text.lower()):
        vec[zlib.crc32(w.strip(".,;:!?\"'()").encode()) % dim] += 1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class FakeEmbedding:
    """Fake embedding engine (tests and planning only): one worker, ``fixed + per_item`` per call."""

    def __init__(self, latency: LatencyModel | None = None, dim: int = 64):
        self.latency = latency or LatencyModel(fixed=0.002, per_item=0.0005, batch_efficiency=0.5)
        self.dim = dim
        self.calls: list[tuple[int, float, float]] = []  # (items, start, end)
        self._worker: asyncio.Lock | None = None

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        if self._worker is None:
            self._worker = asyncio.Lock()
        async with self._worker:
            loop = asyncio.get_running_loop()
            start = loop.time()
            await asyncio.sleep(self.latency.items_cost(len(texts)))
            self.calls.append((len(texts), start, loop.time()))
            return self.embed(texts)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [bag_of_words(t, self.dim) for t in texts]


@dataclass
class _Collection:
    ids: list[str] = field(default_factory=list)
    rows: dict[str, tuple[list[float], str, dict]] = field(default_factory=dict)


class FakeVectorStore:
    """Fake vector store (tests and planning only): brute-force cosine top-k, ties by insertion order."""

    def __init__(self, add_latency: LatencyModel | None = None, query_latency: LatencyModel | None = None):
        self.add_latency = add_latency or LatencyModel(fixed=0.001, per_item=0.0002)
        self.query_latency = query_latency or LatencyModel(fixed=0.001, per_item=0.0005, batch_efficiency=0.8)
        self.collections: dict[str, _Collection] = {}
        self.calls: list[tuple[str, int, float, float]] = []

    async def aadd(self, collection: str, ids: list[str], embeddings: list[list[float]],
                   documents: list[str] | None = None, metadatas: list[dict] | None = None) -> None:
        await self._sleep("add", self.add_latency, len(ids))
        self.add(collection, ids, embeddings, documents, metadatas)

    def add(self, collection: str, ids: list[str], embeddings: list[list[float]],
            documents: list[str] | None = None, metadatas: list[dict] | None = None) -> None:
        col = self.collections.setdefault(collection, _Collection())
        for i, id_ in enumerate(ids):
            if id_ not in col.rows:
                col.ids.append(id_)
            col.rows[id_] = (list(embeddings[i]), (documents or [""] * len(ids))[i],
                             dict((metadatas or [{}] * len(ids))[i] or {}))

    async def aquery(self, collection: str, query_embeddings: list[list[float]], k: int = 4) -> list[list[dict]]:
        await self._sleep("query", self.query_latency, len(query_embeddings))
        return self.query(collection, query_embeddings, k)

    def query(self, collection: str, query_embeddings: list[list[float]], k: int = 4) -> list[list[dict]]:
        col = self.collections.get(collection, _Collection())
        out = []
        for q in query_embeddings:
            scored = [(-sum(a * b for a, b in zip(q, col.rows[i][0], strict=False)), n, i) for n, i in enumerate(col.ids)]
            scored.sort()
            out.append([{"id": i, "document": col.rows[i][1], "metadata": col.rows[i][2], "score": -s}
                        for s, _, i in scored[:k]])
        return out

    async def _sleep(self, what: str, model: LatencyModel, n: int) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(model.items_cost(n))
        self.calls.append((what, n, start, loop.time()))


@dataclass(frozen=True)
class FakeRerankResult:
    """Same fields as ``ayo_core.engines.reranker.RerankResult``."""

    index: int
    score: float


class FakeReranker:
    """Fake cross-encoder (tests and planning only): scores by shared words, ``fixed + per_item`` per call."""

    def __init__(self, latency: LatencyModel | None = None):
        self.latency = latency or LatencyModel(fixed=0.002, per_item=0.001, batch_efficiency=0.6)

    async def arerank(self, query: str, passages: list[str], top_n: int | None = None) -> list[FakeRerankResult]:
        await asyncio.sleep(self.latency.items_cost(len(passages)))
        return self.rerank(query, passages, top_n)

    def rerank(self, query: str, passages: list[str], top_n: int | None = None) -> list[FakeRerankResult]:
        q = set(words(query.lower()))
        scores = [len(q & set(words(t.lower()))) / (1 + len(words(t))) for t in passages]
        ranked = sorted(range(len(passages)), key=lambda i: (-scores[i], i))
        return [FakeRerankResult(i, scores[i]) for i in ranked[:top_n]]


def fake_engines(scale: str = "unit", responder: Callable[[str, int], str] | None = None) -> Engines:
    """Fake engines (tests and planning only). ``scale="gpu"``: latencies of a GPU deployment
    (8B-class LLM at ~25 ms/token, GPU embedding, in-memory vector search); ``"unit"``: small numbers."""
    if scale == "gpu":
        return Engines(
            llm=FakeLLM(LatencyModel(fixed=0.015, per_token=0.025, per_prompt_token=0.0004, batch_efficiency=0.92),
                        responder=responder, max_concurrency=32),
            embed=FakeEmbedding(LatencyModel(fixed=0.03, per_item=0.008, batch_efficiency=0.6)),
            vector=FakeVectorStore(LatencyModel(fixed=0.01, per_item=0.002, batch_efficiency=0.5),
                                   LatencyModel(fixed=0.02, per_item=0.004, batch_efficiency=0.8)),
            rerank=FakeReranker(LatencyModel(fixed=0.02, per_item=0.004, batch_efficiency=0.7)),
        )
    if scale != "unit":
        raise ValueError(f"unknown fake engine scale {scale!r}; valid: 'unit', 'gpu'")
    return Engines(llm=FakeLLM(responder=responder), embed=FakeEmbedding(), vector=FakeVectorStore(),
                   rerank=FakeReranker())
