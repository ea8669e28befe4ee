"""LlamaIndex's instrumentation spans for the work Ayo does itself.

Tracing integrations (OpenTelemetry, Phoenix, Langfuse) build their traces from the spans that
LlamaIndex's ``@dispatcher.span`` opens around every spanned method call, and hang each
instrumentation event on the span that was active when it was sent. Where Ayo does a step
itself (a query embedded on its engine, a synthesis's LLM calls sent by it), no stock method
runs, so this module opens the span that method would have opened: the same id form
(``{Class}.{method}-{uuid}``), bound arguments, instance, parent and tags, on the dispatcher of
the module that defines the method, and makes it the active span while the step runs, so the
events and the spans of the LlamaIndex code Ayo calls inside name it as their parent.

The method names follow the caller's path, as stock's do: ``query`` / ``retrieve`` /
``get_query_embedding`` / ``predict`` under ``query()``, their ``a``-prefixed twins under
``aquery()`` (:func:`~ayo_core.runtime.caller.in_async_call`). Spans go through the same
recorder as the events (:mod:`ayo_core.runtime.recording`): a speculative step's spans are sent
only if its result is used.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from llama_index.core.instrumentation import get_dispatcher

from ayo_core.runtime import recording as recorder
from ayo_core.runtime.caller import in_async_call
from ayo_shims import llamaindex as shim

# the ids of the spans a speculative step opened (while it records: see :func:`recording`)
_RECORDED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("ayo_li_recorded_spans", default=None)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """While a speculative step records its emissions: its spans' ids are kept, so what it emits
    inside one of them is replayed inside it (:func:`in_recorded_span`)."""
    token = _RECORDED.set(set())
    try:
        yield
    finally:
        _RECORDED.reset(token)


def record_span_enter(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """Around ``Dispatcher.span_enter``: a span that LlamaIndex code opens inside a speculative step
    (the prompt helper's ``split_text``) is recorded with the step's own spans, and opens when they do."""
    records, recorded = recorder.current(), _RECORDED.get()
    if records is None or recorded is None:
        return wrapped(*args, **kwargs)
    call = inspect.signature(wrapped).bind(*args, **kwargs)
    call.apply_defaults()
    late = call.arguments.get("parent_id") not in recorded
    recorded.add(call.arguments["id_"])

    def enter() -> Any:
        arguments = dict(call.arguments)
        extra = arguments.pop("kwargs", {})
        if late:
            arguments["parent_id"] = shim.active_span_id().get()
        return wrapped(**arguments, **extra)

    records.append(enter)
    return None


def record_other(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """Around ``Dispatcher.span_exit`` / ``span_drop`` / ``event``: kept for replay while a speculative step records."""
    return recorder.emit(lambda: wrapped(*args, **kwargs))


def in_recorded_span(record: Callable[[], Any]) -> Callable[[], Any]:
    """``record`` (an emission being recorded now), replayed with the span active now as the active one
    when that span was opened by the same speculative step; else as it is (under the replay's span)."""
    recorded, active = _RECORDED.get(), shim.active_span_id().get()
    if recorded is None or active not in recorded:
        return record

    def replay() -> Any:
        var = shim.active_span_id()
        token = var.set(active)
        try:
            out = record()
        finally:
            var.reset(token)
        if not inspect.isawaitable(out):
            return out

        async def awaited() -> Any:
            inner = var.set(active)
            try:
                return await out
            finally:
                var.reset(inner)

        return awaited()

    return replay


class Span:
    """One stock span: opened when made, then :meth:`exit` with the result or :meth:`drop` with the error."""

    def __init__(self, label: str, module: str, instance: Any, bound_args: inspect.BoundArguments) -> None:
        self.id_ = f"{label}-{uuid.uuid4()}"
        self.dispatcher, self.instance, self.bound_args = get_dispatcher(module), instance, bound_args
        parent = shim.active_span_id().get()
        tags = shim.active_instrument_tags().get()
        recorded = _RECORDED.get()
        # a speculative step's span opens only if its result is used, then under whatever span is active
        # there, unless its parent is a span of the same speculative step
        late = recorded is not None and parent not in recorded
        if recorded is not None:
            recorded.add(self.id_)

        def enter() -> None:
            self.dispatcher.span_enter(id_=self.id_, bound_args=bound_args, instance=instance, tags=tags,
                                       parent_id=shim.active_span_id().get() if late else parent)

        recorder.emit(enter)

    def exit(self, result: Any = None) -> Any:
        recorder.emit(lambda: self.dispatcher.span_exit(id_=self.id_, bound_args=self.bound_args,
                                                        instance=self.instance, result=result))
        return result

    def drop(self, err: BaseException) -> None:
        def send() -> None:
            self.dispatcher.event(shim.span_drop_event(span_id=self.id_, err_str=str(err)))
            self.dispatcher.span_drop(id_=self.id_, bound_args=self.bound_args, instance=self.instance, err=err)

        recorder.emit(send)

    @contextlib.contextmanager
    def active(self) -> Iterator[Span]:
        """This span is the active one (the parent of the events and spans started) while the block runs."""
        var = shim.active_span_id()
        token = var.set(self.id_)
        try:
            yield self
        finally:
            with contextlib.suppress(ValueError):  # a token made in another task's context: that context ends
                var.reset(token)


def of_method(instance: Any, name: str, *args: Any, **kwargs: Any) -> Span:
    """The span ``instance.name(*args, **kwargs)`` opens, opened now under the active span."""
    owner = next((c for c in type(instance).__mro__ if name in c.__dict__), type(instance))
    try:
        bound = inspect.signature(getattr(instance, name)).bind(*args, **kwargs)
    except (TypeError, ValueError, AttributeError):  # a signature we cannot bind: the span without arguments
        bound = inspect.Signature().bind()
    return Span(f"{type(instance).__name__}.{name}", owner.__module__, instance, bound)


def spanned_levels(instance: Any, name: str) -> int:
    """How many spans one call of ``instance.name`` opens: one per class in its MRO whose own ``name``
    is spanned (an override calling ``super()`` opens its span, then its parent's: ``OpenAILike.chat``
    inside ``OpenAILike.chat``); 0 for a method nobody spans."""
    return sum(1 for c in type(instance).__mro__ if shim.is_spanned(c.__dict__.get(name)))


def levels(instance: Any, name: str) -> int:
    """:func:`spanned_levels`, at least one (a public LLM or embedding method is always spanned)."""
    return max(1, spanned_levels(instance, name))


def sync_or_async(name: str) -> str:
    """``name`` on the caller's path: ``aquery`` for ``query`` inside ``aquery()``, ``_aquery`` for ``_query``."""
    if not in_async_call():
        return name
    return f"_a{name[1:]}" if name.startswith("_") else f"a{name}"


@contextlib.contextmanager
def opened(instance: Any, names: Sequence[str], *args: Any, **kwargs: Any) -> Iterator[Box]:
    """The spans of ``instance.names[0]`` calling ``names[1]``..., each with these arguments, the innermost
    active while the block runs; ended with ``box.value`` (the block sets it) or dropped with its error."""
    box = Box()
    with contextlib.ExitStack() as stack:
        for name in names:
            span = of_method(instance, name, *args, **kwargs)
            stack.enter_context(_ending(span, box))
            stack.enter_context(span.active())
        yield box


class Box:
    """What a block hands back to the spans around it (their ``result``)."""

    value: Any = None

    def set(self, value: Any) -> Any:
        self.value = value
        return value


@contextlib.contextmanager
def _ending(span: Span, box: Box) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        span.drop(exc)
        raise
    span.exit(box.value)


def call_names(instance: Any, name: str) -> list[str]:
    """``name`` on the caller's path, once per span level (see :func:`levels`)."""
    resolved = sync_or_async(name)
    return [resolved] * levels(instance, resolved)


def of_function(qualname: str, module: str) -> Span:
    """The span a spanned plain function (``run_jobs``) opens, opened now under the active span."""
    return Span(qualname, module, None, inspect.Signature().bind())


@contextlib.contextmanager
def within(span: Span | None) -> Iterator[None]:
    """``span`` active while the block runs (nothing when None)."""
    if span is None:
        yield
        return
    with span.active():
        yield


_ASYNC_UTILS = "llama_index.core.async_utils"


def rerank_span(reranker: Any, nodes: list[Any], query: Any) -> Span:
    """What stock opens around ``LLMRerank``'s batches: ``LLMRerank._postprocess_nodes`` under ``query()``
    (``postprocess_nodes`` itself has no span); ``run_jobs``, which ``_apostprocess_nodes`` calls, under
    ``aquery()``."""
    if in_async_call():
        return of_function("run_jobs", _ASYNC_UTILS)
    return of_method(reranker, "_postprocess_nodes", nodes, query)


@contextlib.contextmanager
def rerank_job() -> Iterator[None]:
    """One batch's call under ``aquery()``: inside ``run_jobs``' worker span, as stock's ``run_jobs`` runs it."""
    if not in_async_call():
        yield
        return
    box = Box()
    span = of_function("run_jobs.<locals>.worker", _ASYNC_UTILS)
    with _ending(span, box), span.active():
        yield
