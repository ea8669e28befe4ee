"""LangChain touchpoints: the langchain-core and langchain-openai internals ``ayo_langchain`` reaches.

The adapter keeps LangChain's own behaviour by calling LangChain's own code: a binding's
config merge, a retriever's tracing metadata, a chat model's request payload and default
parameters, and the model's ``async_client``, which a copy of the user's model gets
replaced by Ayo's client shim (the model then builds, sends and parses its requests as
stock does, only through Ayo's engine). Each reach is one function here, declared once
with the versions it was checked on; ``verify()`` (called by ``ayo_langchain.optimize``)
fails loudly, naming the touchpoint, when an installed version no longer has it.

Imports the frameworks only (lazily, in the checks): never ``ayo_core`` or an adapter.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
from collections.abc import Callable
from typing import Any

from ayo_shims import openai_sdk
from ayo_shims.touchpoints import all_of, declare, has_attr, has_params, verify

LANGCHAIN_CORE = "langchain-core"
LANGCHAIN_OPENAI = "langchain-openai"
PYDANTIC = "pydantic"
FRAMEWORKS = (LANGCHAIN_CORE, LANGCHAIN_OPENAI, openai_sdk.FRAMEWORK, PYDANTIC)
CORE_CHECKED = "1.x (checked 1.8.3)"
OPENAI_CHECKED = "1.x (checked 1.7.4)"
PYDANTIC_CHECKED = "2.x (checked 2.14.4)"

_CHAT = "langchain_openai.chat_models.base"
_LLM = "langchain_openai.llms.base"


def verify_all() -> None:
    """Check every touchpoint ``ayo_langchain`` relies on (once per process); raises ``ShimError``."""
    verify(*FRAMEWORKS)


def _has_fields(module: str, qualname: str, *fields: str) -> Callable[[], None]:
    """Check: the pydantic model ``module.qualname`` has the fields ``fields`` (pydantic keeps
    fields off the class, so ``hasattr`` cannot tell)."""
    def check() -> None:
        cls = getattr(importlib.import_module(module), qualname)
        missing = [f for f in fields if f not in cls.model_fields]
        if missing:
            raise AttributeError(f"{module}.{qualname} has no field {', '.join(missing)}")
    return check


# ---- langchain-core ---------------------------------------------------------------------

BINDING_MERGE_CONFIGS = declare(
    "langchain_core.runnables.base.RunnableBindingBase._merge_configs", framework=LANGCHAIN_CORE,
    checked=CORE_CHECKED,
    why="a with_config() binding around the whole chain configures the query's run as "
        "RunnableBinding.invoke does (its config, then its config_factories)",
    check=all_of(has_attr("langchain_core.runnables.base", "RunnableBinding", "_merge_configs"),
                 has_params("langchain_core.runnables.base", "RunnableBindingBase._merge_configs", ["configs"])))


def binding_config(binding: Any, config: Any) -> Any:
    """``config`` merged with a ``RunnableBinding``'s own config, as the binding merges it when called."""
    return binding._merge_configs(config)


RETRIEVER_LS_PARAMS = declare(
    "langchain_core.retrievers.BaseRetriever._get_ls_params", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why="a retriever Ayo splits into embed+search opens its run with the LangSmith metadata "
        "BaseRetriever.invoke adds",
    check=has_attr("langchain_core.retrievers", "BaseRetriever", "_get_ls_params"))


def retriever_ls_params(retriever: Any) -> dict[str, Any]:
    """The tracing metadata a retriever adds to its run (``ls_retriever_name``...)."""
    return retriever._get_ls_params()


_LAMBDA_RUN_WHY = ("a lambda's body runs under the chain run RunnableLambda.invoke opens, with its config "
                   "and error reporting, while Ayo keeps a returned runnable to lower it instead of invoking it")
RUNNABLE_CALL_WITH_CONFIG = declare(
    "langchain_core.runnables.base.Runnable._call_with_config", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why=_LAMBDA_RUN_WHY,
    check=has_params("langchain_core.runnables.base", "Runnable._call_with_config", ["func", "input_", "config"]))
