"""Agents (``create_agent``, ``create_react_agent``): each tool call starts as soon as its arguments
are complete in the model's stream, while the rest of the message still decodes; the next model
call's prompt prefix is warmed while the tools run; and the agent's async model calls go through
Ayo's LLM engine.

An agent's model node is LangGraph's function node closing over the user's chat model
(``create_agent``: ``model``; ``create_react_agent``: ``static_model``, its prompt piped into the
bound model). Ayo's copy of the node runs the same function code over a copy of that model whose
async client sends through Ayo's LLM engine (:mod:`ayo_shims.openai_client`: tool-calling requests
included, streamed tool-call deltas passed on as the server sends them), so the request, the
message and its callbacks are stock's while the request is Ayo's engine's (its cluster routing,
retries, recording). The sync path (``invoke``), a model chosen per call, and a model that is not a
``ChatOpenAI`` at a server of its own stay the user's.

Stock LangGraph runs an agent's tools once the model node has returned the whole message. When
the model streams (under ``stream_mode="messages"`` / ``astream_events``, where LangGraph's
streaming handler listens), a tool call's arguments are complete as soon as the next call's
chunks begin; Ayo starts that call's tool function right then. The agent's ``ToolNode`` is a
copy whose tools, called for a call that already started, wait for that result inside the
tool's own ``ainvoke`` (so the tool's callbacks, output formatting and ``ToolNode``'s error
handling are stock's; a tool that raised raises there, where stock's does). Independent calls
run concurrently, as in stock.

Kept out, on purpose: a model call that does not stream (stock's ``invoke`` / ``ainvoke``
without a streaming handler: streaming it would change the message's metadata), sync calls,
tools that are not ``StructuredTool`` functions or that take injected arguments (state, store,
the tool call id), and arguments the tool's schema rejects: those run when the tools node runs
them, as stock. A tool started early runs even if the model call fails after the call's
arguments were complete (stock would not run it): the price of the early start.

Once the model's message with tool calls is complete (streamed or not), the next model request is
known but for the tools' results: :mod:`ayo_langchain.agent_warm` prefills its shared token prefix
(system prompt, conversation, the message, the tools' schemas) in the server's prefix cache while
the tools run, where the device rule allows (not on a CPU server). The real request is not changed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config, set_config_context
from langchain_core.tools import StructuredTool

from ayo_core.engines.next_call_warming import NextCallWarms
from ayo_core.runtime.early_starts import EarlyStarts
from ayo_langchain import engines as eng
from ayo_langchain.agent_warm import NextCallWarmer
from ayo_langchain.runnable import rebind, routed_copy
from ayo_shims import langgraph as lg
from ayo_shims import openai_client

log = logging.getLogger(__name__)


def eligible(tool: Any) -> bool:
    """A tool whose function Ayo may start from the model's stream (see the module doc)."""
    if not isinstance(tool, StructuredTool) or (tool.func is None and tool.coroutine is None):
        return False
    schema, call_schema = tool.args_schema, tool.tool_call_schema
    fields = getattr(schema, "model_fields", None)
    return isinstance(fields, dict) and fields.keys() == getattr(call_schema, "model_fields", {}).keys()


class EarlyToolCalls(EarlyStarts):
    """The tool calls of one optimized agent started from the model's stream, by tool call id."""

    def __init__(self, tools: dict[str, Any], agent_name: str | None = None) -> None:
        super().__init__()
        self.tools = tools  # name -> the user's (eligible) tool
        self.agent_name = agent_name  # the name the agent gives its model's messages
        self.warms = NextCallWarms()  # the next model call's warm-ups (agent_warm)

    def start_call(self, call: dict[str, Any], message_run: Any) -> None:
        tool = self.tools.get(call["name"])
        if tool is None or not call.get("id") or call["id"] in self:
            return
        try:  # the tool's own schema, as its ainvoke validates them
            validated = tool.args_schema.model_validate(call["args"])
        except Exception:  # stock's tools node reports the bad arguments
            return
        kwargs = {k: getattr(validated, k) for k in call["args"] if k in tool.args_schema.model_fields}
        run = tool.coroutine(**kwargs) if tool.coroutine is not None else asyncio.to_thread(tool.func, **kwargs)
        self.start(call["id"], run, f"tool: {call['name']}", id=call["id"], tool=call["name"],
                   message_run=message_run, message_end=None)

    def message_ended(self, message_run: Any) -> None:
        now = time.perf_counter()
        for entry in self.log:
            if entry["message_run"] == message_run and entry["message_end"] is None:
                entry["message_end"] = now

    def take_call(self, call_id: Any) -> asyncio.Future | None:
        return self.take(call_id) if isinstance(call_id, str) else None

    def started_before_message_end(self) -> list[tuple[str, float]]:
        """(tool, seconds before its model message ended) of every early start logged."""
        return [(e["tool"], e["message_end"] - e["started"]) for e in self.log if e["message_end"] is not None]


