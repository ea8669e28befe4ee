"""Timelines of one query, stock and Ayo, in one shape: ``[{stage, label, start, end}]``.

* Stock: recorded with the frameworks' own hooks — LlamaIndex's instrumentation
  dispatcher (LLM, embedding, retrieval, rerank events) and LangChain callbacks
  (LLM, retriever, tool runs). Nothing in the app changes.
* Ayo: the optimized object's ``last_trace`` (``ayo_core.trace.Trace``): one span
  per executed primitive.

Times are seconds from the query's start. Stages are coarse (``llm``, ``embed``,
``search``, ``rerank``, ``tool``, ``other``) so both rows share one legend.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any
from uuid import UUID

_LLAMA_STAGES = {
    "LLMChat": "llm", "LLMCompletion": "llm", "Embedding": "embed",
    "Retrieval": "search", "ReRank": "rerank",
}
_AYO_OPS = {
    "prefill": "llm", "partial_prefill": "llm", "decode": "llm", "embed": "embed",
    "ingest": "search", "search": "search", "rerank": "rerank", "tool_call": "tool",
}


class Recorder:
    """Collects stage spans; ``begin(key, stage, label)`` / ``finish(key)``."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.spans: list[dict[str, Any]] = []
        self._open: dict[Any, dict[str, Any]] = {}

    def reset(self) -> None:
        self.t0 = time.perf_counter()
        self.spans.clear()
        self._open.clear()

    def begin(self, key: Any, stage: str, label: str) -> None:
        self._open[key] = {"stage": stage, "label": label, "start": time.perf_counter() - self.t0}

    def finish(self, key: Any) -> None:
        span = self._open.pop(key, None)
        if span is not None:
            span["end"] = time.perf_counter() - self.t0
            self.spans.append(span)

    def stage_spans(self) -> list[dict[str, Any]]:
        """Spans by start time, without composites: a retriever or reranker span that wraps
        an LLM call (MultiQueryRetriever, QueryFusionRetriever, LLMRerank) would paint the
        model's time in the wrong colour, so only its parts are kept."""
        llm = [s for s in self.spans if s["stage"] == "llm"]

        def wraps_llm(s: dict[str, Any]) -> bool:
            return any(s["start"] <= c["start"] and c["end"] <= s["end"] for c in llm)

        kept = [s for s in self.spans if s["stage"] == "llm" or not wraps_llm(s)]
        return sorted(kept, key=lambda s: (s["start"], s["end"]))


@contextmanager
def record_llamaindex(recorder: Recorder):  # type: ignore[no-untyped-def]
    """Record LlamaIndex stage events on the root dispatcher for the ``with`` block."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class _Handler(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            name = type(event).__name__
            for prefix, stage in _LLAMA_STAGES.items():
                if name == f"{prefix}StartEvent":
                    recorder.begin((event.span_id, prefix), stage, prefix)
                elif name == f"{prefix}EndEvent":
                    recorder.finish((event.span_id, prefix))

    dispatcher = get_dispatcher()
    handler = _Handler()
    dispatcher.add_event_handler(handler)
    try:
        yield recorder
    finally:
        dispatcher.event_handlers.remove(handler)


def langchain_handler(recorder: Recorder) -> Any:
    """A LangChain callback handler feeding ``recorder`` (pass it in ``config["callbacks"]``)."""
    from langchain_core.callbacks import BaseCallbackHandler

    class _Handler(BaseCallbackHandler):
        run_inline = True  # record on the caller's clock, not from an executor thread

        def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, **kw: Any) -> None:
            recorder.begin(run_id, "llm", "llm")

        def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kw: Any) -> None:
            recorder.begin(run_id, "llm", "chat")

        def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
            recorder.finish(run_id)

        def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
            recorder.finish(run_id)

        def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, **kw: Any) -> None:
            recorder.begin(run_id, "search", "retriever")

        def on_retriever_end(self, documents: Any, *, run_id: UUID, **kw: Any) -> None:
            recorder.finish(run_id)

        def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, **kw: Any) -> None:
            recorder.begin(run_id, "tool", (serialized or {}).get("name", "tool"))

        def on_tool_end(self, output: Any, *, run_id: UUID, **kw: Any) -> None:
            recorder.finish(run_id)

    return _Handler()


def spans_from_trace(trace: Any) -> list[dict[str, Any]]:
    """Ayo's ``last_trace`` as timeline spans (empty when there is no trace)."""
    return spans_from_traces([] if trace is None else [trace])


def spans_from_traces(traces: list[Any]) -> list[dict[str, Any]]:
    """The spans of every query of one call (``collect_traces``), from the first query's start."""
    traces = [t for t in traces if getattr(t, "nodes", None)]
    if not traces:
        return []
    origin = min(t.start for t in traces)
    spans = []
    for trace in traces:
        for s in trace.nodes:
            op = str(getattr(s.op, "value", s.op)).lower()
            stage = _AYO_OPS.get(op, "other")
            spans.append({"stage": stage, "label": s.node, "start": s.start - origin, "end": s.end - origin})
    return sorted(spans, key=lambda s: (s["start"], s["end"]))
