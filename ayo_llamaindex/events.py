"""Stock LlamaIndex callback and instrumentation events for the work Ayo does itself.

Users count tokens (``TokenCountingHandler``), debug (``LlamaDebugHandler``) and trace
(the instrumentation dispatcher) through events the stock objects emit around each
call. Where Ayo sends a request or embeds a text itself, the same events are emitted
here, through LlamaIndex's own machinery wherever it exists: an LLM call goes through
``llm_chat_callback`` / ``llm_completion_callback`` bound to the user's LLM object (its
callback manager, ``to_payload()``, rate limiter), templating through the LLM's own
``_log_template_data``; embedding, retrieval and synthesis events are emitted with the
payloads of the stock methods, on the stock modules' dispatchers, through each user
object's own callback manager.

Events run on Ayo's loop in the context of the caller (``run_coroutine_threadsafe``
copies it), so parents (the query event, the active span) are the caller's. Order can
differ where Ayo runs steps concurrently; counts and payloads are stock's.

A speculative synthesis (``speculation.py``) may be thrown away: while one runs, its
events are *recorded* (``recording``) and replayed only when its answer is used.
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, MessageRole
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback

from ayo_core.introspect import once
from ayo_core.runtime import recording as recorder
from ayo_core.runtime.caller import in_async_call
from ayo_llamaindex import spans
from ayo_shims import llamaindex as shim

# the dispatchers stock emits on (a handler attached to one of them sees our events too)
_LLM = get_dispatcher("llama_index.core.llms.llm")
_EMBED = get_dispatcher("llama_index.core.base.embeddings.base")
_RETRIEVE = get_dispatcher("llama_index.core.base.base_retriever")
_SYNTH = get_dispatcher("llama_index.core.response_synthesizers.base")
_REFINE = get_dispatcher("llama_index.core.response_synthesizers.refine")
_QUERY = get_dispatcher("llama_index.core.base.base_query_engine")


def recording() -> contextlib.AbstractContextManager[list[Any]]:
    """Record (not emit) this task's events (:mod:`ayo_core.runtime.recording`); ``replay`` them
    if its result is used.

    Covers LlamaIndex's own emissions too (the prompt helper's ``CHUNKING`` events while a
    speculative synthesis packs chunks): see :func:`_install_hooks`.
    """
    _install_hooks()
    return _recording()


@contextlib.contextmanager
def _recording() -> Iterator[list[Any]]:
    with recorder.recording() as records, spans.recording():
        yield records


@once
def _install_hooks() -> None:
    """Make ``CallbackManager.on_event_start`` / ``on_event_end`` and the dispatcher's spans and events
    record while a task records.

    Process-wide wrapt wrappers, inert (one context-variable read) outside a recording task:
    LlamaIndex code that a speculative synthesis calls emits through them directly.
    """
    shim.wrap_callback_events(_start_hook, _end_hook)
    shim.wrap_dispatcher_spans(spans.record_span_enter, spans.record_other)


def _start_args(event_type: Any, payload: Any = None, event_id: str | None = None, parent_id: str | None = None,
                **kwargs: Any) -> tuple[Any, Any, str | None, str | None, dict[str, Any]]:
    return event_type, payload, event_id, parent_id, kwargs


def _start_hook(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    records = recorder.current()
    if records is None:
        return wrapped(*args, **kwargs)
    event_type, payload, event_id, parent_id, rest = _start_args(*args, **kwargs)
    event_id = event_id or str(uuid.uuid4())  # the caller needs its id now; the event starts at replay
    records.append(lambda: wrapped(event_type, payload, event_id=event_id, parent_id=parent_id, **rest))
    return event_id


def _end_hook(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    return recorder.emit(lambda: wrapped(*args, **kwargs))


# -- LLM ---------------------------------------------------------------------------------

def usage_raw(result: Any) -> dict[str, Any]:
    """The ``raw`` of a stock response as far as handlers read it: the server's token usage."""
    prompt, completion = int(getattr(result, "prompt_tokens", 0)), int(getattr(result, "completion_tokens", 0))
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def chat_response(result: Any) -> ChatResponse:
    """The ``ChatResponse`` stock's ``chat`` returns for the engine's ``result`` (``raw``: its token usage)."""
    raw = usage_raw(result)
    return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=result.text), raw=raw,
                        additional_kwargs=dict(raw["usage"]))


def _completion_response(result: Any) -> CompletionResponse:
    raw = usage_raw(result)
    return CompletionResponse(text=result.text, raw=raw, additional_kwargs=dict(raw["usage"]))


