"""What a tracer builds (LangChain's own ``BaseTracer``, as LangSmith builds its run trees) and what
``with_listeners`` hands its listeners, for an optimized chain against stock's, field by field: each
run's name, type, parent (by path), tags, metadata, inputs, outputs, error and the kinds of its
events in order (a chat model's one ``new_token`` per streamed token included), under ``invoke``,
``ainvoke`` and ``stream``. Run ids and times differ (random and clock in stock too).

Offline: the tests' fake OpenAI server, reached through the model's own client on both sides
(deterministic answers, the same stream chunks).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run

import ayo_langchain
from tests.ayo_langchain.lc_helpers import FakeOpenAIServer, fake_chat
from tests.ayo_langchain.test_event_stream import (
    PROMPT,
    _plain,
    assign_first,
    dict_first,
    fetch,
    fmt,
    nested,
    routing,
)


class TreeTracer(BaseTracer):
    """Keeps every finished root run (the tree LangSmith would upload)."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)


def tree(run: Run, parent: tuple[str, ...] = ()) -> list[tuple]:
    """The run and its descendants, each as (path, type, tags, metadata, inputs, outputs, error, event kinds);
    siblings in start order (the order the tracer records them in stock too)."""
    path = (*parent, run.name)
    row = (path, run.run_type, tuple(run.tags or ()), _plain(sorted((run.extra or {}).get("metadata", {}).items())),
           _plain(run.inputs), _plain(run.outputs), run.error, tuple(e["name"] for e in run.events))
    rows = [row]
    for child in sorted(run.child_runs, key=lambda r: r.dotted_order):
        rows += tree(child, path)
    return rows


def traced(chain: Any, x: Any, how: str) -> list[tuple]:
    tracer = TreeTracer()
    config = {"callbacks": [tracer], "tags": ["user"], "metadata": {"who": "me"}}
    if how == "invoke":
        chain.invoke(x, config)
    elif how == "ainvoke":
        asyncio.run(chain.ainvoke(x, config))
    else:
        list(chain.stream(x, config))
    assert len(tracer.roots) == 1
    return tree(tracer.roots[0])


SHAPES = {"dict_first": dict_first, "assign_first": assign_first, "nested": nested, "routing": routing}


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_tracer_run_trees_are_stocks(shape: str, how: str, fake_server: FakeOpenAIServer) -> None:
    chain, x = SHAPES[shape](fake_server)
    want = traced(chain, x, how)
    got = traced(ayo_langchain.optimize(chain), x, how)
    assert [r[0] for r in got] == [r[0] for r in want]  # the same runs under the same parents
    assert got == want


def test_a_failing_step_ends_the_tree_as_stocks(fake_server: FakeOpenAIServer) -> None:
    def boom(_: Any) -> str:
        raise ValueError("no documents")

    chain = {"context": RunnableLambda(boom), "question": RunnablePassthrough()} | PROMPT | fake_chat(fake_server) \
        | StrOutputParser()

    def failed(runnable: Any) -> list[tuple]:
        tracer = TreeTracer()
        with pytest.raises(ValueError, match="no documents"):
            runnable.invoke("q", {"callbacks": [tracer]})
        return [(r[0], r[1], r[6].splitlines()[0] if r[6] else None) for r in tree(tracer.roots[0])]

    assert failed(ayo_langchain.optimize(chain)) == failed(chain)


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_a_failing_routed_runnable_ends_the_routing_lambdas_run_as_stocks(how: str,
                                                                          fake_server: FakeOpenAIServer) -> None:
    def boom(_: Any) -> str:
        raise ValueError("no documents")

    routed = PROMPT | fake_chat(fake_server) | StrOutputParser() | RunnableLambda(boom)
    chain = {"context": RunnableLambda(fetch) | fmt, "question": RunnablePassthrough()} \
        | RunnableLambda(lambda d: routed)

    def failed(runnable: Any) -> list[tuple]:
        tracer = TreeTracer()
        with pytest.raises(ValueError, match="no documents"):
            if how == "invoke":
                runnable.invoke("q", {"callbacks": [tracer]})
            else:
                asyncio.run(runnable.ainvoke("q", {"callbacks": [tracer]}))
        return [(r[0], r[1], r[6].splitlines()[0] if r[6] else None) for r in tree(tracer.roots[0])]

    want = failed(chain)
    assert any(row[0][-1] == "RunnableLambda" and row[2] for row in want)  # the lambda's run ends with the error
    assert failed(ayo_langchain.optimize(chain)) == want


def test_with_listeners_get_stocks_runs(fake_server: FakeOpenAIServer) -> None:
    """``with_listeners`` on the whole chain and on a step inside it: each listener sees the same run."""
    server = fake_server  # Ayo's engine talks to it too: the model's requests go through the engine

    def chain_with_listeners(seen: list[tuple]) -> Any:
        def note(kind: str) -> Any:
            return lambda run: seen.append((kind, run.name, _plain(run.inputs), _plain(run.outputs)))

        context = (RunnableLambda(fetch) | fmt).with_listeners(on_start=note("inner start"), on_end=note("inner end"))
        chain = {"context": context, "question": RunnablePassthrough()} | PROMPT | fake_chat(server) \
            | StrOutputParser()
        return chain.with_listeners(on_start=note("start"), on_end=note("end"))

    want: list[tuple] = []
    chain_with_listeners(want).invoke("what is x?")
    got: list[tuple] = []
    ayo_langchain.optimize(chain_with_listeners(got)).invoke("what is x?")
    assert got == want and len(want) == 4


def test_many_routing_lambdas_at_once_under_a_sync_batch_all_finish() -> None:
    """Under ``invoke``/``batch`` no worker thread waits for a routed runnable (whose own sync steps
    need worker threads): more routed calls than Ayo's loop has workers all finish, as stock's."""
    from ayo_core.runtime.bridge import WORKERS

    routed = RunnableLambda(str.upper) | RunnableLambda(lambda s: f"{s}!")
    chain = RunnableLambda(str.strip) | RunnableLambda(lambda s: routed)
    inputs = [f" q{i} " for i in range(WORKERS + 8)]
    assert ayo_langchain.optimize(chain).batch(inputs) == chain.batch(inputs)