class ToolCallWatcher(AsyncCallbackHandler):
    """Reads a streaming model's tool-call chunks; a call is complete when the next one begins."""

    run_inline = True  # in order, on the model's task

    def __init__(self, early: EarlyToolCalls) -> None:
        self.early = early
        self.calls: dict[Any, dict[int, dict[str, Any]]] = {}  # model run -> index -> call so far
        self.done: dict[Any, set[int]] = {}

    async def on_llm_new_token(self, token: str, *, chunk: Any = None, run_id: Any = None, **kw: Any) -> None:
        for part in getattr(getattr(chunk, "message", None), "tool_call_chunks", None) or []:
            index = part.get("index") or 0
            if index in self.done.setdefault(run_id, set()):
                continue
            call = self.calls.setdefault(run_id, {}).setdefault(index, {"name": "", "args": "", "id": None})
            call["name"] += part.get("name") or ""
            call["args"] += part.get("args") or ""
            call["id"] = call["id"] or part.get("id")
            for earlier in [i for i in self.calls[run_id] if i < index]:
                self._complete(run_id, earlier)

    async def on_llm_end(self, response: Any, *, run_id: Any = None, **kw: Any) -> None:
        for index in list(self.calls.get(run_id, {})):
            self._complete(run_id, index)
        self.early.message_ended(run_id)
        self.calls.pop(run_id, None)
        self.done.pop(run_id, None)

    async def on_llm_error(self, error: BaseException, *, run_id: Any = None, **kw: Any) -> None:
        self.calls.pop(run_id, None)
        self.done.pop(run_id, None)

    def _complete(self, run_id: Any, index: int) -> None:
        call = self.calls[run_id].pop(index)
        self.done[run_id].add(index)
        try:
            args = json.loads(call["args"] or "{}")
        except ValueError:
            return
        if isinstance(args, dict):
            self.early.start_call({"name": call["name"], "args": args, "id": call["id"]}, run_id)


def routed_model_node(node: Any) -> tuple[Any, Any] | None:
    """The agent's model ``node`` over a routed copy of its chat model, and the LLM engine that copy
    sends through; None when the node is not an agent's model function or its model is not a
    ``ChatOpenAI`` at a server of its own (then the model's own client sends, as stock)."""
    from langchain_openai import ChatOpenAI

    found = lg.agent_model(node)
    if found is None:
        return None
    variable, held = found
    model = chat_model_in(held)
    if type(model) is not ChatOpenAI or getattr(model, "include_response_headers", False):
        return None
    endpoint = eng.model_endpoint(model)
    if endpoint is None:
        return None
    engine = eng.llm_engine(*endpoint, api_key=eng.model_api_key(model))
    try:
        replacement = rebind(held, model, routed_copy(model))
    except TypeError:  # a composition around the model this copy cannot rebuild: the model's own client
        return None
    return lg.agent_model_node_with(node, variable, replacement), engine


def chat_model_in(held: Any) -> Any:
    """The chat model an agent's node holds: itself, inside bindings (``bind_tools``), or the last step of
    a sequence (``create_react_agent``'s ``prompt | model``)."""
    from langchain_core.runnables import RunnableBinding, RunnableSequence

    if isinstance(held, RunnableSequence):
        return chat_model_in(held.last)
    if isinstance(held, RunnableBinding):
        return chat_model_in(held.bound)
    return held


