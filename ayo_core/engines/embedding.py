"""Embedding engine: sentence-transformers on its own worker thread, batching across callers.

Requests go into a bounded queue; the worker takes the oldest request and
coalesces whatever compatible requests are waiting (same prompt, same
normalize flag) into one forward pass of up to ``max_batch`` texts. While a
batch runs, new requests pile up, so batches grow with load without any
waiting timer.

Matching the stock classes (so the stock baseline and Ayo index the same vectors):

* llama-index ``HuggingFaceEmbedding(model_name=path)``: ``normalize=True``,
  empty query/text instructions for this model, ``max_length`` = the model's
  ``max_seq_length`` (256 for all-MiniLM-L6-v2) -> ``EmbeddingEngine()`` defaults.
* langchain ``HuggingFaceEmbeddings(model_name=path)``: replaces ``"\\n"`` by
  ``" "`` and encodes with ``normalize_embeddings=False`` -> ``replace_newlines=True,
  normalize=False``. (all-MiniLM-L6-v2 has a Normalize module, so its vectors are
  unit length either way.)

Same text, same settings -> same vector, up to float32 rounding (~1e-7) from the
batch it shares: padding and batch size change the kernels' summation order. A
request with ``batch_size=n`` is encoded alone, exactly as ``SentenceTransformer.encode(
texts, batch_size=n)`` does, and is then bit-identical to a stock call of that shape.

Threads: ``torch.set_num_threads`` is process-wide (it would also slow the stock
baseline and any other torch user), so it is never called. The worker instead sets
its *own* OpenMP thread count (``omp_set_num_threads`` is per calling thread in
libgomp, which torch's CPU wheels use and MKL follows) to ``torch_threads`` when it
starts; other threads keep theirs. ``torch_threads=None`` leaves it alone. One
thread leaves the second core to vLLM for merged batches. The thread count *does* change
some vectors in their last bits (the kernels split their sums by thread: measured on
all-MiniLM-L6-v2, two of four short questions differ between 1 and 2 threads), so an
exact-shape request is encoded with the thread count torch gives every other thread
(``torch.get_num_threads()``: what the stock call in the caller's thread runs with).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import itertools
import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Kind = Literal["text", "query"]


class EmbeddingEngineError(RuntimeError):
    """The embedding engine could not load its model or failed to encode."""


class EmbeddingQueueFull(EmbeddingEngineError):
    """``submit_nowait`` found the bounded request queue full (back off or use ``embed``/``aembed``)."""


@dataclass
class EmbeddingStats:
    """A snapshot of the engine's counters (see ``EmbeddingEngine.statistics``)."""

    queued_requests: int
    requests: int
    texts: int
    batches: int
    max_batch_seen: int
    busy_seconds: float


@dataclass
class _Request:
    texts: list[str]
    prompt: str
    normalize: bool
    batch_size: int | None  # set: encode alone with this batch size (exact stock shape)
    future: concurrent.futures.Future[list[list[float]]]
    done: int = 0  # texts already handed to a batch
    results: list[list[float]] | None = None