async def _chat_call(llm: Any, messages: list[Any], call: Callable[[], Awaitable[Any]]) -> ChatResponse:
    """``llm.chat(messages)``'s spans and events around ``call`` (the request Ayo sends)."""
    async def body(_self: Any, _messages: Any) -> ChatResponse:
        return chat_response(await call())

    with spans.opened(llm, spans.call_names(llm, "chat"), messages) as box:
        return box.set(await llm_chat_callback()(body)(llm, messages))


async def _completion_call(llm: Any, prompt: str, call: Callable[[], Awaitable[Any]],
                           **kwargs: Any) -> CompletionResponse:
    """``llm.complete(prompt, **kwargs)``'s spans and events around ``call``."""
    async def body(_self: Any, _prompt: str, **_kw: Any) -> CompletionResponse:
        return _completion_response(await call())

    with spans.opened(llm, spans.call_names(llm, "complete"), prompt, **kwargs) as box:
        return box.set(await llm_completion_callback()(body)(llm, prompt, **kwargs))


async def predict(llm: Any, prompt: Any, prompt_args: dict[str, Any], call: Callable[[], Awaitable[Any]]) -> Any:
    """``llm.predict(prompt, **prompt_args)``'s events around ``call``; returns ``call()``'s result."""
    return await _around(call, lambda inner: _predict_events(llm, prompt, prompt_args, inner))


async def complete(llm: Any, prompt: str, call: Callable[[], Awaitable[Any]]) -> Any:
    """``llm.complete(prompt)``'s events (``QueryFusionRetriever``'s query generation) around ``call``."""
    return await _around(call, lambda inner: _completion_call(llm, prompt, inner))


async def _around(call: Callable[[], Awaitable[Any]],
                  emit_events: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]) -> Any:
    """``emit_events`` around ``call``, returning ``call()``'s raw result (the engine's, with token usage)."""
    records = recorder.current()
    if records is not None:  # speculative: send now, emit later (if used) with the same result
        replay = spans.in_recorded_span(lambda: emit_events(_canned(result)))
        result = await call()
        records.append(replay)
        return result
    box: list[Any] = []
    await emit_events(_boxed(call, box))
    return box[0]


def _canned(result: Any) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        return result
    return call


def _boxed(call: Callable[[], Awaitable[Any]], box: list[Any]) -> Callable[[], Awaitable[Any]]:
    """``call`` that also keeps its raw result (the engine's, with token usage) for the caller."""
    async def wrapped() -> Any:
        box.append(await call())
        return box[-1]
    return wrapped


async def _predict_events(llm: Any, prompt: Any, prompt_args: dict[str, Any],
                          call: Callable[[], Awaitable[Any]]) -> Any:
    from llama_index.core.instrumentation.events.llm import LLMPredictEndEvent, LLMPredictStartEvent

    with spans.opened(llm, spans.call_names(llm, "predict"), prompt, **prompt_args) as span:
        _LLM.event(LLMPredictStartEvent(template=prompt, template_args=prompt_args))
        shim.llm_log_template_data(llm, prompt, **prompt_args)
        box: list[Any] = []
        if llm.metadata.is_chat_model:
            await _chat_call(llm, shim.llm_messages(llm, prompt, **prompt_args), _boxed(call, box))
        else:
            await _completion_call(llm, shim.llm_prompt(llm, prompt, **prompt_args), _boxed(call, box),
                                   formatted=True)
        output = span.set(shim.llm_parse_output(llm, box[0].text))
        _LLM.event(LLMPredictEndEvent(output=output))
    return box[0]


# -- embeddings --------------------------------------------------------------------------

class _Event:
    """One stock callback-manager event (start now, end later), emitted or recorded."""

    def __init__(self, callback_manager: Any, event_type: CBEventType, payload: dict[str, Any]) -> None:
        self.cm, self.type, self.id = callback_manager, event_type, None

        def start() -> None:
            self.id = self.cm.on_event_start(self.type, payload=payload)

        recorder.emit(start)

    def end(self, payload: dict[str, Any]) -> None:
        recorder.emit(lambda: self.cm.on_event_end(self.type, payload=payload, event_id=self.id))

    def as_parent(self) -> contextlib.AbstractContextManager[Any]:
        """Callback events started in the block nest under this one. A recorded event (a speculative step's,
        sent later if used) has no id yet: its replay nests what it recorded."""
        return shim.callback_parent(self.id) if self.id is not None else contextlib.nullcontext()

    def fail(self, exc: BaseException) -> None:
        """End with the exception, once per exception as ``CallbackManager.event`` does."""
        if isinstance(exc, Exception) and not hasattr(exc, "event_added"):
            exc.event_added = True  # type: ignore[attr-defined]
            self.end({EventPayload.EXCEPTION: exc})


