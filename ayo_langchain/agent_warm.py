"""An agent's next model call: its prompt prefix is warmed in the server's KV cache while the tools run.

Once the model's message with tool calls is complete, everything the next model request will
hold is known except the tools' results: the messages the model just got (system prompt, the
conversation), the message itself, and the tools' schemas. :class:`NextCallWarmer` (a callback
on the model node, where LangChain hands it the request's messages and invocation parameters)
renders that next request with LangChain's own message conversion (``ayo_shims.langchain``) twice,
with the two :data:`~ayo_core.engines.prefix_warming.STAND_INS` as every tool result, and the shared
algorithm of :mod:`ayo_core.engines.prefix_warming` does the rest: the server tokenizes both renders
with ``messages`` and ``tools`` exactly as its chat endpoint renders them, their common prefix (minus
the safety tokens, cut to whole KV blocks) is sent as one prefill-only request, in a task of its
own, concurrently with the tools. Nothing is sent where the device rule says no (a CPU server, or
its prefix cache is off).

The real request is never changed: a warm-up that is wrong, late or failed costs at most the
cache. A warm-up still tokenizing when the next request begins is cancelled (it could only
compete with it); a failure is logged at debug level. Kept out: sync calls (no loop to run the
warm-up on), models other than ``ChatOpenAI`` on the Chat Completions API, and servers that need
an API key (a callback sees the key masked, so the warm-up goes unauthenticated and fails there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage

from ayo_core.engines.prefix_warming import STAND_INS, token_prefix, warm_budget, warm_ids
from ayo_core.runtime.owned import start_owned
from ayo_langchain.engines import llm_engine
from ayo_shims import langchain as shims

log = logging.getLogger(__name__)
MAX_PENDING = 1024  # warm-ups whose next request has not begun (it never does when a tool raised)
TEMPLATE_FIELDS = ("chat_template", "chat_template_kwargs")  # request fields vLLM renders the prompt with


@dataclass
class NextRequest:
    """What one model call sent, from which its next request (after the tools) is rendered."""

    url: str
    model: str
    messages: list[Any]  # the LangChain messages the model got (system prompt included)
    tools: list[Any] | None
    template: dict[str, Any] = field(default_factory=dict)  # chat_template(_kwargs) as the request sends them
    cache: dict[str, Any] = field(default_factory=dict)  # cache_salt: the warm-up must share the cache scope

    def render(self, message: AIMessage, agent_name: str | None, stand_in: str) -> dict[str, Any]:
        """``/tokenize`` arguments for the next request, every tool result being ``stand_in``."""
        # the agent names its model's message after itself (create_agent's name=, create_react_agent's name=)
        # after the callback saw it: the next request holds it named
        ai = message.model_copy(update={"name": agent_name}) if agent_name else message
        results = [ToolMessage(content=stand_in, tool_call_id=call["id"]) for call in message.tool_calls]
        render: dict[str, Any] = {"messages": shims.chat_completions_messages([*self.messages, ai, *results])}
        if self.tools:
            render["tools"] = self.tools
        return {**render, **self.template}


def next_request(serialized: Any, messages: Any, params: Any) -> NextRequest | None:
    """The :class:`NextRequest` of a model call as ``on_chat_model_start`` sees it; None when Ayo cannot
    render it (another model, no explicit server, not one conversation)."""
    url = shims.serialized_chat_endpoint(serialized)
    if url is None or not isinstance(params, dict) or not isinstance(messages, list) or len(messages) != 1:
        return None
    model = params.get("model") or params.get("model_name")
    if not isinstance(model, str):
        return None
    # the request body is {**invocation params, **extra_body} (the SDK merges extra_body into it)
    body = {**params, **(params.get("extra_body") or {})}
    template = {k: body[k] for k in TEMPLATE_FIELDS if body.get(k) is not None}
    cache = {"cache_salt": body["cache_salt"]} if body.get("cache_salt") else {}
    return NextRequest(url, model, list(messages[0]), params.get("tools") or None, template, cache)


class NextCallWarms:
    """The warm-ups of one optimized agent: the running ones and a log of what each did."""

    def __init__(self, agent_name: str | None = None) -> None:
        self.agent_name = agent_name
        self.log: deque[dict[str, Any]] = deque(maxlen=256)  # what explain() shows
        self.tasks: set[asyncio.Future] = set()
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future]] = {}  # tool call id -> its warm-up

    def start(self, request: NextRequest, message: AIMessage) -> None:
        """Warm ``request``'s successor after ``message`` in a task of its own (returns at once)."""
        ids = [call["id"] for call in message.tool_calls]
        # a snapshot: the agent goes on changing its message (its name) while the warm-up renders
        message = message.model_copy(deep=True)
        entry: dict[str, Any] = {"calls": ids, "started": time.perf_counter(), "sent": None, "done": None,
                                 "tokens": 0, "next_request": None, "outcome": "pending"}
        task = start_owned(self._warm(request, message, entry), "warm: the next model call")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        self.log.append(entry)
        for call_id in ids:
            self._pending[call_id] = (entry, task)
        while len(self._pending) > MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))

    def next_request_began(self, messages: list[Any]) -> None:
        """A model call began with ``messages``: the warm-ups for its tool results are done or too late."""
        now = time.perf_counter()
        for m in messages:
            found = self._pending.pop(m.tool_call_id, None) if isinstance(m, ToolMessage) else None
            if found is None or found[0]["next_request"] is not None:
                continue
            entry, task = found
            entry["next_request"] = now
            if entry["sent"] is None and not task.done():  # still tokenizing: it would only compete now
                task.cancel()

    async def _warm(self, request: NextRequest, message: AIMessage, entry: dict[str, Any]) -> None:
        try:
            budget = await warm_budget(request.url)
            if budget is None:
                entry["outcome"] = "not warmed: the device rule (a CPU server, or its prefix cache is off)"
                return
            llm = llm_engine(request.url, request.model)
            ids = await token_prefix(llm, [request.render(message, self.agent_name, s) for s in STAND_INS])
            entry["sent"] = time.perf_counter()
            entry["tokens"] = await warm_ids(llm, ids, budget.least, budget.block_size, **request.cache)
            entry["done"] = time.perf_counter()
            entry["outcome"] = "warmed" if entry["tokens"] else f"not warmed: under {budget.least} shared tokens"
        except asyncio.CancelledError:
            entry["outcome"] = "cancelled: the next request began first"
            raise
        except Exception as exc:  # noqa: BLE001 - a warm-up only ever costs the cache
            entry["outcome"] = f"failed: {type(exc).__name__}"
            log.debug("warming the agent's next model call failed", exc_info=True)

    def summary(self) -> list[str]:
        """One line per recent warm-up, for ``explain()``."""
        lines = []
        for e in list(self.log)[-8:]:
            if e["outcome"] != "warmed":
                lines.append(e["outcome"])
                continue
            line = f"{e['tokens']} tokens warmed in {e['done'] - e['started']:.3f} s"
            if e["next_request"] is not None:
                line += f", {e['next_request'] - e['done']:.3f} s before the next request began"
            lines.append(line)
        return lines


