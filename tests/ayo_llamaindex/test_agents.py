"""ayo_llamaindex.optimize() on LlamaIndex agents (FunctionAgent, ReActAgent, AgentWorkflow): same answer,
same events in the same order, same memory, same tool errors as stock, on the real server.

SmolLM2-135M does not write tool calls on its own (0 of 20 arithmetic questions with FunctionAgent on the
tool-calling server, 0 of 20 with ReActAgent's text format): the tool test forces the first call the way a
user with a small model would (``FunctionAgent(initial_tool_choice=...)``); the server's structured output
then writes the call. Nothing here fakes a tool call."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent, ToolCallResult

import ayo_llamaindex

QUESTIONS = ["What is a Python list?", "How does a hash map work?", "What is recursion?",
             "Why use a virtual environment?", "What does a compiler do?"]
# server-made identifiers and timings: they differ between any two runs, stock's included
VOLATILE = {"raw", "id", "created", "tool_id", "tool_call_id", "elapsed_seconds", "system_fingerprint"}


def make_llm(url: str, max_tokens: int = 64, tools: bool = False) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                      is_function_calling_model=tools, temperature=0.0, max_tokens=max_tokens)


def scrub(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


def merge_stream(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Consecutive ``AgentStream`` events as one (their deltas joined, the last response and tool calls).

    How many tokens one server chunk carries depends on load (vLLM merges the outputs of a request
    its client has not read yet), in stock as in Ayo: the text, the order and every other event must
    match, the chunk boundaries need not."""
    out: list[tuple[str, Any]] = []
    for name, event in events:
        if name == "AgentStream" and out and out[-1][0] == "AgentStream":
            prev = out[-1][1]
            out[-1] = (name, {**event, "delta": prev["delta"] + (event["delta"] or "")})
        else:
            out.append((name, event))
    return out


async def run_agent(agent: Any, question: str) -> tuple[Any, list[Any], list[Any]]:
    handler = agent.run(user_msg=question)
    events = merge_stream([(type(e).__name__, scrub(e)) async for e in handler.stream_events()])
    try:
        result: Any = str(await handler)
    except Exception as exc:  # noqa: BLE001 - compared with stock's outcome
        result = (type(exc).__name__, str(exc))
    memory = await handler.ctx.store.get("memory", default=None)
    messages = scrub(await memory.aget_all()) if memory is not None else None
    return result, events, messages


def calculator_tools() -> list[Any]:
    def multiply(a: int, b: int) -> int:
        """Multiply two integers and return the product."""
        return a * b

    return [multiply]


# three questions in the default suite (CI time), all five in make test-long
@pytest.mark.parametrize("questions", [pytest.param(QUESTIONS[:3], id="three"),
                                       pytest.param(QUESTIONS, id="five", marks=pytest.mark.long)])
def test_react_agent_matches_stock(llm_url: str, questions: list[str]) -> None:
    def agent() -> ReActAgent:
        return ReActAgent(tools=calculator_tools(), llm=make_llm(llm_url), system_prompt="You are a helpful tutor.")

    async def main() -> tuple[list[Any], Any]:
        fast = ayo_llamaindex.optimize(agent())
        assert isinstance(fast, ayo_llamaindex.OptimizedWorkflow)
        pairs = [(await run_agent(agent(), q), await run_agent(fast, q)) for q in questions]
        await fast.last_run.finished()
        return pairs, fast

    pairs, fast = asyncio.run(main())
    for want, got in pairs:
        assert got == want  # answer, every event in order (the streamed text), the memory
    assert sum(len(want[0].split()) > 20 for want, _ in pairs) >= len(questions) - 1  # 64-token answers, not trivial
    # ReAct's model calls are plain chat: they went to Ayo's LLM engine from the agent's step node
    assert any(c.node.startswith("step.run_agent_step.") for c in fast.last_trace.engine_calls)
    assert ("step:run_agent_step", "LLMCall") in [(m.name, m.template) for m in fast.explain().modules]


def test_a_tool_that_raises_behaves_as_stock(tools_llm_url: str) -> None:
    def lookup_weather(city: str = "Paris") -> str:
        """Look up today's weather in a city."""
        raise RuntimeError(f"the weather service for {city} is down")

    def agent() -> FunctionAgent:
        return FunctionAgent(tools=[lookup_weather], llm=make_llm(tools_llm_url, 32, tools=True),
                             initial_tool_choice="lookup_weather")

    async def main() -> tuple[list[tuple[Any, Any]], Any]:
        fast = ayo_llamaindex.optimize(agent())
        pairs = [(await run_agent(agent(), q), await run_agent(fast, q))
                 for q in ["What is the weather in Rome?", "Is it raining in Oslo?"]]
        await fast.last_run.finished()
        return pairs, fast

    pairs, fast = asyncio.run(main())
    for want, got in pairs:
        assert got == want
        results = [e for name, e in want[1] if name == ToolCallResult.__name__]
        assert results and results[0]["tool_output"]["is_error"]
        assert "weather service for" in results[0]["tool_output"]["blocks"][0]["text"]
    # the model calls with tools (streamed, the first one forced) went to Ayo's LLM engine from the step node
    assert sum(c.node.startswith("step.run_agent_step.") for c in fast.last_trace.engine_calls) >= 2


def test_agent_workflow_matches_stock(llm_url: str) -> None:
    def workflow() -> AgentWorkflow:
        tutor = ReActAgent(name="tutor", description="answers programming questions", tools=calculator_tools(),
                           llm=make_llm(llm_url), system_prompt="You are a helpful tutor.")
        return AgentWorkflow(agents=[tutor], root_agent="tutor")

    async def main() -> list[tuple[Any, Any]]:
        fast = ayo_llamaindex.optimize(workflow())
        return [(await run_agent(workflow(), q), await run_agent(fast, q)) for q in QUESTIONS[:2]]

    for want, got in asyncio.run(main()):
        assert got == want


class TakesOwnSteps(FunctionAgent):
    async def take_step(self, ctx: Any, llm_input: Any, tools: Any, memory: Any) -> Any:
        return await super().take_step(ctx, llm_input, tools, memory)


class JustRenamed(ReActAgent):
    pass


@pytest.mark.parametrize("cls,why", [(TakesOwnSteps, "overrides take_step"), (JustRenamed, "is a user's subclass")])
def test_a_users_subclass_of_an_agent_runs_as_the_users_object(cls: type, why: str, caplog) -> None:
    from llama_index.core.llms import MockLLM

    agent = cls(tools=calculator_tools(), llm=MockLLM())
    with caplog.at_level(logging.WARNING, logger="ayo_llamaindex"):
        assert ayo_llamaindex.optimize(agent) is agent
    assert f"{cls.__name__} is returned unchanged" in caplog.text and why in caplog.text
    assert f"subclasses LlamaIndex's {cls.__mro__[1].__name__}" in caplog.text