def _dispatch(dispatcher: Any, event_factory: Callable[[], Any]) -> None:
    recorder.emit(spans.in_recorded_span(lambda: dispatcher.event(event_factory())))


async def embedding(model: Any, chunks: list[str], call: Callable[[], Awaitable[list[list[float]]]]) -> Any:
    """One stock embedding flush (``get_query_embedding`` / a batch of ``get_text_embedding_batch``)."""
    from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent, EmbeddingStartEvent

    model_dict = model.to_payload()
    _dispatch(_EMBED, lambda: EmbeddingStartEvent(model_dict=model_dict))
    event = _Event(model.callback_manager, CBEventType.EMBEDDING, {EventPayload.SERIALIZED: model_dict})
    vectors = await call()
    event.end({EventPayload.CHUNKS: list(chunks), EventPayload.EMBEDDINGS: vectors})
    _dispatch(_EMBED, lambda: EmbeddingEndEvent(chunks=list(chunks), embeddings=vectors))
    return vectors


# -- retrieval / synthesis -----------------------------------------------------------------

async def retrieve(retriever: Any, query: Any, call: Callable[[], Awaitable[list[Any]]]) -> list[Any]:
    """``BaseRetriever.retrieve``'s events around ``call`` (the lowered retrieval)."""
    event = Retrieval(retriever, query)
    with event.inside(), event.failing():
        nodes = await call()
    return event.end(nodes)


@contextlib.contextmanager
def retrieve_callback_event(callback_manager: Any, query: Any) -> Iterator[Callable[[list[Any]], None]]:
    """A ``with callback_manager.event(RETRIEVE, payload={QUERY_STR: ...})`` block in stock code: the block
    ends it with its nodes (the yielded function); an error ends it once, as ``CallbackManager.event`` does."""
    event = _Event(callback_manager, CBEventType.RETRIEVE, {EventPayload.QUERY_STR: query.query_str})
    try:
        yield lambda nodes: event.end({EventPayload.NODES: nodes})
    except BaseException as exc:
        event.fail(exc)
        raise


