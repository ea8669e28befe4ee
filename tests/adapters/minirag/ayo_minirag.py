"""ayo_minirag: the Ayo adapter for MiniRAG, written only on the core's public path.

It follows ``docs/core-api.md``'s "A third adapter, in short" and passes the same conformance
suite as the LlamaIndex and LangChain adapters (``tests/adapters/test_conformance.py``), which is
the check that the core is enough to write an adapter with:

1. no shims: MiniRAG's public API is all it touches;
2. capture into the core's :class:`~ayo_core.modules.ModuleGraph` (the user's search stays
   ``Opaque``; the prompt is a ``Transform``; the model call an ``LLMCall``);
3. ``lower`` binds templates (no ``Node`` is built here): the search and the prompt call the
   user's objects, the model call goes through the shared LLM engine's scheduler;
4. one static shape: what differs per call (the root run, sync or async, the stream's sink) is a
   graph input (:class:`Call`), so the graph is built, linted and optimized once;
5. the facade reports MiniRAG's own events through the pipeline's :class:`Events`, as stock does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ayo_core.engines import get_llm_engine
from ayo_core.explain import Explanation
from ayo_core.graph import Graph
from ayo_core.modules import OPAQUE, BoundModule, ModuleGraph
from ayo_core.pipeline import OptimizedPipeline, Options
from ayo_core.runtime import bridge, shared_runtime
from ayo_core.runtime.chunks import drain_while_running
from ayo_core.templates import LLMCall, Opaque, Transform
from tests.adapters.minirag.framework import Pipeline


@dataclass(frozen=True)
class Call:
    """One call's own state, a graph input: its root run, whether it is async, where its chunks go."""

    root: str
    aio: bool
    sink: Callable[[str], None] | None = None


def optimize(pipeline: Pipeline, options: Options | None = None) -> OptimizedMiniRAG:
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"ayo_minirag.optimize() takes a MiniRAG Pipeline, got {type(pipeline).__name__}")
    return OptimizedMiniRAG(pipeline, options)


def capture(pipeline: Pipeline) -> ModuleGraph:
    return ModuleGraph(BoundModule("pipeline", "MiniRAG", obj=pipeline, children=[
        BoundModule("retrieve", OPAQUE, obj=pipeline.retrieve, reason="the user's own search function"),
        BoundModule("prompt", "Transform", obj=pipeline.prompt),
        BoundModule("generate", "LLMCall", obj=pipeline.generate, detail=pipeline.generate.model)]))


class OptimizedMiniRAG:
    """MiniRAG's ``run``/``arun``/``stream``/``astream``, each call one query of an optimized graph."""

    def __init__(self, pipeline: Pipeline, options: Options | None = None) -> None:
        self.stock, self.options = pipeline, options or Options()
        gen = pipeline.generate
        self._engines = {"llm": get_llm_engine(gen.base_url, model=gen.model, api_key=gen.api_key)}
        self._pipe: OptimizedPipeline[ModuleGraph] = OptimizedPipeline(
            lambda: capture(pipeline), self._lower, self.options, runtime=self._runtime, static=True,
            query_prefix="mini")

    def _runtime(self) -> Any:
        return shared_runtime(self._engines, self.options.policy)

    # -- lowering: templates bound to MiniRAG's own objects ------------------------------------------
    def _lower(self, modules: ModuleGraph, _call: Any) -> Graph:
        p, events = self.stock, self.stock.events

        async def search(question: str, call: Call) -> list[str]:
            run = events.start(call.root, "retrieve", question)
            try:
                if call.aio and p.retrieve.asearch is not None:
                    docs = await p.retrieve.asearch(question)
                else:
                    docs = await asyncio.to_thread(p.retrieve.search, question)
            except Exception as exc:
                events.error(run, "retrieve", exc)
                raise
            return events.end(run, "retrieve", docs)

        def prompt(question: str, docs: list[str], call: Call) -> list[dict[str, str]]:
            run = events.start(call.root, "prompt", {"question": question, "docs": docs})
            return events.end(run, "prompt", p.prompt.messages(question, docs))

        async def generate(ctx: Any, rendered: tuple[list[dict[str, str]], Call]) -> str:
            messages, call = rendered
            run = events.start(call.root, "generate", messages)
            result = await ctx.llm.chat(messages, max_tokens=p.generate.max_tokens, temperature=0.0,
                                        stream_cb=call.sink)
            return events.end(run, "generate", result.text)

        g = Graph(query_id="mini")
        g.input("question")
        g.input("call")
        docs = Opaque(search, "retrieve", reason="the user's own search function").build(
            g, "retrieve", {"question": "question", "call": "call"})
        messages = Transform(prompt, "prompt").build(g, "prompt", {"question": "question", "docs": docs, "call": "call"})
        # the call hook gets what render returns: the messages and the call they belong to
        answer = LLMCall(lambda messages, call: (messages, call), "generate", call=generate,
                         max_tokens=p.generate.max_tokens).build(g, "generate", {"messages": messages, "call": "call"})
        g.output(answer)
        return g

    # -- the calls: MiniRAG's root run around one query ----------------------------------------------
    async def _query(self, question: str, aio: bool, sink: Callable[[str], None] | None = None) -> str:
        events = self.stock.events
        root = events.start(None, "pipeline", question)
        try:
            answer = await self._pipe.run({"question": question, "call": Call(root, aio, sink)})
        except Exception as exc:
            events.error(root, "pipeline", exc)
            raise
        return events.end(root, "pipeline", answer)

    def run(self, question: str) -> str:
        return bridge.run_sync(self._query(question, aio=False))

    async def arun(self, question: str) -> str:
        return await bridge.arun(self._query(question, aio=True))

    def stream(self, question: str) -> Iterator[str]:
        async def chunks() -> AsyncIterator[str]:  # on the bridge loop: the query fills the queue there
            queue: asyncio.Queue = asyncio.Queue()
            async for chunk in drain_while_running(lambda: self._query(question, False, queue.put_nowait), queue):
                yield chunk

        yield from bridge.iter_sync(chunks())

    async def astream(self, question: str) -> AsyncIterator[str]:
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()

        def sink(chunk: str) -> None:  # called on the bridge loop: the chunk goes to this caller's loop
            loop.call_soon_threadsafe(queue.put_nowait, chunk)

        async for chunk in drain_while_running(lambda: bridge.arun(self._query(question, True, sink)), queue):
            yield chunk

    # -- introspection --------------------------------------------------------------------------------
    @property
    def last_trace(self) -> Any:
        return self._pipe.last_trace

    def explain(self) -> Explanation:
        modules = self._pipe.plan
        return self._pipe.explain("Ayo plan for a MiniRAG pipeline",
                                  modules=[(m.name, m.kind) for m in modules.lowered()],
                                  opaque=[(m.name, m.reason) for m in modules.opaque()],
                                  module_lines=modules.lines())
