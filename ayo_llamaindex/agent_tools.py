"""``FunctionAgent`` in an optimized workflow run: a tool call starts as soon as its arguments are
complete in the model's stream, while the rest of the message still decodes.

Stock runs an agent's tools once ``run_agent_step`` has the whole message (``parse_agent_output``
then sends one ``ToolCall`` event per call; ``call_tool`` runs them, concurrently). A streaming
``FunctionAgent`` writes an ``AgentStream`` event per chunk carrying the tool calls parsed so far;
when call ``k + 1`` shows up, call ``k``'s arguments are complete, and Ayo starts that tool right
then. When stock's ``call_tool`` step comes to that call, ``_call_tool`` gets a stand-in tool whose
``acall`` waits for the started call: the result, the ``ToolOutput`` made of a tool's exception and
every event (``ToolCall``, ``ToolCallResult``, in stock's order) are stock's.

Kept out, on purpose: agents that do not stream (``streaming=False``), tools that take the
workflow ``Context`` (``requires_context``: the handoff tool among them), arguments the tool's
schema rejects, and the last call of a message (its arguments are complete only when the message
is: no time to win). A tool started early runs even if the model's stream fails after the call's
arguments were complete (stock would not run it): the price of the early start, as in the
LangChain adapter.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from ayo_core.runtime.early_starts import EarlyStarts

log = logging.getLogger(__name__)


def eligible(tool: Any, kwargs: dict) -> bool:
    """Ayo may start ``tool`` with ``kwargs`` from the stream (see the module doc)."""
    from llama_index.core.tools import FunctionTool

    if tool is None or (isinstance(tool, FunctionTool) and tool.requires_context):
        return False
    schema = getattr(tool.metadata, "fn_schema", None)
    if schema is None:
        return False
    try:
        schema.model_validate(kwargs)
    except Exception:  # noqa: BLE001 - the arguments are not (yet) what the tool takes: stock runs it
        return False
    return True


def _key(name: str, kwargs: dict) -> tuple[str, str]:
    return name, json.dumps(kwargs, sort_keys=True, default=str)


class EarlyToolStarts(EarlyStarts):
    """The tool calls of one optimized run started from its agents' streams (by tool and arguments), until
    ``call_tool`` takes them."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def observe(self, tool_calls: list[Any], tools: list[Any]) -> None:
        """An ``AgentStream`` event's calls so far: every one but the last has complete arguments."""
        by_name = {t.metadata.name: t for t in tools}
        for call in tool_calls[:-1]:
            if not call.tool_id or call.tool_id in self._seen:
                continue
            self._seen.add(call.tool_id)
            tool = by_name.get(call.tool_name)
            if not eligible(tool, call.tool_kwargs):
                continue
            self.start(_key(call.tool_name, call.tool_kwargs), tool.acall(**call.tool_kwargs),
                       f"tool: {call.tool_name}", tool=call.tool_name, tool_id=call.tool_id)
            log.debug("Ayo: started tool %s (%s) from the model's stream", call.tool_name, call.tool_id)

    def take_tool(self, tool: Any, tool_input: dict) -> StartedTool | None:
        """A stand-in for ``tool`` when a call with these arguments already started (None: run it)."""
        task = self.take(_key(tool.metadata.name, tool_input))
        return None if task is None else StartedTool(tool, task)


class StartedTool:
    """The user's tool, except that ``acall`` waits for the call Ayo already started."""

    def __init__(self, tool: Any, task: asyncio.Future) -> None:
        self._tool, self._task = tool, task

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return await self._task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tool, name)


class ObservingContext:
    """The agent's ``Context`` for its streaming call: ``AgentStream`` events are seen before they are written."""

    def __init__(self, ctx: Any, starts: EarlyToolStarts, tools: list[Any]) -> None:
        self._ctx, self._starts, self._tools = ctx, starts, tools

    def write_event_to_stream(self, ev: Any) -> None:
        calls = getattr(ev, "tool_calls", None)
        if calls and len(calls) > 1:
            self._starts.observe(list(calls), self._tools)
        self._ctx.write_event_to_stream(ev)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)