class _SplitEvents:
    """A stock method's events split around the lowered work: its callback event ends with the
    failure of any step run inside :meth:`failing`."""

    event: _Event | None = None

    def fail(self, exc: BaseException) -> None:
        if self.event is not None:
            self.event.fail(exc)

    @contextlib.contextmanager
    def failing(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            self.fail(exc)
            raise


def inner_retrieve_name(retriever: Any) -> str:
    """The method ``retrieve``/``aretrieve`` calls on this path: ``_aretrieve`` under ``aquery()``, unless
    the class keeps ``BaseRetriever._aretrieve``, which calls the sync ``_retrieve`` (``AutoMergingRetriever``)."""
    if in_async_call() and not shim.aretrieve_calls_sync_retrieve(retriever):
        return "_aretrieve"
    return "_retrieve"


class Retrieval(_SplitEvents):
    """``BaseRetriever.retrieve``'s events, split where the lowered retrieval is split (embed node,
    then search node): started before the query embedding, so its ``EMBEDDING`` events nest in
    ``RETRIEVE`` and the instrumentation events come in stock's order."""

    def __init__(self, retriever: Any, query: Any) -> None:
        from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent

        self.retriever, self.query = retriever, query
        shim.check_callback_manager(retriever)
        # the spans of retrieve() > _retrieve() (when the class spans its _retrieve: VectorIndexRetriever
        # does, QueryFusionRetriever's _aretrieve does not); the work runs in the innermost (inside())
        self.span = spans.of_method(retriever, spans.sync_or_async("retrieve"), query)
        self.inner: list[spans.Span] = []
        with self.span.active():
            _dispatch(_RETRIEVE, lambda: RetrievalStartEvent(str_or_query_bundle=query))
            self.event = _Event(retriever.callback_manager, CBEventType.RETRIEVE,
                                {EventPayload.QUERY_STR: query.query_str})
            name = inner_retrieve_name(retriever)
            for _ in range(spans.spanned_levels(retriever, name)):
                with (self.inner[-1] if self.inner else self.span).active():
                    self.inner.append(spans.of_method(retriever, name, query))

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """The retrieval's innermost span active while the block runs, and its callback event the parent of
        those started in it (the query embedding's; a fusion or router retriever's sub-retrievals, which run
        in other nodes than the one that opened it)."""
        with (self.inner[-1] if self.inner else self.span).active(), self.event.as_parent():
            yield

    def end(self, nodes: list[Any]) -> list[Any]:
        from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent

        for span in reversed(self.inner):
            span.exit(nodes)
        self.event.end({EventPayload.NODES: nodes})
        with self.span.active():
            _dispatch(_RETRIEVE, lambda: RetrievalEndEvent(str_or_query_bundle=self.query, nodes=nodes))
        return self.span.exit(nodes)

    def fail(self, exc: BaseException) -> None:
        super().fail(exc)
        if getattr(self, "dropped", False):  # a step's failure, then the query's: the spans end once
            return
        self.dropped = True
        for span in reversed(self.inner):
            span.drop(exc)
        self.span.drop(exc)


# events one node opens and a later node ends; set per query by failing_open_events
_OPEN: contextvars.ContextVar[list[_SplitEvents] | None] = contextvars.ContextVar("ayo_li_open_events", default=None)


@contextlib.contextmanager
def failing_open_events() -> Iterator[None]:
    """Around one query's graph: an event a node opened for later nodes to end (:class:`EngineRetrieval`)
    ends with the query's error, innermost first, as stock's ``with callback_manager.event(...)`` blocks
    end it (the outer ones then see ``event_added`` and leave it)."""
    token = _OPEN.set([])
    try:
        yield
    except Exception as exc:
        for event in reversed(_OPEN.get() or []):
            event.fail(exc)
        raise
    finally:
        _OPEN.reset(token)


class _OpenUntilEnded:
    """An event one node opens and a later node ends: registered with :func:`failing_open_events` meanwhile;
    ``on_end`` runs once it ends or fails (its opener's per-query entry is dropped)."""

    def register(self, on_end: Callable[[], Any] | None = None) -> None:
        self.on_end = on_end
        self.open = _OPEN.get()
        if self.open is not None:
            self.open.append(self)  # type: ignore[arg-type]

    def unregister(self) -> None:
        if self.open is not None and self in self.open:
            self.open.remove(self)  # type: ignore[arg-type]

    def ending(self) -> None:
        """Before the event's end: no longer open, and its opener told."""
        self.unregister()
        self.ended()

    def ended(self) -> None:
        if self.on_end is not None:
            self.on_end()


class EngineRetrieval(_SplitEvents, _OpenUntilEnded):
    """A query engine's own ``RETRIEVE`` callback event (``CitationQueryEngine._query`` opens one around
    retrieval, postprocessing and its citation cut), ended with the nodes it hands to synthesis."""

    def __init__(self, engine: Any, query: Any, on_end: Callable[[], Any] | None = None) -> None:
        self.event = _Event(engine.callback_manager, CBEventType.RETRIEVE, {EventPayload.QUERY_STR: query.query_str})
        self.register(on_end)

    def end(self, nodes: list[Any]) -> list[Any]:
        self.ending()
        self.event.end({EventPayload.NODES: nodes})
        return nodes

    def fail(self, exc: BaseException) -> None:
        self.ended()
        super().fail(exc)


class RouterRetrieval(Retrieval):
    """``RouterRetriever.retrieve``'s events: ``BaseRetriever.retrieve``'s, and inside its ``_retrieve``
    (``_aretrieve``) the retriever's own ``RETRIEVE`` callback event, ended with the chosen retrievers'
    nodes (their ``dict_values``, as stock's ``on_end`` gets them)."""

    def __init__(self, retriever: Any, query: Any) -> None:
        super().__init__(retriever, query)
        with self.inside():
            self.nested = _Event(retriever.callback_manager, CBEventType.RETRIEVE,
                                 {EventPayload.QUERY_STR: query.query_str})

    def end_with(self, found: dict[str, Any], nodes: list[Any]) -> list[Any]:
        """Ended: the nested event with ``found`` (node id -> node, in stock's order), then ``retrieve``'s
        with ``nodes`` (``found`` after the retriever's recursive retrieval)."""
        self.nested.end({EventPayload.NODES: found.values()})
        return self.end(nodes)

    def fail(self, exc: BaseException) -> None:
        self.nested.fail(exc)  # the inner event takes the error; the outer one then ends without it, as stock's
        super().fail(exc)


class OuterRetrieval(Retrieval, _OpenUntilEnded):
    """The events of a retriever whose lowered retrieval spans several nodes around an inner retriever's
    (``AutoMergingRetriever``: its own ``retrieve`` events hold its vector retriever's)."""

    def __init__(self, retriever: Any, query: Any, on_end: Callable[[], Any] | None = None) -> None:
        super().__init__(retriever, query)
        self.register(on_end)

    def end(self, nodes: list[Any]) -> list[Any]:
        self.ending()
        return super().end(nodes)

    def fail(self, exc: BaseException) -> None:
        self.ended()
        super().fail(exc)


class Synthesis(_SplitEvents):
    """``BaseSynthesizer.synthesize``'s events, split around the lowered synthesis."""

    def __init__(self, synth: Any, query: Any, nodes: Any = ()) -> None:
        from llama_index.core.instrumentation.events.synthesis import SynthesizeStartEvent

        self.synth, self.query, self.event = synth, query, None
        # synthesize()'s span; the rest of this node runs in it (get_response, the LLM calls)
        self.span = spans.of_method(synth, spans.sync_or_async("synthesize"), query, nodes)
        shim.active_span_id().set(self.span.id_)
        _dispatch(_SYNTH, lambda: SynthesizeStartEvent(query=query))

    def begin(self) -> None:
        """Nodes are there: the ``SYNTHESIZE`` callback event starts (stock emits none for zero nodes)."""
        self.event = _Event(self.synth.callback_manager, CBEventType.SYNTHESIZE,
                            {EventPayload.QUERY_STR: self.query.query_str})

    def end(self, response: Any) -> Any:
        from llama_index.core.instrumentation.events.synthesis import SynthesizeEndEvent

        if self.event is not None:
            self.event.end({EventPayload.RESPONSE: response})
        _dispatch(_SYNTH, lambda: SynthesizeEndEvent(query=self.query, response=response))
        return self.span.exit(response)

    def fail(self, exc: BaseException) -> None:
        super().fail(exc)
        self.span.drop(exc)


@contextlib.contextmanager
def get_response(query_str: str, chunks: list[str]) -> Iterator[None]:
    """``Refine.get_response``'s start/end events (compact and refine modes)."""
    from llama_index.core.instrumentation.events.synthesis import GetResponseEndEvent, GetResponseStartEvent

    _dispatch(_REFINE, lambda: GetResponseStartEvent(query_str=query_str, text_chunks=list(chunks)))
    yield
    _dispatch(_REFINE, lambda: GetResponseEndEvent())


@contextlib.contextmanager
def get_response_span(synth: Any, query_str: str, chunks: list[str]) -> Iterator[spans.Box]:
    """``synth.get_response(query_str, chunks)``'s span (``aget_response`` under ``aquery``)."""
    with spans.opened(synth, [spans.sync_or_async("get_response")], query_str, chunks) as box:
        yield box


@contextlib.contextmanager
def query_event(engine: Any, query_bundle: Any, lowered: bool = True) -> Iterator[Any]:
    """``RetrieverQueryEngine._query``'s ``QUERY`` callback event around the optimized run; the caller
    ends it with ``on_end(payload={RESPONSE: ...})``. A stock engine run as one opaque node emits its own."""
    if not lowered:
        yield _NoEvent()
        return
    with engine.callback_manager.event(CBEventType.QUERY,
                                       payload={EventPayload.QUERY_STR: query_bundle.query_str}) as event:
        yield event


class _NoEvent:
    def on_end(self, payload: Any = None) -> None:
        """Nothing to end: the stock engine emitted its own event."""


class QueryCall:
    """``BaseQueryEngine.query``'s events (for doc-QA, whose interceptor replaces ``query``)."""

    def __init__(self, engine: Any, query: Any) -> None:
        from llama_index.core.schema import QueryBundle

        self.engine, self.query = engine, query
        self.bundle = QueryBundle(query) if isinstance(query, str) else query

    @contextlib.contextmanager
    def span(self) -> Iterator[Callable[[Any], Any]]:
        """Yields ``done(response) -> response``, which the caller calls with the result."""
        from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent

        _QUERY.event(QueryStartEvent(query=self.query))
        out: list[Any] = []
        with self.engine.callback_manager.as_trace("query"):
            yield lambda response: out.append(response) or response
        if out:
            _QUERY.event(QueryEndEvent(query=self.bundle, response=out[0]))