RUNNABLE_ACALL_WITH_CONFIG = declare(
    "langchain_core.runnables.base.Runnable._acall_with_config", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why=_LAMBDA_RUN_WHY,
    check=has_params("langchain_core.runnables.base", "Runnable._acall_with_config", ["func", "input_", "config"]))


def call_with_config(runnable: Any, func: Callable[..., Any], value: Any, config: Any) -> Any:
    """``func(value, run_manager, config)`` under the chain run ``runnable`` opens for itself (sync)."""
    return runnable._call_with_config(func, value, config)


def call_with_config_open(runnable: Any, func: Callable[..., Any], value: Any, config: Any,
                          keep_open: Callable[[Any], bool]) -> tuple[Any, Any]:
    """:func:`call_with_config`, except that an output ``keep_open`` accepts leaves the run open:
    ``(output, run_manager)`` then, ``(output, None)`` once the run has ended. A mirror of
    ``Runnable._call_with_config`` (same run, config context and error reporting), for a routing
    lambda whose returned runnable runs in the run before it ends (``ayo_langchain.routing``)."""
    from langchain_core.runnables.config import (
        call_func_with_variable_args,
        ensure_config,
        get_callback_manager_for_config,
        patch_config,
        set_config_context,
    )

    config = ensure_config(config)
    run_manager = get_callback_manager_for_config(config).on_chain_start(
        None, value, run_type=None, name=config.get("run_name") or runnable.get_name(),
        run_id=config.pop("run_id", None))
    try:
        child_config = patch_config(config, callbacks=run_manager.get_child())
        with set_config_context(child_config) as context:
            output = context.run(call_func_with_variable_args, func, value, config, run_manager)
    except BaseException as e:
        run_manager.on_chain_error(e)
        raise
    if keep_open(output):
        return output, run_manager
    run_manager.on_chain_end(output)
    return output, None


async def acall_with_config(runnable: Any, func: Callable[..., Any], value: Any, config: Any) -> Any:
    """``await func(value, run_manager, config)`` under the chain run ``runnable`` opens for itself."""
    return await runnable._acall_with_config(func, value, config)


SYNC_HANDLER_DISPATCH = declare(
    "langchain_core.callbacks.manager._ahandle_event_for_handler", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why="under a sync invoke/stream a sync handler's events run on the caller's thread, as stock's: the async "
        "manager Ayo's nodes use hands them to the loop's executor as partial(copy_context().run, handler.on_x, ...)",
    check=has_attr("langchain_core.callbacks.manager", "_ahandle_event_for_handler"))


def is_sync_handler_event(fn: Any) -> bool:
    """Whether an executor call is the async callback manager's dispatch of a sync handler's event."""
    from langchain_core.callbacks import BaseCallbackHandler

    if not isinstance(fn, functools.partial) or not fn.args or getattr(fn.func, "__name__", None) != "run":
        return False
    return (isinstance(getattr(fn.func, "__self__", None), contextvars.Context)
            and isinstance(getattr(fn.args[0], "__self__", None), BaseCallbackHandler))


_STREAM_WHY = ("under astream/astream_events a lambda (and a composite Ayo splits into nodes) runs as stock's stream "
               "runs it: through its transform, which opens its run with no input, gives its value as a stream "
               "chunk to astream_events' handler, and ends the run with the input")
RUNNABLE_ATRANSFORM_WITH_CONFIG = declare(
    "langchain_core.runnables.base.Runnable._atransform_stream_with_config", framework=LANGCHAIN_CORE,
    checked=CORE_CHECKED, why=_STREAM_WHY,
    check=has_params("langchain_core.runnables.base", "Runnable._atransform_stream_with_config",
                     ["inputs", "transformer", "config"]))
STREAMING_HANDLER = declare(
    "langchain_core.tracers._streaming._StreamingCallbackHandler", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why=_STREAM_WHY, check=has_attr("langchain_core.tracers._streaming", "_StreamingCallbackHandler",
                                    "tap_output_aiter"))


