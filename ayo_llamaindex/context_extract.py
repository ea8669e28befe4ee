"""Contextual retrieval: prefill each document once for ``DocumentContextExtractor``.

The extractor asks the model, for every chunk, to situate the chunk in its whole
document: each request starts with the same ``<document>...</document>`` message, then
the chunk. Stock sends a document's chunk requests all at once (``num_workers`` of
them), so the server prefills the shared document for several of them side by side
before any of those blocks is in its prefix cache. Inside an optimized call Ayo makes
the first request of each document (with two or more chunks to situate) wait for one
prefill of the document's head, tokenized exactly as the real request renders it; the
other requests then reuse those cached blocks and prefill only their chunk. Documents
still go in parallel, and every chunk request is the stock call (same messages, same
retries, same metadata), so the contexts, and the answer, are stock's. At worst (a
changed template, an evicted block) the cache misses and it costs one small request.

Any LLM Ayo does not recognize (see :func:`ayo_llamaindex.llm.recognize_llm`) runs stock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import Counter
from typing import Any

from ayo_llamaindex.llm import LLMBinding

log = logging.getLogger(__name__)

BOUNDARY_TOKENS = 2  # tokens dropped at the cut: they may merge with what follows
MIN_TOKENS = 32  # one cache block: a shorter head is not worth a request


class ExtractionPlan:
    """One optimized call's view of its extractors: chunks per document and the warm-ups started."""

    def __init__(self) -> None:
        self.chunks_per_doc: Counter[str] = Counter()
        self.warmed: dict[str, concurrent.futures.Future[int]] = {}
        self.lock = threading.Lock()
        self.bindings: dict[int, LLMBinding] = {}  # id(extractor) -> its LLM, for the extractors Ayo warms
        self.tokens_prefilled = 0


def document_head(document: Any) -> list[Any]:
    """The first message of every chunk request for ``document`` (as the extractor builds it)."""
    from llama_index.core.llms import ChatMessage, TextBlock

    return [ChatMessage(role="user", content=[TextBlock(text=f"<document>{document.get_content()}</document>", type="text")],
                        additional_kwargs={"cache_control": {"type": "ephemeral"}})]


async def prefill_head(binding: LLMBinding, document: Any) -> int:
    """Prefill the document's head on the LLM's server; returns the tokens sent (0: skipped)."""
    from ayo_llamaindex.runtime import llm_engine_for

    base_url, model, api_key = binding.endpoint
    engine = llm_engine_for(base_url, model, api_key, float(binding.llm.timeout or 300.0))
    messages = binding.chat_request(document_head(document)).body["messages"]
    ids = await engine.tokenize(messages=messages, add_generation_prompt=False, continue_final_message=True)
    ids = list(ids)[:-BOUNDARY_TOKENS]
    if len(ids) < MIN_TOKENS:
        return 0
    await engine.prefill(prompt=ids)
    return len(ids)


def count_chunks(plan: ExtractionPlan, extractor: Any, nodes: Any) -> None:
    """Chunks per source document that ``aextract`` will situate (the ones it does not skip)."""
    for node in nodes:
        source = getattr(node, "source_node", None)
        if source is not None and extractor.key not in (node.metadata or {}):
            plan.chunks_per_doc[source.node_id] += 1


def warm_future(plan: ExtractionPlan, binding: LLMBinding, document: Any, doc_id: str) -> concurrent.futures.Future[int]:
    """The document's one prefill (started by its first chunk request, shared by the rest)."""
    from ayo_llamaindex.runtime import LOOP

    with plan.lock:
        fut = plan.warmed.get(doc_id)
        if fut is None:
            fut = plan.warmed[doc_id] = LOOP.submit(prefill_head(binding, document))
        return fut


async def situate(wrapped: Any, plan: ExtractionPlan, binding: LLMBinding, args: tuple, kwargs: dict) -> Any:
    """``_agenerate_node_context`` after the document's head is in the prefix cache."""
    node, document = _node_and_document(args, kwargs)
    source = getattr(node, "source_node", None)
    if source is not None and document is not None and plan.chunks_per_doc[source.node_id] >= 2:
        try:
            sent = await asyncio.wrap_future(warm_future(plan, binding, document, source.node_id))
            with plan.lock:
                plan.tokens_prefilled += sent
        except Exception:  # noqa: BLE001 - a failed warm-up only loses the cache hit
            log.debug("document prefill failed; situating the chunk stock", exc_info=True)
    return await wrapped(*args, **kwargs)


def _node_and_document(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    names = ("node", "metadata", "document", "prompt", "key")
    bound = dict(zip(names, args, strict=False)) | kwargs
    return bound.get("node"), bound.get("document")


def binding_for(extractor: Any) -> LLMBinding | None:
    """The extractor's LLM when Ayo can send its requests' head itself (chat model), else None."""
    binding = LLMBinding(extractor.llm)
    if not binding.recognized or not binding.llm._use_chat_completions({}):
        return None
    return binding