class NextCallWarmer(AsyncCallbackHandler):
    """On the model node: remembers each model call's request, and warms its successor once the
    message with tool calls is complete (see the module doc)."""

    run_inline = True  # in order, on the model's task: the request is read before the call proceeds

    def __init__(self, warms: NextCallWarms) -> None:
        self.warms = warms
        self.requests: dict[Any, NextRequest] = {}  # model run -> its request

    async def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any = None,
                                  invocation_params: Any = None, **kw: Any) -> None:
        try:
            if isinstance(messages, list) and len(messages) == 1:
                self.warms.next_request_began(list(messages[0]))
            request = next_request(serialized, messages, invocation_params)
        except Exception:  # noqa: BLE001 - never into the user's call
            log.debug("could not read the agent's model request", exc_info=True)
            return
        if request is not None:
            self.requests[run_id] = request

    async def on_llm_end(self, response: Any, *, run_id: Any = None, **kw: Any) -> None:
        request = self.requests.pop(run_id, None)
        try:
            message = response.generations[0][0].message
        except (AttributeError, IndexError, TypeError):
            return
        # only a message whose every call will run (an invalid call gets no tool result to stand in for)
        if (request is None or not isinstance(message, AIMessage) or not message.tool_calls
                or message.invalid_tool_calls or not all(call.get("id") for call in message.tool_calls)):
            return
        self.warms.start(request, message)

    async def on_llm_error(self, error: BaseException, *, run_id: Any = None, **kw: Any) -> None:
        self.requests.pop(run_id, None)
