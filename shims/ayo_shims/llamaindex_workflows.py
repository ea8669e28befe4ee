"""The LlamaIndex Workflow internals ``ayo_llamaindex.workflow`` touches (package ``workflows``,
``llama-index-workflows``, re-exported as ``llama_index.core.workflow``), and the client a step's
OpenAI model gets while Ayo schedules that step.

Why hooks rather than a re-implemented workflow engine: events, ``Context`` state, retries,
``num_workers``, ``collect_events`` and the order of the event stream stay stock's by
construction when the workflow's own control loop runs. Ayo needs two places only:

* each async step invocation's call (the ``partial`` the step worker builds): Ayo decides when
  it starts (a node of the run's graph) and which engine its model calls reach;
* the async OpenAI client a LlamaIndex ``OpenAI`` / ``OpenAILike`` model uses for a call made
  inside such a step: requests go to Ayo's LLM engine through the openai client shim
  (:mod:`ayo_shims.openai_client`), answered in the SDK's own types. Requests the engine does not
  speak (``tools``, ``response_format``, logprobs) go to the model's own client, as stock.

Both hooks are process-wide wrapt wrappers that do nothing unless the adapter's hook says the call
belongs to an optimized run (a context variable the adapter sets), so stock workflows are untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from ayo_shims import openai_client
from ayo_shims.llamaindex_versions import CORE, CORE_CHECKED, OPENAI_LLM, OPENAI_LLM_CHECKED
from ayo_shims.touchpoints import declare, has_private_attr, importable

WORKFLOWS = "llama-index-workflows"
WORKFLOWS_CHECKED = "2.x (checked 2.26.1)"
_STEP_FUNCTION = "workflows.runtime.types.step_function"


def _step_config_fields() -> None:
    from workflows.decorators import StepConfig, StepFunction

    missing = [f for f in ("accepted_events", "num_workers") if f not in StepConfig.__annotations__]
    if "_step_config" not in StepFunction.__annotations__ or missing:
        raise AttributeError(f"workflows.decorators.StepConfig/StepFunction changed: missing {missing or '_step_config'}")


declare(f"{_STEP_FUNCTION}.partial (wrapt)", framework=WORKFLOWS, checked=WORKFLOWS_CHECKED,
        why="each async step invocation starts when its node of the run's Ayo graph starts, and its model "
            "calls reach Ayo's engine (the step runs in the workflow's own task, events and ctx as stock)",
        check=importable(_STEP_FUNCTION, "partial"))
declare("workflows.workflow.Workflow._get_steps", framework=WORKFLOWS, checked=WORKFLOWS_CHECKED,
        why="explain() lists a workflow's steps (name, accepted events, num_workers)",
        check=has_private_attr("workflows.workflow", "Workflow", "_get_steps"))
declare("llama_index.llms.openai.OpenAI._get_aclient (wrapt)", framework=OPENAI_LLM, checked=OPENAI_LLM_CHECKED,
        why="a model call inside a step Ayo schedules sends its request through Ayo's LLM engine",
        check=has_private_attr("llama_index.llms.openai", "OpenAI", "_get_aclient"))
declare("workflows.decorators.StepFunction._step_config (accepted_events, num_workers)", framework=WORKFLOWS,
        checked=WORKFLOWS_CHECKED, why="explain() names what a step accepts and how many workers it has",
        check=_step_config_fields)

_installed: set[str] = set()


def wrap_step_calls(hook: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> None:
    """Once per process: every step invocation's callable passes through ``hook(step_name, call)``,
    which returns the callable the step worker runs (``call`` itself for calls Ayo leaves alone).
    Sync steps (run in an executor by the worker) are left alone: their callable must stay sync."""
    if "steps" in _installed:
        return
    import asyncio

    import wrapt

    async def partial(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = await wrapped(*args, **kwargs)
        func = kwargs.get("func", args[0] if args else None)
        if not asyncio.iscoroutinefunction(func):
            return call
        return hook(str(getattr(func, "__name__", "step")), call)

    wrapt.wrap_function_wrapper(_STEP_FUNCTION, "partial", partial)
    _installed.add("steps")


def workflow_steps(workflow: Any) -> dict[str, Any]:
    """``{step name: step function}`` of a workflow (its class's ``@step`` methods and added steps)."""
    return dict(workflow._get_steps())


def step_summary(step: Any) -> str:
    """What a step accepts and its worker count, for explain()."""
    config = getattr(step, "_step_config", None)
    if config is None:
        return ""
    accepted = ", ".join(getattr(e, "__name__", str(e)) for e in config.accepted_events)
    return f"accepts {accepted}; num_workers={config.num_workers}"


def wrap_async_clients(hook: Callable[[Any, Any], Any]) -> None:
    """Once per process: ``OpenAI._get_aclient`` returns ``hook(llm, client)`` (the model's own client
    when the hook leaves it alone)."""
    if "aclient" in _installed:
        return
    import wrapt
    from llama_index.llms.openai import OpenAI

    def get_aclient(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return hook(instance, wrapped(*args, **kwargs))

    wrapt.wrap_function_wrapper(OpenAI, "_get_aclient", get_aclient)
    _installed.add("aclient")


# -- the client a routed call gets ------------------------------------------------------------

class RoutedAsyncClient:
    """The model's ``AsyncOpenAI`` client whose ``chat.completions`` / ``completions`` send through the
    engine of ``route`` (:mod:`ayo_shims.openai_client`); everything else is the client's own."""

    def __init__(self, client: Any, route: openai_client.Route, engine_errors: tuple[type[BaseException], ...]):
        self.client, self.route = client, route
        self.chat = _Namespace(completions=_RoutedResource(
            openai_client.ChatCompletionsShim(client.chat.completions, engine_errors), route, "chat"))
        self.completions = _RoutedResource(
            openai_client.CompletionsShim(client.completions, engine_errors), route, "completion")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> RoutedAsyncClient:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)


class _Namespace:
    def __init__(self, **items: Any) -> None:
        self.__dict__.update(items)


class _RoutedResource:
    """``create(**payload)`` through the shim under ``route``; a routed stream's dict chunks become the
    SDK's chunk objects (LlamaIndex's OpenAI class reads attributes, as on the SDK's stream)."""

    def __init__(self, shim: Any, route: openai_client.Route, kind: str) -> None:
        self.shim, self.route, self.kind = shim, route, kind

    async def create(self, **payload: Any) -> Any:
        with openai_client.route(self.route):
            answer = await self.shim.create(**payload)
        if payload.get("stream"):
            return _SdkChunks(answer, self.kind)
        return answer


def _choice(chunk: dict) -> dict:
    choices = chunk.get("choices") or [{}]
    return choices[0]


def _text(chunk: dict) -> str:
    choice = _choice(chunk)
    return (choice.get("delta") or {}).get("content") or choice.get("text") or ""


def _has_text(chunk: dict) -> bool:
    return bool(_text(chunk)) and _choice(chunk).get("finish_reason") is None


def _ends_at_length(chunk: dict) -> bool:
    return _choice(chunk).get("finish_reason") == "length" and not _text(chunk)


class _SdkChunks:
    def __init__(self, stream: Any, kind: str) -> None:
        self.stream, self.kind = stream, kind

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Any]:
        from openai.types import Completion
        from openai.types.chat import ChatCompletionChunk

        model = ChatCompletionChunk if self.kind == "chat" else Completion
        held: dict | None = None  # the last text chunk, until we know whether the stream ends on it
        async for chunk in self.stream:
            if not isinstance(chunk, dict):  # the model's own client answered: the SDK's chunks as they are
                yield chunk
                continue
            if held is not None and _ends_at_length(chunk):
                # vLLM sends a length-cut stream's finish_reason on the last token's chunk, not on a
                # chunk of its own (LlamaIndex turns every chunk into a ChatResponse: one more would show)
                held = {**held, **{k: v for k, v in chunk.items() if k != "choices"},
                        "choices": [{**held["choices"][0], "finish_reason": "length"}]}
                continue
            if held is not None:
                yield model.model_validate(held)
            held = chunk if _has_text(chunk) else None
            if held is None:
                yield model.model_validate(chunk)
        if held is not None:
            yield model.model_validate(held)

    async def close(self) -> None:
        closer = getattr(self.stream, "aclose", None) or getattr(self.stream, "close", None)
        if closer is not None:
            await closer()