async def atransform_with_config(runnable: Any, func: Callable[..., Any], value: Any, config: Any) -> Any:
    """``await func(value, run_manager, config)`` under the run ``runnable``'s transform opens (stock's
    stream path), over the one-chunk input ``value``; its result is the one chunk it streams."""
    async def transformer(chunks: Any, run_manager: Any, config: Any) -> Any:
        final = None
        async for chunk in chunks:
            final = chunk
        yield await func(final, run_manager, config)

    out = None
    async for chunk in atransform_stream(runnable, value, transformer, config):
        out = chunk
    return out


def atransform_stream(runnable: Any, value: Any, transformer: Callable[..., Any], config: Any) -> Any:
    """``transformer(chunks, run_manager, config)``'s chunks under the run ``runnable``'s transform opens
    (stock's stream path), over the one-chunk input ``value``."""
    async def one() -> Any:
        yield value

    return runnable._atransform_stream_with_config(one(), transformer, config)


async def tap_stream(run_manager: Any, chunks: list[Any]) -> None:
    """Give ``chunks`` as ``run_manager``'s run's stream to the streaming handler among its handlers
    (astream_events', astream_log's), as a transform's output is tapped in stock; none: nothing."""
    from langchain_core.tracers._streaming import _StreamingCallbackHandler

    handler = next((h for h in run_manager.handlers if isinstance(h, _StreamingCallbackHandler)), None)
    if handler is None:
        return

    async def each() -> Any:
        for chunk in chunks:
            yield chunk

    async for _ in handler.tap_output_aiter(run_manager.run_id, each()):
        pass


# ---- pydantic (as LangChain's runnables use it) -------------------------------------------


def _generic_origin_check() -> None:
    from langchain_core.runnables import RunnableParallel

    if generic_origin(RunnableParallel[dict]) is not RunnableParallel:
        raise AttributeError("RunnableParallel[dict].__pydantic_generic_metadata__ names no origin")


GENERIC_ORIGIN = declare(
    "pydantic.BaseModel.__pydantic_generic_metadata__", framework=PYDANTIC, checked=PYDANTIC_CHECKED,
    why="capture recognizes a parametrized runnable (RunnableParallel[dict]) by its generic class",
    check=_generic_origin_check)


def generic_origin(cls: type) -> type:
    """The generic class a pydantic parametrization ``cls`` (``RunnableParallel[dict]``) was made from;
    ``cls`` itself when it is not one."""
    meta = getattr(cls, "__pydantic_generic_metadata__", None) or {}
    return meta.get("origin") or cls


# ---- langchain-openai -------------------------------------------------------------------

CHAT_DEFAULT_PARAMS = declare(
    f"{_CHAT}.BaseChatOpenAI._default_params", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why="a prefill warm-up uses the request's cache_salt (vLLM scopes its prefix cache by it)",
    check=has_attr(_CHAT, "BaseChatOpenAI", "_default_params"))
LLM_DEFAULT_PARAMS = declare(
    f"{_LLM}.BaseOpenAI._default_params", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why="a prefill warm-up uses the request's cache_salt (vLLM scopes its prefix cache by it)",
    check=has_attr(_LLM, "BaseOpenAI", "_default_params"))


def model_default_params(model: Any) -> dict[str, Any]:
    """The request parameters a ``ChatOpenAI`` / ``OpenAI`` sends by default (a copy)."""
    return dict(model._default_params)


CHAT_REQUEST_PAYLOAD = declare(
    f"{_CHAT}.BaseChatOpenAI._get_request_payload", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why="a prefill warm-up tokenizes exactly the messages the chat model will send",
    check=all_of(has_attr(_CHAT, "BaseChatOpenAI", "_get_request_payload"),
                 has_params(_CHAT, "BaseChatOpenAI._get_request_payload", ["input_", "stop"])))


def chat_request_payload(model: Any, value: Any) -> dict[str, Any]:
    """The request body a ``ChatOpenAI`` builds for the input ``value`` (messages, parameters)."""
    return model._get_request_payload(value)


_MESSAGES_WHY = ("an agent's next model request is warmed while its tools run: its messages are converted to "
                 "Chat Completions dicts exactly as BaseChatOpenAI._get_request_payload converts them")
