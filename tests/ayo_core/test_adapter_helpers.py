"""The framework-independent helpers adapters share (moved out of ayo_llamaindex, issue 12)."""

from __future__ import annotations

import asyncio

import pytest

from ayo_core.engines.llm_client import LLMEngineError
from ayo_core.engines.openai_request import LLMRequest, json_body, request_prefix, stand_in_renders, with_outer_retries
from ayo_core.introspect import overrides_reason
from ayo_core.runtime.execute import is_async_callable
from ayo_core.runtime.pending import PendingWrites
from ayo_core.runtime.pipelined import PipelinedParts
from ayo_core.runtime.recording import emit, recording, replay


class Base:
    def a(self) -> int:
        return 1

    def b(self) -> int:
        return 2


class Sub(Base):
    def b(self) -> int:
        return 3


class AsyncCall:
    async def __call__(self) -> None:
        return None


class InheritsAsyncCall(AsyncCall):
    pass


def test_overrides_reason_names_the_class_and_methods() -> None:
    assert overrides_reason(Sub(), Base, ("a", "b")) == "Sub overrides b"
    assert overrides_reason(Base(), Base, ("a", "b")) is None


def test_is_async_callable_sees_an_inherited_async_call() -> None:
    assert is_async_callable(InheritsAsyncCall()) and not is_async_callable(Base())


def test_pending_writes_keep_order_per_target() -> None:
    pending, store, other = PendingWrites(), object(), object()
    assert pending.add(store, "w1") is None and pending.add(store, "w2") == "w1"
    assert pending.add(other, "x") is None and store in pending
    pending.remove(store, "w1")
    pending.remove(store, "w2")
    assert store not in pending and pending.of(store) == [] and pending.of(other) == ["x"]


async def test_recording_defers_emissions_until_replay() -> None:
    seen: list[int] = []
    with recording() as records:
        emit(lambda: seen.append(1))
    assert seen == []
    emit(lambda: seen.append(2))
    await replay(records)
    assert seen == [2, 1]


async def test_pipelined_parts_start_early_and_reconcile() -> None:
    started: list[str] = []

    def start(part: str) -> list[asyncio.Task]:
        started.append(part)
        return [asyncio.ensure_future(asyncio.sleep(0, result=part))]

    pipe = PipelinedParts(lambda text: text.split("\n")[:-1], start)
    pipe.on_text("a\nb")
    pipe.on_text("a\nb\nc")
    tasks = pipe.reconcile(["a", "x"])
    assert started == ["a", "b", "x"] and [await t[0] for t in tasks] == ["a", "x"]


def test_request_prefix_and_body() -> None:
    def render(value: str) -> LLMRequest:
        return LLMRequest("completion", {"prompt": f"Context: {value}"})

    assert request_prefix(render) == {"prompt": "Context: "}
    assert len(stand_in_renders(render) or []) == 2
    assert request_prefix(lambda v: LLMRequest("completion", {"prompt": "no late value"})) is None
    assert json_body({"temperature": 0, "timeout": 3, "stream": True, "extra_body": {"top_k": 1}}) == {
        "temperature": 0, "top_k": 1}


async def test_outer_retries_stop_at_the_attempts_and_raise_the_mapped_error() -> None:
    calls: list[int] = []

    async def call(stream_cb: object) -> str:
        calls.append(1)
        raise LLMEngineError("down", "http://127.0.0.1:1/v1")

    with pytest.raises(KeyError):
        await with_outer_retries(call, attempts=1, stream_cb=None, to_error=lambda exc: KeyError(str(exc)),
                                 retryable=lambda error: True, label="llm")
    assert calls == [1]