# -- FunctionAgent: its model's stream and its tool calls --------------------------------------

_AGENTS = "llama_index.core.agent.workflow"
declare(f"{_AGENTS}.FunctionAgent._get_streaming_response (wrapt)", framework=CORE,
        checked=CORE_CHECKED, why="a tool call starts as soon as its arguments are complete in the model's stream "
        "(the AgentStream events the agent writes carry the calls parsed so far)",
        check=has_private_attr(f"{_AGENTS}.function_agent", "FunctionAgent", "_get_streaming_response"))
declare(f"{_AGENTS}.BaseWorkflowAgent._call_tool (wrapt)", framework=CORE, checked=CORE_CHECKED,
        why="the call_tool step of a call that already started waits for that result inside stock's own "
            "error handling", check=has_private_attr(f"{_AGENTS}.base_agent", "BaseWorkflowAgent", "_call_tool"))


def wrap_agent_tool_calls(on_stream: Callable[[Any, Any, Any], Any | None],
                          on_call: Callable[[Any, dict], Any | None]) -> None:
    """Once per process. ``on_stream(agent, ctx, tools)`` may return a stand-in for the ``ctx`` a
    ``FunctionAgent`` writes its streamed ``AgentStream`` events to (None: the agent's own);
    ``on_call(tool, tool_input)`` may return a stand-in for the tool ``_call_tool`` calls (None: the
    tool itself)."""
    if "agent_tools" in _installed:
        return
    import wrapt
    from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent
    from llama_index.core.agent.workflow.function_agent import FunctionAgent

    async def streaming_response(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        bound = dict(zip(("ctx", "current_llm_input", "tools"), args, strict=False)) | kwargs
        ctx = on_stream(instance, bound["ctx"], bound.get("tools") or [])
        if ctx is None:
            return await wrapped(*args, **kwargs)
        return await wrapped(**{**bound, "ctx": ctx})

    async def call_tool(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        bound = dict(zip(("ctx", "tool", "tool_input"), args, strict=False)) | kwargs
        tool = on_call(bound["tool"], bound["tool_input"])
        if tool is None:
            return await wrapped(*args, **kwargs)
        return await wrapped(**{**bound, "tool": tool})

    wrapt.wrap_function_wrapper(FunctionAgent, "_get_streaming_response", streaming_response)
    wrapt.wrap_function_wrapper(BaseWorkflowAgent, "_call_tool", call_tool)
    _installed.add("agent_tools")