CHAT_MESSAGE_DICT = declare(
    f"{_CHAT}._convert_message_to_dict", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED, why=_MESSAGES_WHY,
    check=has_params(_CHAT, "_convert_message_to_dict", ["message"]))
CHAT_FROM_V1 = declare(
    f"{_CHAT}._convert_from_v1_to_chat_completions", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why=_MESSAGES_WHY, check=has_params(_CHAT, "_convert_from_v1_to_chat_completions", ["message"]))


def chat_completions_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """LangChain messages as a ``ChatOpenAI`` sends them to ``/chat/completions`` (the message part of
    ``_get_request_payload``, for when the model object itself is out of reach: a callback's view)."""
    from langchain_core.messages import AIMessage

    base = importlib.import_module(_CHAT)
    return [base._convert_message_to_dict(base._convert_from_v1_to_chat_completions(m)) if isinstance(m, AIMessage)
            else base._convert_message_to_dict(m) for m in messages]


def _api_base_field_check() -> None:
    field = importlib.import_module(_CHAT).BaseChatOpenAI.model_fields.get("openai_api_base")
    if field is None or field.alias != "base_url":
        raise AttributeError("BaseChatOpenAI has no field openai_api_base aliased base_url")


CHAT_SERIALIZED_BASE = declare(
    f"{_CHAT}.BaseChatOpenAI.openai_api_base", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why="a chat model's callbacks see it serialized (its constructor kwargs): the server an agent's next "
        "request is warmed at is its openai_api_base there",
    check=_api_base_field_check)


def serialized_chat_endpoint(serialized: Any) -> str | None:
    """The base URL of a ``ChatOpenAI`` as its callbacks see it serialized (``on_chat_model_start``'s
    first argument); None for another model, or one with no explicit server."""
    if not isinstance(serialized, dict) or (serialized.get("id") or [None])[-1] != "ChatOpenAI":
        return None
    kwargs = serialized.get("kwargs") or {}
    if kwargs.get("use_responses_api"):  # a Responses API request is not a chat template render
        return None
    base = kwargs.get("openai_api_base")
    return base if isinstance(base, str) and base else None


_ASYNC_CLIENT_WHY = ("a copy of the user's model gets Ayo's client shim as async_client: the model sends "
                     "async_client.create(**payload) / with_raw_response.create(**payload) and reads the answer "
                     "(parse(), headers, the stream's context manager) as from the SDK")
CHAT_ASYNC_CLIENT = declare(
    f"{_CHAT}.BaseChatOpenAI.async_client", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why=_ASYNC_CLIENT_WHY, check=_has_fields(_CHAT, "BaseChatOpenAI", "async_client"))
LLM_ASYNC_CLIENT = declare(
    f"{_LLM}.BaseOpenAI.async_client", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why=_ASYNC_CLIENT_WHY, check=_has_fields(_LLM, "BaseOpenAI", "async_client"))


LLM_SYNC_CLIENT = declare(
    f"{_LLM}.BaseOpenAI.client", framework=LANGCHAIN_OPENAI, checked=OPENAI_CHECKED,
    why=("a copy of the user's text-completion model gets Ayo's sync client shim as client: under a sync call "
         "its _generate sends client.create(**payload) from a worker thread and reads the answer as from the SDK"),
    check=_has_fields(_LLM, "BaseOpenAI", "client"))


def with_async_client(model: Any, wrap: Callable[[Any], Any], wrap_sync: Callable[[Any, Any], Any] | None = None) -> Any:
    """A copy of ``model`` (``ChatOpenAI`` / ``OpenAI``) whose ``async_client`` is ``wrap(its client)``;
    with ``wrap_sync``, its ``client`` is ``wrap_sync(its client, the new async client)``."""
    async_client = wrap(model.async_client)
    update = {"async_client": async_client}
    if wrap_sync is not None:
        update["client"] = wrap_sync(model.client, async_client)
    return model.model_copy(update=update)


# the OpenAIEmbeddings touchpoint (remote embedding servers): declared with this adapter's
from ayo_shims import langchain_embeddings  # noqa: E402,F401
