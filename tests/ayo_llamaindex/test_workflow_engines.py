"""Query engines called inside the steps of an optimized Workflow run as Ayo's lowered graph (real server,
real embedding model): same responses, source nodes, events and ctx state as stock."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import Response
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import QueryBundle
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

import ayo_llamaindex
from tests.ayo_llamaindex.li_helpers import EventNames, assert_same
from tests.ayo_llamaindex.test_workflows import make_llm

QUESTIONS = ["Explain in detail, with an example, how to turn Python objects into JSON.",
             "Explain in detail, with an example, how a list can stay sorted.",
             "Explain in detail, with an example, how to read a spreadsheet file.",
             "Explain in detail, with an example, how to serialize objects to bytes.",
             "Explain in detail, with an example, what implements a priority queue."]


class Question(Event):
    question: str


class Answered(Event):
    question: str
    response: Any


class AskEach(Workflow):
    """One event per question, answered by a query engine on 4 workers (built once, or per call), then joined."""

    def __init__(self, index: VectorStoreIndex, llm: Any, per_call: bool = False, callbacks: Any = None,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.index, self.llm, self.per_call = index, llm, per_call
        self.engine = index.as_query_engine(llm=llm, similarity_top_k=2)
        if callbacks is not None:  # the engine's, its retriever's, its synthesizer's and its model's events
            retriever = index.as_retriever(similarity_top_k=2)
            retriever.callback_manager = llm.callback_manager = callbacks
            self.engine = RetrieverQueryEngine.from_args(retriever, llm=llm, callback_manager=callbacks)

    @step
    async def split(self, ctx: Context, ev: StartEvent) -> Question | None:
        await ctx.store.set("expected", len(ev.questions))
        for q in ev.questions:
            ctx.send_event(Question(question=q))
        return None

    @step(num_workers=4)
    async def answer(self, ev: Question) -> Answered:
        engine = self.index.as_query_engine(llm=self.llm, similarity_top_k=2) if self.per_call else self.engine
        return Answered(question=ev.question, response=await engine.aquery(ev.question))

    @step
    async def join(self, ctx: Context, ev: Answered) -> StopEvent | None:
        answers = ctx.collect_events(ev, [Answered] * await ctx.store.get("expected"))
        if answers is None:
            return None
        await ctx.store.set("answered", sorted(a.question for a in answers))
        return StopEvent(result={a.question: a.response for a in answers})


def rounded(value: Any) -> Any:
    """Floats to 5 places: a query embedded in a batch differs from a lone one by float32 rounding
    (``ayo_core/engines/embedding.py``), so source-node scores agree to 5 places, not to the last bit."""
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def describe(event: Any) -> tuple[str, str]:
    """An event's type and every field (the responses in a ``StopEvent`` with their source nodes)."""
    return type(event).__name__, json.dumps(rounded(event.model_dump()), sort_keys=True, default=str)


async def run_once(workflow: Any, **kwargs: Any) -> tuple[Any, list[tuple[str, str]], dict[str, Any]]:
    """The run's result, its event stream field by field (each event's type and fields), its ctx state."""
    handler = workflow.run(**kwargs)
    names = [describe(e) async for e in handler.stream_events()]
    result = await handler
    return result, names, (await handler.ctx.store.get_state()).model_dump()


def test_query_engine_calls_in_steps_run_lowered_and_match_stock(llm_url: str, index: VectorStoreIndex) -> None:
    async def main() -> tuple[Any, Any, Any]:
        stock = await run_once(AskEach(index, make_llm(llm_url), timeout=300), questions=QUESTIONS)
        fast = ayo_llamaindex.optimize(AskEach(index, make_llm(llm_url), timeout=300))
        return stock, await run_once(fast, questions=QUESTIONS), fast

    (want, want_names, want_state), (got, names, state), fast = asyncio.run(main())
    assert sorted(got) == sorted(want) == sorted(QUESTIONS)
    for q in QUESTIONS:
        assert_same(want[q], got[q])
    assert sum(len(str(got[q]).split()) > 30 for q in QUESTIONS) >= 4  # 64-token answers, not a trivial match
    assert sorted(names) == sorted(want_names) and names[-1] == want_names[-1] and state == want_state
    # the engine's queries ran as Ayo's graph: its embedding and model calls went to Ayo's engines
    tool = fast.query_engines.lowered(fast.stock.engine)
    assert {c.engine for c in tool.last_trace.engine_calls} == {"embed", "llm"}
    assert fast.query_engines.served == {"answer": len(QUESTIONS)}
    assert ("step:answer", "QueryEngine") in [(m.name, m.template) for m in fast.explain().modules]


