"""An agent's next model call warmed while its tools run: LangChain's side of
:mod:`ayo_core.engines.next_call_warming`.

:class:`NextCallWarmer` (a callback on the model node, where LangChain hands it the request's
messages and invocation parameters) remembers each model call's request; once the message with tool
calls is complete it hands the core a render of the next request made by LangChain's own message
conversion (``ayo_shims.langchain``), every tool result a stand-in, with ``messages`` and ``tools``
as the chat endpoint gets them. When a model request begins, the tool results it holds tell the core
which warm-ups are done or too late. Kept out: sync calls (no loop to run the warm-up on), models
other than ``ChatOpenAI`` on the Chat Completions API, and servers that need an API key (a callback
sees the key masked, so the warm-up goes unauthenticated and fails there).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage

from ayo_core.engines.next_call_warming import NextCallWarms
from ayo_shims import langchain as shims

log = logging.getLogger(__name__)
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


class NextCallWarmer(AsyncCallbackHandler):
    """On the model node: remembers each model call's request, and warms its successor once the
    message with tool calls is complete (see the module doc)."""

    run_inline = True  # in order, on the model's task: the request is read before the call proceeds

    def __init__(self, warms: NextCallWarms, agent_name: str | None = None) -> None:
        self.warms = warms
        self.agent_name = agent_name  # the name the agent gives its model's messages
        self.requests: dict[Any, NextRequest] = {}  # model run -> its request

    async def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any = None,
                                  invocation_params: Any = None, **kw: Any) -> None:
        try:
            if isinstance(messages, list) and len(messages) == 1:
                self.warms.next_request_began(m.tool_call_id for m in messages[0] if isinstance(m, ToolMessage))
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
        # a snapshot: the agent goes on changing its message (its name) while the warm-up renders
        snapshot = message.model_copy(deep=True)
        self.warms.start([call["id"] for call in message.tool_calls], request.url, request.model,
                         functools.partial(request.render, snapshot, self.agent_name), request.cache)

    async def on_llm_error(self, error: BaseException, *, run_id: Any = None, **kw: Any) -> None:
        self.requests.pop(run_id, None)
