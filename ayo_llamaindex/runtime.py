"""Where optimized LlamaIndex pipelines run: the core's shared engines, runtimes and loop.

All optimized query engines and functions of a process run on the core's one background
event loop (:mod:`ayo_core.runtime.bridge`) and, per set of engines, on the core's shared
``Runtime`` (:func:`ayo_core.runtime.shared_runtime`): concurrent queries from any thread,
and LangChain chains on the same engines, meet in the same engine schedulers (that is where
cross-query batching and critical-path priorities happen). What stays here is LlamaIndex's
own: which binding maps to which engine kind, and how a node calls the user's objects the
way stock would.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from typing import Any

from ayo_core.engines.openai_request import send_request
from ayo_core.engines.registry import get_embedding_engine, get_llm_engine
from ayo_core.engines.remote_embedding import get_remote_embedding_engine
from ayo_core.pipeline.engines import EMBED, LLM, EngineSet
from ayo_core.runtime import Runtime, bridge
from ayo_llamaindex.embedding import EmbedBinding, EmbedSend
from ayo_llamaindex.llm import LLMBinding
from ayo_shims import python_runtime

# Threads of the embedding engine's worker. When indexing overlaps decoding (doc-QA with
# query expansion) one thread leaves the second core to vLLM; otherwise torch's default
# (all cores, as stock HuggingFaceEmbedding uses, which also gives stock's exact vectors).
# AYO_EMBED_THREADS overrides both.
OVERLAP_EMBED_THREADS = 1


def embed_threads(overlap: bool) -> int | None:
    forced = os.environ.get("AYO_EMBED_THREADS")
    if forced:
        return int(forced)
    return OVERLAP_EMBED_THREADS if overlap else None


# Every optimized engine's sync query runs on the process's one background loop (shared with the
# LangChain adapter); aquery awaits it with LOOP.arun from the caller's loop.
LOOP = bridge.BRIDGE
bridge.use_executor(python_runtime.daemon_pool)


class EngineAssignment(EngineSet):
    """Which engine kind (scheduler) serves each recognized binding of a pipeline: the core's
    :class:`~ayo_core.pipeline.EngineSet`, keyed by a binding's endpoint (LLMs) or engine options
    (embeddings)."""

    def llm_kind(self, binding: LLMBinding | None) -> str | None:
        if binding is None or not binding.recognized:
            return None
        return self.kind_of(LLM, binding.endpoint)

    def embed_kind(self, binding: EmbedBinding | None) -> str | None:
        if binding is None or not binding.recognized:
            return None
        return self.kind_of(EMBED, _embed_key(binding))


def _embed_key(binding: EmbedBinding) -> tuple:
    return tuple(sorted(binding.engine_options().items()))


def assign_engines(llms: list[LLMBinding], embeds: list[EmbedBinding], overlap: bool = False) -> EngineAssignment:
    """Shared engines (``ayo_core.engines`` registry) for every recognized binding; ``overlap``:
    embedding runs alongside decoding (see :func:`embed_threads`)."""
    out = EngineAssignment()
    for b in llms:
        if b.recognized:
            out.kind(LLM, b.endpoint, functools.partial(_llm_engine, b))
    for e in embeds:
        if e.recognized:
            out.kind(EMBED, _embed_key(e), functools.partial(embedding_engine, e, overlap))
    return out


def _llm_engine(binding: LLMBinding) -> Any:
    """The process's shared engine for a recognized LLM (one that sends the user's key when it is a real one)."""
    base_url, model, api_key = binding.endpoint
    return get_llm_engine(base_url, model=model, api_key=api_key, timeout=float(binding.llm.timeout or 300.0))


def embedding_engine(binding: EmbedBinding, overlap: bool = False) -> Any:
    """The shared engine that serves a recognized binding: the remote server's engine, or the
    in-process one on the model's folder (``overlap``: see :func:`embed_threads`)."""
    if binding.remote:
        return get_remote_embedding_engine(**binding.engine_options())
    return get_embedding_engine(torch_threads=embed_threads(overlap), **binding.engine_options())


LLM_INFLIGHT = 64  # LLM requests a LlamaIndex pipeline lets the engine batch at once


def runtime_for(assignment: EngineAssignment, policy: str = "critical_path", llm_inflight: int | None = None) -> Runtime:
    """The shared ``Runtime`` over exactly these engines on the running (bridge) loop: the core's
    one per engine set and policy, whose schedulers LangChain chains on these engines share too
    (``llm_inflight``: ``Options.llm_inflight``, None for :data:`LLM_INFLIGHT`)."""
    return assignment.shared_runtime(policy, llm_inflight or LLM_INFLIGHT)


# -- what node fns use to reach engines ---------------------------------------------------

LLMSend = Callable[..., Awaitable[Any]]


def llm_send(ctx: Any, kind: str | None) -> LLMSend | None:
    """``send(request, stream_cb=None) -> LLMResult`` (text, token usage) through the ``kind``
    engine's scheduler (:func:`ayo_core.engines.openai_request.send_request`)."""
    if kind is None:
        return None
    return functools.partial(send_request, ctx.engine(kind))


def embed_send(ctx: Any, kind: str | None) -> EmbedSend | None:
    """``send(texts, kind="text"|"query") -> vectors`` through the ``kind`` embedding scheduler."""
    return None if kind is None else _embed_sender(ctx.engine(kind))


def direct_embed_send(binding: EmbedBinding) -> EmbedSend | None:
    """An embed ``send`` straight to the shared engine (no scheduler): for work outside any graph."""
    if not binding.recognized:
        return None
    return _embed_sender(embedding_engine(binding))


def _embed_sender(engine: Any) -> EmbedSend:
    async def send(texts: list[str], kind: str = "text", batch_size: int | None = None) -> list[list[float]]:
        # with batch_size the engine encodes in stock's batch shape (sorted by length, batch_size
        # at a time): one padded batch of every chunk would waste compute on padding
        return await engine.aembed(list(texts), kind=kind, batch_size=batch_size)

    return send