def test_an_engine_built_inside_the_step_is_lowered_too(llm_url: str, index: VectorStoreIndex) -> None:
    async def main() -> tuple[Any, Any, Any]:
        stock = await run_once(AskEach(index, make_llm(llm_url, 16), per_call=True, timeout=300), questions=QUESTIONS[:3])
        fast = ayo_llamaindex.optimize(AskEach(index, make_llm(llm_url, 16), per_call=True, timeout=300))
        return stock, await run_once(fast, questions=QUESTIONS[:3]), fast

    (want, _, _), (got, _, _), fast = asyncio.run(main())
    for q in QUESTIONS[:3]:
        assert_same(want[q], got[q])
    assert fast.query_engines.served == {"answer": 3}


class Echo(BaseQueryEngine):
    """A user's own engine (its own ``_query``/``_aquery`` under stock ``aquery``): nothing Ayo lowers, so it
    runs as stock inside the step."""

    def __init__(self) -> None:
        super().__init__(callback_manager=None)

    def _get_prompt_modules(self) -> dict:
        return {}

    def _query(self, query_bundle: QueryBundle) -> Response:
        return Response(response=f"echo: {query_bundle.query_str}")

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        return self._query(query_bundle)


class AskCustom(Workflow):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.engine = Echo()

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=str(await self.engine.aquery(ev.question)))


def test_an_engine_ayo_does_not_lower_runs_as_stock_and_explain_says_why() -> None:
    fast = ayo_llamaindex.optimize(AskCustom(timeout=30))
    got = asyncio.run(run_once(fast, question="hi"))
    assert got[0] == asyncio.run(run_once(AskCustom(timeout=30), question="hi"))[0] == "echo: hi"
    assert fast.query_engines.served == {} and "Echo" in fast.query_engines.not_lowered
    assert "Echo called in a step ran as stock" in str(fast.explain())


def test_events_of_a_step_query_match_stock(llm_url: str, index: VectorStoreIndex) -> None:
    # what token counters, debuggers and tracers read: the callback events of the engine's modules and the
    # instrumentation events (query, retrieval, embedding, synthesis, model), as many of each kind as stock
    from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler

    def with_debug() -> tuple[AskEach, LlamaDebugHandler]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        return AskEach(index, make_llm(llm_url, 16), callbacks=CallbackManager([debug]), timeout=300), debug

    async def observed(workflow: Any, debug: LlamaDebugHandler) -> tuple[Counter, Counter]:
        recorder = EventNames(names=[])
        dispatcher = get_dispatcher()
        dispatcher.add_event_handler(recorder)
        try:
            await run_once(workflow, questions=QUESTIONS[:2])
        finally:
            dispatcher.event_handlers.remove(recorder)
        return Counter(e.event_type for e in debug.get_events()), Counter(recorder.names)

    async def main() -> tuple[Any, Any]:
        stock = await observed(*with_debug())
        fast_wf, debug = with_debug()
        return stock, await observed(ayo_llamaindex.optimize(fast_wf), debug)

    (want_cb, want_inst), (got_cb, got_inst) = asyncio.run(main())
    assert got_cb == want_cb and want_cb  # the engine's QUERY and RETRIEVE callback events
    assert got_inst == want_inst
    assert {"QueryStartEvent", "RetrievalEndEvent", "LLMChatEndEvent"} <= set(want_inst)


# -- retrievers awaited in steps (LlamaIndex's RAG workflow example: retrieve, then synthesize) --------------

class Retrieved(Event):
    query: str
    nodes: list