class EarlyToolsModelNode(Runnable):
    """The agent's model node, watching its stream for complete tool calls (async, streaming only),
    warming the next model call once a message with tool calls is complete (async), and, with an
    ``engine``, sending its async model requests through that LLM engine."""

    def __init__(self, bound: Runnable, early: EarlyToolCalls, engine: Any = None) -> None:
        self.bound = bound
        self.early = early
        self.engine = engine  # None: the model's own client sends (a node routed_model_node left alone)

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return self.bound.get_name(suffix, name=name)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.bound.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        callbacks = config.get("callbacks")
        if not hasattr(callbacks, "copy"):
            return await self._call(input, config, **kwargs)
        manager = callbacks.copy()
        if self.early.tools and lg.makes_model_stream(callbacks):
            manager.add_handler(ToolCallWatcher(self.early), inherit=True)
        # after the watcher: at the message's end, the last tool call starts before the warm-up does
        manager.add_handler(NextCallWarmer(self.early.warms, self.early.agent_name), inherit=True)
        watched: RunnableConfig = {**config, "callbacks": manager}
        # the agent's node code calls its model with the config of the running context (LangGraph set the
        # node's): run it in a context whose config carries the watcher, as LangGraph runs a node
        with set_config_context(watched) as context:
            return await asyncio.create_task(self._call(input, watched, **kwargs), context=context)

    async def _call(self, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        if self.engine is None:
            return await self.bound.ainvoke(input, config, **kwargs)
        with openai_client.route(openai_client.Route(self.engine)):  # the routed model copy sends to the engine
            return await self.bound.ainvoke(input, config, **kwargs)


def early_tool(tool: StructuredTool, early: EarlyToolCalls) -> StructuredTool:
    """A copy of ``tool`` whose ``ainvoke`` of a call started early waits for that start's result
    inside the tool's own ``ainvoke`` (callbacks, formatting, errors as stock)."""
    cls = type(tool)

    async def ainvoke(self: Any, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        started = early.take_call(input.get("id")) if isinstance(input, dict) else None
        if started is None:
            return await cls.ainvoke(self, input, config, **kwargs)

        async def result(*_args: Any, **_kwargs: Any) -> Any:
            return await started

        return await cls.ainvoke(self.model_copy(update={"coroutine": result}), input, config, **kwargs)

    # one subclass per tool (pydantic refuses unknown instance attributes: the board rides in the closure)
    early_cls = type(f"EarlyStart{cls.__name__}", (cls,), {"ainvoke": ainvoke, "__module__": __name__})
    return early_cls.model_construct(**{name: getattr(tool, name) for name in cls.model_fields})


def early_tool_nodes(nodes: dict[str, Any], agent_name: str | None = None
                     ) -> tuple[EarlyToolCalls, dict[str, Any]] | None:
    """For an agent graph's node bodies (name -> bound runnable): the early-start board and the new
    bodies of its model node (always: it warms the next call) and of its tools node (when a tool can
    start early); None when the graph has no model and tools nodes. ``agent_name``: the name the agent
    gives its model's messages."""
    tool_node_cls = lg.tool_node_class()
    tools_name = next((n for n, b in nodes.items() if tool_node_cls is not None and isinstance(b, tool_node_cls)), None)
    model_name = next((n for n in ("model", "agent") if n in nodes), None)
    if tools_name is None or model_name is None:
        return None
    tool_node = nodes[tools_name]
    tools = {name: t for name, t in tool_node.tools_by_name.items() if eligible(t)}
    early = EarlyToolCalls(tools, agent_name)
    body, engine = routed_model_node(nodes[model_name]) or (nodes[model_name], None)
    replaced: dict[str, Any] = {model_name: EarlyToolsModelNode(body, early, engine)}
    if tools:
        new_tools = {name: early_tool(t, early) if name in tools else t for name, t in tool_node.tools_by_name.items()}
        replaced[tools_name] = lg.tool_node_with_tools(tool_node, new_tools)
    return early, replaced
