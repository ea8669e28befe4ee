"""Chat engines and workflows written the way users write them (from a sweep of programs the adapter
was not built against), stock vs optimized on the real server: memories that truncate, a fan-out
collected with ``collect_events`` over several workers, a streaming query engine inside a step."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step
from llama_index.llms.openai_like import OpenAILike

import ayo_llamaindex

pytestmark = pytest.mark.llm


def make_llm(url: str, max_tokens: int = 24) -> OpenAILike:
    return OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                      temperature=0.0, max_tokens=max_tokens, context_window=8192)


def memory_of(engine: Any) -> list[tuple[str, str]]:
    return [(str(m.role), str(m.content)) for m in engine.chat_history]


def converse(engine: Any, turns: list[str], stream: bool = False) -> list[Any]:
    out: list[Any] = []
    for turn in turns:
        if stream:
            response = engine.stream_chat(turn)
            text = "".join(response.response_gen)
        else:
            response = engine.chat(turn)
            text = str(response)
        out.append((text, [n.node.node_id for n in response.source_nodes], memory_of(engine)))
    return out


def test_memory_with_a_small_token_limit_truncates_as_stock(llm_url: str, index: Any) -> None:
    from llama_index.core.memory import ChatMemoryBuffer, Memory

    turns = ["What is json?", "And pickle?", "Which one is safer?"]

    def cpc() -> Any:
        return index.as_chat_engine(chat_mode="condense_plus_context", llm=make_llm(llm_url), similarity_top_k=2,
                                    memory=Memory.from_defaults(session_id="s1", token_limit=120))

    def context() -> Any:
        return index.as_chat_engine(chat_mode="context", llm=make_llm(llm_url), similarity_top_k=1,
                                    memory=ChatMemoryBuffer.from_defaults(token_limit=80))

    for build, stream in ((cpc, False), (context, True)):
        want = converse(build(), turns, stream)
        assert converse(ayo_llamaindex.optimize(build()), turns, stream) == want
    # chat_history keeps every turn; what the token limit drops is the history the prompts get
    assert len(want[-1][2]) == 2 * len(turns)


def test_chat_with_explicit_history_and_custom_prompts(llm_url: str, index: Any) -> None:
    from llama_index.core.chat_engine import CondensePlusContextChatEngine

    history = [ChatMessage(role="user", content="Hi"), ChatMessage(role="assistant", content="Hello! Ask me.")]

    def build() -> Any:
        return CondensePlusContextChatEngine.from_defaults(
            retriever=index.as_retriever(similarity_top_k=2), llm=make_llm(llm_url),
            system_prompt="You are a terse Python helper.",
            context_prompt="Use these notes:\n{context_str}\nAnswer briefly.")

    def run(engine: Any) -> Any:
        first = engine.chat("What is csv?", chat_history=history)
        return str(first), memory_of(engine), converse(engine, ["Who uses it?"])

    assert run(ayo_llamaindex.optimize(build())) == run(build())


class Question(Event):
    q: str


class Answer(Event):
    a: str


class FanOut(Workflow):
    """Sends one event per question, answers them on three workers, collects all answers."""

    def __init__(self, llm: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.llm = llm

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Question | None:
        await ctx.store.set("n", len(ev.questions))
        for q in ev.questions:
            ctx.send_event(Question(q=q))
        return None

    @step(num_workers=3)
    async def answer(self, ev: Question) -> Answer:
        return Answer(a=str(await self.llm.acomplete(ev.q)))

    @step
    async def gather(self, ctx: Context, ev: Answer) -> StopEvent | None:
        got = ctx.collect_events(ev, [Answer] * await ctx.store.get("n"))
        if got is None:
            return None
        return StopEvent(result=sorted(e.a for e in got))


def test_fan_out_collected_over_several_workers(llm_url: str) -> None:
    questions = ["What is json?", "What is csv?", "What is heapq?"]

    async def run(workflow: Any) -> Any:
        return await workflow.run(questions=questions)

    want = asyncio.run(run(FanOut(make_llm(llm_url), timeout=300)))
    fast = ayo_llamaindex.optimize(FanOut(make_llm(llm_url), timeout=300))
    assert asyncio.run(run(fast)) == want and len(want) == 3
    assert sum(1 for c in fast.last_run.calls if c.step == "answer") == 3


def test_a_streaming_query_engine_inside_a_step(llm_url: str, index: Any) -> None:
    qe = index.as_query_engine(llm=make_llm(llm_url, 32), similarity_top_k=2, streaming=True)

    class RAG(Workflow):
        @step
        async def go(self, ev: StartEvent) -> StopEvent:
            r = await qe.aquery(ev.query)
            text = "".join([t async for t in r.async_response_gen()])
            return StopEvent(result=(text, [n.node.node_id for n in r.source_nodes]))

    async def run(workflow: Any) -> Any:
        return await workflow.run(query="What does heapq implement?")

    want = asyncio.run(run(RAG(timeout=300)))
    assert asyncio.run(run(ayo_llamaindex.optimize(RAG(timeout=300)))) == want and want[0]
