"""ayo_llamaindex.optimize() on LlamaIndex Workflows (package `workflows`) and their ecosystem's objects."""

from __future__ import annotations

import logging

import pytest

import ayo_llamaindex


@pytest.mark.parametrize("make", [
    lambda: __import__("workflows.events", fromlist=["StopEvent"]).StopEvent(result="done"),
    lambda: __import__("llama_index_instrumentation", fromlist=["get_dispatcher"]).get_dispatcher("ayo-test"),
], ids=["workflows.StopEvent", "llama_index_instrumentation.Dispatcher"])
def test_ecosystem_objects_come_back_unchanged_with_a_warning(make, caplog) -> None:
    # objects of LlamaIndex's own packages outside llama_index.* (workflows, instrumentation) are never refused
    target = make()
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
        assert ayo_llamaindex.optimize(target) is target
    assert f"{type(target).__name__} is returned unchanged" in caplog.text


def test_a_plain_object_is_still_refused() -> None:
    with pytest.raises(TypeError, match="takes a LlamaIndex query engine or a function"):
        ayo_llamaindex.optimize(42)


# -- equivalence on the real server ----------------------------------------------------------------
# Stock and Ayo run the same workflow class (two instances) against the same vLLM server, greedy.
# Events of steps that run concurrently (num_workers > 1) reach the stream in the order their model
# calls finish, in stock as in Ayo: there the test compares them as a multiset and checks the order
# of everything that is ordered by data.

import asyncio  # noqa: E402
from typing import Any  # noqa: E402

from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step  # noqa: E402

QUESTIONS = ["What is a Python list?", "How does a hash map work?", "What is recursion?",
             "Why use a virtual environment?", "What does a compiler do?"]
LONG = 64  # output tokens of the equivalence runs


def make_llm(url: str, max_tokens: int = LONG) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                      temperature=0.0, max_tokens=max_tokens)


class Question(Event):
    question: str


class Answer(Event):
    question: str
    answer: str


class Progress(Event):
    note: str