class RAGWorkflow(Workflow):
    def __init__(self, retriever: Any, llm: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.retriever, self.llm = retriever, llm

    @step
    async def retrieve(self, ctx: Context, ev: StartEvent) -> Retrieved:
        nodes = await self.retriever.aretrieve(ev.query)
        await ctx.store.set("retrieved", [n.node.node_id for n in nodes])
        return Retrieved(query=ev.query, nodes=nodes)

    @step
    async def synthesize(self, ev: Retrieved) -> StopEvent:
        from llama_index.core.response_synthesizers import CompactAndRefine

        return StopEvent(result=await CompactAndRefine(llm=self.llm).asynthesize(ev.query, nodes=ev.nodes))


def fusion_retriever(index: VectorStoreIndex, llm: Any) -> Any:
    from llama_index.core.retrievers import QueryFusionRetriever

    return QueryFusionRetriever([index.as_retriever(similarity_top_k=2)], llm=llm, num_queries=3,
                                similarity_top_k=3, use_async=True)


@pytest.mark.parametrize("kind", ["vector", pytest.param("fusion", marks=pytest.mark.long)])
def test_retrievals_in_steps_run_lowered_and_match_stock(llm_url: str, index: VectorStoreIndex, kind: str) -> None:
    def make() -> RAGWorkflow:
        llm = make_llm(llm_url)
        retriever = index.as_retriever(similarity_top_k=2) if kind == "vector" else fusion_retriever(index, llm)
        return RAGWorkflow(retriever, llm, timeout=300)

    async def main() -> tuple[list, list, Any]:
        stock, fast = make(), ayo_llamaindex.optimize(make())
        want = [await run_once(stock, query=q) for q in QUESTIONS]
        got = [await run_once(fast, query=q) for q in QUESTIONS]
        return want, got, fast

    want, got, fast = asyncio.run(main())
    for (w, w_names, w_state), (g, g_names, g_state) in zip(want, got, strict=True):
        assert_same(w, g)
        assert g_names == w_names and g_state == w_state
    assert sum(len(str(g[0]).split()) > 30 for g in got) >= 4  # 64-token answers, not a trivial match
    assert fast.query_engines.served == {"retrieve": len(QUESTIONS)}
    lowered = fast.query_engines.lowered_retriever(fast.stock.retriever)
    engines = {c.engine for c in lowered.last_trace.engine_calls}
    assert engines == ({"embed"} if kind == "vector" else {"embed", "llm"})  # the fusion's query-gen decode too
    assert ("step:retrieve", "QueryEngine") in [(m.name, m.template) for m in fast.explain().modules]


def test_events_of_a_step_retrieval_match_stock(llm_url: str, index: VectorStoreIndex) -> None:
    from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler

    async def observed(optimized: bool) -> tuple[Counter, Counter]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        retriever = index.as_retriever(similarity_top_k=2)
        retriever.callback_manager = CallbackManager([debug])
        workflow = RAGWorkflow(retriever, make_llm(llm_url, 8), timeout=300)
        recorder = EventNames(names=[])
        get_dispatcher().add_event_handler(recorder)
        try:
            await run_once(ayo_llamaindex.optimize(workflow) if optimized else workflow, query=QUESTIONS[0])
        finally:
            get_dispatcher().event_handlers.remove(recorder)
        return Counter(e.event_type for e in debug.get_events()), Counter(recorder.names)

    want, got = asyncio.run(observed(False)), asyncio.run(observed(True))
    assert got == want
    assert {"RetrievalStartEvent", "RetrievalEndEvent", "EmbeddingEndEvent"} <= set(want[1]) and want[0]


# -- an agent's QueryEngineTool: the tool's query engine runs lowered inside the agent's step ---------------

def test_an_agents_query_engine_tool_runs_lowered_and_matches_stock(tools_llm_url: str,
                                                                    index: VectorStoreIndex) -> None:
    from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
    from llama_index.core.tools import QueryEngineTool

    from tests.ayo_llamaindex.test_agents import make_llm as agent_llm
    from tests.ayo_llamaindex.test_agents import run_agent

    def agent() -> FunctionAgent:
        engine = index.as_query_engine(llm=make_llm(tools_llm_url, 32), similarity_top_k=2)
        tool = QueryEngineTool.from_defaults(engine, name="python_docs",
                                             description="Answers questions about Python's standard library.")
        # the 135M model writes no tool call on its own: the first is forced, as a user with a small model would
        return FunctionAgent(tools=[tool], llm=agent_llm(tools_llm_url, 32, tools=True),
                             initial_tool_choice="python_docs")

    async def main() -> tuple[list[tuple[Any, Any]], Any]:
        fast = ayo_llamaindex.optimize(agent())
        pairs = [(await run_agent(agent(), q), await run_agent(fast, q)) for q in QUESTIONS[:2]]
        return pairs, fast

    pairs, fast = asyncio.run(main())
    for want, got in pairs:
        assert got == want  # answer, every event (the tool's output included), memory
        assert [e for name, e in want[1] if name == ToolCallResult.__name__]
    assert sum(fast.query_engines.served.values()) == len(QUESTIONS[:2])  # each tool call ran the lowered engine


def test_a_retriever_whose_capture_fails_runs_as_stock(index: VectorStoreIndex, monkeypatch: Any) -> None:
    from ayo_llamaindex import workflow_engines

    def broken(retriever: Any) -> Any:
        raise AttributeError("a private attribute moved")

    class RetrieveOnly(Workflow):
        retriever = index.as_retriever(similarity_top_k=2)

        @step
        async def go(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result=[n.node.node_id for n in await self.retriever.aretrieve(ev.query)])

    monkeypatch.setattr(workflow_engines, "capture_retriever", broken)
    fast = ayo_llamaindex.optimize(RetrieveOnly(timeout=30))

    async def main() -> tuple[Any, Any]:
        return await RetrieveOnly(timeout=30).run(query=QUESTIONS[0]), await fast.run(query=QUESTIONS[0])

    want, got = asyncio.run(main())
    assert got == want and len(want) == 2
    assert fast.query_engines.served == {}
    assert "capture failed: a private attribute moved" in fast.query_engines.not_lowered["VectorIndexRetriever"]