def _settle(future: concurrent.futures.Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    # A caller may cancel at any moment (asyncio cancellation propagates to the future).
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


def default_embedding_model_path() -> Path:
    from ayo_core import models

    return Path(models.embedding_model_path())


def _thread_local_omp_setter() -> Any:
    """libgomp's ``omp_set_num_threads`` (acts on the calling thread only), or None if not found."""
    try:
        import torch

        lib_dir = Path(torch.__file__).parent / "lib"
        for cand in [*sorted(lib_dir.glob("libgomp*.so*")), Path("libgomp.so.1")]:
            try:
                return ctypes.CDLL(str(cand)).omp_set_num_threads
            except (OSError, AttributeError):
                continue
    except Exception:  # noqa: BLE001 - never fail an engine over a thread hint
        log.debug("could not find libgomp", exc_info=True)
    return None


class EmbeddingEngine:
    """sentence-transformers model served by one worker thread (see module doc for matching knobs)."""

    # a request with batch_size asks for stock's exact vectors: the scheduler never merges it with others'
    ALONE_WHEN = ("batch_size",)

    _ids = itertools.count()

    def __init__(self, model_path: str | os.PathLike[str] | None = None, max_batch: int = 32,
                 queue_size: int = 1024, normalize: bool = True, torch_threads: int | None = 1,
                 max_length: int | None = None, query_prompt: str = "", text_prompt: str = "",
                 replace_newlines: bool = False, device: str = "cpu") -> None:
        if max_batch < 1:
            raise ValueError(f"EmbeddingEngine max_batch must be >= 1, got {max_batch}")
        self.model_path = Path(model_path) if model_path is not None else default_embedding_model_path()
        self.max_batch, self.normalize, self.torch_threads = max_batch, normalize, torch_threads
        self.max_length, self.device, self.replace_newlines = max_length, device, replace_newlines
        self.prompts = {"query": query_prompt, "text": text_prompt}
        self._queue: queue.Queue[_Request | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._model: Any = None
        self._omp_set: Any = None
        self._stock_threads = 1  # torch.get_num_threads() once loaded (exact-shape requests run with it)
        self._error: BaseException | None = None
        self._closed = False
        self._stats = EmbeddingStats(0, 0, 0, 0, 0, 0.0)
        self.name = f"embedding-{next(self._ids)}"

    def __repr__(self) -> str:
        return f"EmbeddingEngine({str(self.model_path)!r}, max_batch={self.max_batch})"

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, wait: bool = False) -> None:
        """Start the worker (loads the model on it). Called by the first request; idempotent."""
        with self._lock:
            if self._closed:
                raise EmbeddingEngineError(f"{self!r} is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"ayo-{self.name}", daemon=True)
                self._thread.start()
        if wait:
            self._ready.wait()
            self._raise_if_broken()

    def close(self, timeout: float | None = 30.0) -> None:
        """Finish queued requests, then stop the worker."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)

    @property
    def dimension(self) -> int:
        self.start(wait=True)
        getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        return int(getter())

    def statistics(self) -> EmbeddingStats:
        s = self._stats
        return EmbeddingStats(self._queue.qsize(), s.requests, s.texts, s.batches, s.max_batch_seen, s.busy_seconds)

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise EmbeddingEngineError(f"{self!r} is unusable: {self._error}") from self._error

    # -- submitting -------------------------------------------------------------------------------

    def _request(self, texts: list[str], kind: Kind, normalize: bool | None,
                 batch_size: int | None) -> _Request:
        if kind not in self.prompts:
            raise ValueError(f"EmbeddingEngine kind must be 'text' or 'query', got {kind!r}")
        if isinstance(texts, str):
            raise TypeError("EmbeddingEngine expects a list of texts, got one str: wrap it in a list")
        self._raise_if_broken()
        self.start()
        items = [t.replace("\n", " ") for t in texts] if self.replace_newlines else list(texts)
        norm = self.normalize if normalize is None else normalize
        return _Request(items, self.prompts[kind], norm, batch_size, concurrent.futures.Future())

    def submit_nowait(self, texts: list[str], kind: Kind = "text", normalize: bool | None = None,
                      batch_size: int | None = None) -> concurrent.futures.Future[list[list[float]]]:
        """Queue ``texts`` and return a future of their vectors; raises EmbeddingQueueFull when full."""
        if not texts:
            done: concurrent.futures.Future[list[list[float]]] = concurrent.futures.Future()
            done.set_result([])
            return done
        req = self._request(texts, kind, normalize, batch_size)
        try:
            self._queue.put_nowait(req)
        except queue.Full:
            raise EmbeddingQueueFull(f"{self!r}: request queue is full ({self._queue.maxsize}); "
                                     "retry later or raise queue_size") from None
        return req.future

    def embed(self, texts: list[str], kind: Kind = "text", normalize: bool | None = None,
              batch_size: int | None = None, timeout: float | None = None) -> list[list[float]]:
        """Vectors for ``texts`` (blocks; waits for queue space). ``kind="query"`` applies the query
        prompt. ``batch_size`` encodes this request alone in stock-shaped batches (see module doc)."""
        if not texts:
            return []
        req = self._request(texts, kind, normalize, batch_size)
        self._queue.put(req, timeout=timeout)
        return req.future.result(timeout)

    async def aembed(self, texts: list[str], kind: Kind = "text", normalize: bool | None = None,
                     batch_size: int | None = None) -> list[list[float]]:
        """Async ``embed``: requests from concurrent callers share forward passes."""
        if not texts:
            return []
        delay = 0.001
        while True:
            try:
                fut = self.submit_nowait(texts, kind, normalize, batch_size)
                break
            except EmbeddingQueueFull:  # back-pressure without blocking the event loop
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
        return await asyncio.wrap_future(fut)

    # -- worker -----------------------------------------------------------------------------------

    def _pin_threads(self, exact: bool = False) -> None:
        # Re-asserted before every batch: torch's lazy per-thread init may reset it once. An exact-shape
        # request runs with stock's thread count (the module doc: the count changes the sums' rounding).
        if self._omp_set is not None and self.torch_threads is not None:
            self._omp_set(self._stock_threads if exact else int(self.torch_threads))

    def _load(self) -> None:
        if self.torch_threads is not None and self.device == "cpu":
            import torch

            self._stock_threads = torch.get_num_threads()  # the pool size of every thread not pinned here
            self._omp_set = _thread_local_omp_setter()
            if self._omp_set is None:
                log.warning("%r: libgomp not found; torch_threads=%s not applied", self, self.torch_threads)
        self._pin_threads()
        from sentence_transformers import SentenceTransformer

        if not (self.model_path / "modules.json").exists() and not (self.model_path / "config.json").exists():
            raise EmbeddingEngineError(f"embedding model folder {self.model_path} is missing. Fix: run "
                                       "`ayo models prepare` (or `make demo`), or pass model_path=.")
        model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
        if self.max_length:
            model.max_seq_length = self.max_length
        self._model = model

    def _run(self) -> None:
        try:
            self._load()
        except BaseException as exc:  # noqa: BLE001 - reported to every caller
            self._error = exc
            log.error("%r failed to load: %s", self, exc)
        finally:
            self._ready.set()
        pending: deque[_Request] = deque()
        stop = False
        while not stop or pending:
            if not pending:
                item = self._queue.get()
                if item is None:
                    break
                pending.append(item)
            stop = self._drain_into(pending) or stop
            batch = self._next_batch(pending)
            if batch:
                self._encode(batch)

    def _drain_into(self, pending: deque[_Request]) -> bool:
        """Move every queued request into ``pending``; True when the stop sentinel was seen."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            pending.append(item)

    def _next_batch(self, pending: deque[_Request]) -> list[tuple[_Request, int, int]]:
        """Slices (request, start, end) for one forward pass, oldest request first."""
        head = pending[0]
        if head.batch_size is not None and not head.future.cancelled():  # exact-shape request: alone, all of it
            pending.popleft()
            return [(head, 0, len(head.texts))]
        key = (head.prompt, head.normalize)
        batch: list[tuple[_Request, int, int]] = []
        room = self.max_batch
        for req in list(pending):
            if room == 0:
                break
            if req.future.cancelled():  # its caller gave up: skip the work
                pending.remove(req)
                continue
            if req.batch_size is not None or (req.prompt, req.normalize) != key:
                continue
            take = min(room, len(req.texts) - req.done)
            batch.append((req, req.done, req.done + take))
            req.done += take
            room -= take
            if req.done == len(req.texts):
                pending.remove(req)
        return batch

    def _encode(self, batch: list[tuple[_Request, int, int]]) -> None:
        texts = [t for req, a, b in batch for t in req.texts[a:b]]
        first = batch[0][0]
        t0 = time.perf_counter()
        try:
            self._pin_threads(exact=first.batch_size is not None)
            if self._error is not None:
                raise EmbeddingEngineError(f"{self!r} is unusable: {self._error}")
            vectors = self._model.encode(texts, batch_size=first.batch_size or len(texts), prompt=first.prompt,
                                         normalize_embeddings=first.normalize, convert_to_numpy=True,
                                         show_progress_bar=False).tolist()
        except BaseException as exc:  # noqa: BLE001 - fail this batch's callers, keep serving
            if len(batch) > 1:  # requests merged from other queries must not fail for one request's input
                log.warning("%r: a merged batch of %d requests failed (%s); encoding them one by one",
                            self, len(batch), exc)
                for part in batch:
                    self._encode([part])
                return
            err = exc if isinstance(exc, EmbeddingEngineError) else EmbeddingEngineError(
                f"{self!r} failed to encode {len(texts)} texts: {type(exc).__name__}: {exc}")
            for req, _, _ in batch:
                _settle(req.future, error=err)
            return
        self._record(batch, len(texts), time.perf_counter() - t0)
        pos = 0
        for req, a, b in batch:
            if req.results is None:
                req.results = [[] for _ in req.texts]
            req.results[a:b] = vectors[pos:pos + b - a]
            pos += b - a
            if b == len(req.texts):
                _settle(req.future, value=req.results)

    def _record(self, batch: list[tuple[_Request, int, int]], n: int, seconds: float) -> None:
        s = self._stats
        s.batches += 1
        s.texts += n
        s.requests += sum(1 for req, a, _ in batch if a == 0)
        s.max_batch_seen = max(s.max_batch_seen, n)
        s.busy_seconds += seconds