class FanOut(Workflow):
    """One step emits an event per question; answers run on 4 workers; a collector waits for all."""

    def __init__(self, llm: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.llm = llm

    @step
    async def split(self, ctx: Context, ev: StartEvent) -> Question | None:
        await ctx.store.set("expected", len(ev.questions))
        for q in ev.questions:
            ctx.send_event(Question(question=q))
        return None

    @step(num_workers=4)
    async def answer(self, ctx: Context, ev: Question) -> Answer:
        response = await self.llm.achat([ChatMessage(role="user", content=ev.question)])
        ctx.write_event_to_stream(Progress(note=ev.question))
        return Answer(question=ev.question, answer=response.message.content)

    @step
    async def join(self, ctx: Context, ev: Answer) -> StopEvent | None:
        answers = ctx.collect_events(ev, [Answer] * await ctx.store.get("expected"))
        if answers is None:
            return None
        await ctx.store.set("answers", {a.question: a.answer for a in answers})
        return StopEvent(result={a.question: a.answer for a in answers})


class Kind(Event):
    question: str
    label: str


class Branching(Workflow):
    """The model's own output decides the branch: a short classification, then one of two answer steps
    (one streams its tokens as events, one completes)."""

    def __init__(self, llm: Any, classifier: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.llm, self.classifier = llm, classifier

    @step
    async def classify(self, ctx: Context, ev: StartEvent) -> Kind:
        label = (await self.classifier.acomplete(f"Classify the topic in one word: {ev.question}")).text
        await ctx.store.set("label", label)
        return Kind(question=ev.question, label=label)

    @step
    async def route(self, ev: Kind) -> Question | StopEvent:
        if ev.label.startswith("The"):  # the model did not name a topic: answer with its label
            return StopEvent(result=f"no topic: {ev.label}")
        return Question(question=ev.question)

    @step
    async def answer(self, ctx: Context, ev: Question) -> StopEvent:
        text = ""
        async for chunk in await self.llm.astream_chat([ChatMessage(role="user", content=ev.question)]):
            ctx.write_event_to_stream(Progress(note=chunk.delta or ""))
            text += chunk.delta or ""
        await ctx.store.set("answer", text)
        return StopEvent(result=text)


class Failing(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Question:
        return Question(question=ev.question)

    @step
    async def second(self, ev: Question) -> StopEvent:
        raise ValueError(f"cannot answer {ev.question!r}")


def describe(event: Any) -> tuple[str, str]:
    """An event's type and fields (dict keys sorted: a collector's dict follows completion order)."""
    import json

    fields = event.model_dump() if hasattr(event, "model_dump") else str(event)
    if isinstance(fields, dict):
        fields.pop("elapsed_seconds", None)  # wall time of the failed run: differs between any two runs
    return type(event).__name__, json.dumps(fields, sort_keys=True, default=str)


def merge_progress(run: tuple[Any, list[tuple[str, str]], Any]) -> tuple[Any, list[tuple[str, str]], Any]:
    """Consecutive ``Progress`` events (streamed tokens) as one: how many tokens a server chunk carries
    depends on load (vLLM merges outputs its client has not read yet), in stock as in Ayo."""
    import json

    value, events, state = run
    merged: list[tuple[str, str]] = []
    for name, fields in events:
        if name == "Progress" and merged and merged[-1][0] == "Progress":
            note = json.loads(merged[-1][1])["note"] + json.loads(fields)["note"]
            merged[-1] = (name, json.dumps({"note": note}))
        else:
            merged.append((name, fields))
    return value, merged, state


async def run_once(workflow: Any, **kwargs: Any) -> tuple[Any, list[tuple[str, Any]], dict[str, Any]]:
    handler = workflow.run(**kwargs)
    events = [describe(e) async for e in handler.stream_events()]
    result = await handler
    state = (await handler.ctx.store.get_state()).model_dump()
    return result, events, state


@pytest.fixture(scope="module")
def url(llm_url: str) -> str:
    return llm_url


def test_fan_out_collect_matches_stock(url: str) -> None:
    async def main() -> tuple[Any, Any, Any]:
        stock = FanOut(make_llm(url), timeout=300)
        fast = ayo_llamaindex.optimize(FanOut(make_llm(url), timeout=300))
        assert isinstance(fast, ayo_llamaindex.OptimizedWorkflow)
        want = await run_once(stock, questions=QUESTIONS)
        got = await run_once(fast, questions=QUESTIONS)
        trace = await fast.last_run.finished()
        return want, got, (fast, trace)

    (want_value, want_events, want_state), (value, events, state), (fast, trace) = asyncio.run(main())
    assert value == want_value and state == want_state
    assert all(len(a.split()) > 20 for a in value.values())  # long answers (64 tokens), not a trivial match
    assert sorted(events) == sorted(want_events) and events[-1] == want_events[-1]
    # the graph grew by one node per step invocation, and the five model calls went to Ayo's engine
    answer_nodes = {n for n in trace.graph.nodes if n.startswith("step.answer.")}
    assert len(answer_nodes) == len(QUESTIONS)
    assert sorted(c.node for c in trace.engine_calls if c.method == "chat") == sorted(answer_nodes)
    assert len([n for n in trace.graph.nodes if n.startswith("step.join.")]) >= len(QUESTIONS)
    explained = fast.explain()
    assert ("step:answer", "LLMCall") in [(m.name, m.template) for m in explained.modules]
    assert "step:split" in [o.name for o in explained.opaque]


def test_run_time_branch_matches_stock_on_five_questions(url: str) -> None:
    questions = [*QUESTIONS[:4], "What is the capital of France?"]

    async def main() -> list[tuple[Any, Any]]:
        stock = Branching(make_llm(url), make_llm(url, max_tokens=4), timeout=300)
        fast = ayo_llamaindex.optimize(Branching(make_llm(url), make_llm(url, max_tokens=4), timeout=300))
        out = []
        for q in questions:
            out.append((await run_once(stock, question=q), await run_once(fast, question=q)))
        return out

    pairs = asyncio.run(main())
    for want, got in pairs:
        assert merge_progress(got) == merge_progress(want)  # value, every event in order (the streamed text), ctx state
    streamed = sum(len(want[1]) > 10 for want, _ in pairs)
    assert 1 <= streamed < len(pairs), "the model's labels sent every question down one branch"


def test_a_failing_step_raises_what_stock_raises(url: str) -> None:
    async def outcome(workflow: Any) -> tuple[type, str, list]:
        handler = workflow.run(question="why?")
        events = [describe(e) async for e in handler.stream_events()]
        with pytest.raises(Exception) as err:  # noqa: PT011 - compared with stock's below
            await handler
        return type(err.value), str(err.value), events

    async def main() -> tuple[Any, Any]:
        return await outcome(Failing(timeout=60)), await outcome(ayo_llamaindex.optimize(Failing(timeout=60)))

    want, got = asyncio.run(main())
    assert got == want
    assert "cannot answer 'why?'" in want[1]


def test_the_users_workflow_object_runs_stock_after_optimize(url: str) -> None:
    # optimize() wraps; the user's own object, run directly, never reaches Ayo's engine
    async def main() -> Any:
        workflow = FanOut(make_llm(url, max_tokens=4), timeout=120)
        fast = ayo_llamaindex.optimize(workflow)
        await run_once(workflow, questions=QUESTIONS[:2])
        return fast

    fast = asyncio.run(main())
    assert fast.last_run is None and "step:answer" not in [m.name for m in fast.explain().modules]


class Streamer(Workflow):
    def __init__(self, llm: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.llm = llm

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        deltas = []
        async for chunk in await self.llm.astream_chat([ChatMessage(role="user", content=ev.question)]):
            ctx.write_event_to_stream(Progress(note=chunk.delta or ""))
            deltas.append(chunk.delta)
        return StopEvent(result=deltas)


@pytest.mark.parametrize("question,max_tokens", [("What is 2+2?", 300), ("Say hi.", 300), ("What is recursion?", 64)],
                         ids=["eos", "eos-short", "length"])
def test_streamed_chunks_match_stock_whether_the_answer_ends_on_eos_or_length(url: str, question: str,
                                                                           max_tokens: int) -> None:
    async def main() -> tuple[Any, Any]:
        stock = await run_once(Streamer(make_llm(url, max_tokens), timeout=120), question=question)
        fast = await run_once(ayo_llamaindex.optimize(Streamer(make_llm(url, max_tokens), timeout=120)),
                              question=question)
        return stock, fast

    (want, want_events, _), (got, got_events, _) = asyncio.run(main())
    # the same text, and a stream shaped as the server's: an opening empty chunk, and an empty closing one
    # only where the answer ended on EOS (a length cut carries its finish on the last token's chunk);
    # how many tokens a chunk carries depends on load, in stock as in Ayo
    assert "".join(got) == "".join(want) and len(got) > 3
    assert (got[0], got[-1] == "") == (want[0], want[-1] == "")
    assert [name for name, _ in got_events] == ["Progress"] * len(got) + ["StopEvent"]


class SyncSteps(Workflow):
    """A sync step (run by the workflow in its executor: Ayo leaves it to stock) next to an async one."""

    @step
    def shout(self, ev: StartEvent) -> Question:
        return Question(question=ev.text.upper())

    @step
    async def finish(self, ctx: Context, ev: Question) -> StopEvent:
        await ctx.store.set("seen", ev.question)
        return StopEvent(result=ev.question + "!")


def test_sync_steps_run_as_stock_beside_scheduled_async_ones() -> None:
    async def main() -> tuple[Any, Any, Any]:
        fast = ayo_llamaindex.optimize(SyncSteps(timeout=30))
        got = await run_once(fast, text="hi")
        return await run_once(SyncSteps(timeout=30), text="hi"), got, await fast.last_run.finished()

    want, got, trace = asyncio.run(main())
    assert got == want and want[0] == "HI!"
    nodes = set(trace.graph.nodes)
    assert "step.finish.1" in nodes and not any(n.startswith("step.shout.") for n in nodes)


def test_concurrent_runs_of_one_optimized_workflow_each_grow_their_own_graph(url: str) -> None:
    questions = [QUESTIONS[:2], QUESTIONS[2:4], QUESTIONS[3:]]

    async def main() -> tuple[list[Any], list[Any], Any]:
        fast = ayo_llamaindex.optimize(FanOut(make_llm(url, 8), timeout=120))
        stock = [await run_once(FanOut(make_llm(url, 8), timeout=120), questions=q) for q in questions]
        handlers = [fast.run(questions=q) for q in questions]
        runs = [fast.last_run]  # the last one; each handler's run is its own query
        results = await asyncio.gather(*handlers)
        return stock, list(results), await runs[0].finished()

    stock, results, trace = asyncio.run(main())
    assert results == [value for value, _, _ in stock]
    answers = [n for n in trace.graph.nodes if n.startswith("step.answer.")]
    assert len(answers) == len(questions[-1])  # this run's own invocations only
