"""Chat-history touchpoints: the internals ``ayo_langchain.history`` reaches.

``RunnableWithMessageHistory`` keeps its history logic in private methods and in the runnable
it builds around the user's chain (``insert_history | check_sync_or_async``, the second
returning the user's chain ``with_listeners(on_end=<write the history>)``).
``create_history_aware_retriever`` returns a ``RunnableBranch`` whose condition is a lambda
of its own module. Ayo lowers both by calling these very objects and methods, so the
history is read, written and skipped exactly as stock does it; each reach is one function
here, declared once, with a check that builds the stock object and looks at its layout.

Imports the frameworks only (lazily, in the checks): never ``ayo_core`` or an adapter.
"""

from __future__ import annotations

import warnings
from typing import Any

from ayo_shims.touchpoints import all_of, declare, has_attr, has_params, verify

LANGCHAIN_CORE = "langchain-core"
LANGCHAIN_CLASSIC = "langchain-classic"
CORE_CHECKED = "1.x (checked 1.8.3)"
CLASSIC_CHECKED = "1.x (checked 1.0.8)"
_HISTORY = "langchain_core.runnables.history"
_HAR = "langchain_classic.chains.history_aware_retriever"


def verify_all() -> None:
    """Check the touchpoints of this module (once per process); raises ``ShimError``."""
    verify(LANGCHAIN_CORE, LANGCHAIN_CLASSIC)


def _stock_history_runnable() -> Any:
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.runnables import RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    with warnings.catch_warnings():  # RunnableWithMessageHistory warns that it is deprecated
        warnings.simplefilter("ignore")
        return RunnableWithMessageHistory(RunnableLambda(lambda x: "ok"), lambda sid: InMemoryChatMessageHistory(),
                                          input_messages_key="q", history_messages_key="h")


def _history_layout_check() -> None:
    from langchain_core.runnables import Runnable, RunnableBinding

    loader, switch = history_parts(_stock_history_runnable())
    if not isinstance(loader, Runnable):
        raise AttributeError("RunnableWithMessageHistory._history_chain is not a runnable")
    sync, asynchronous = listened_runnables(switch)
    for listened in (sync, asynchronous):
        if not isinstance(listened, RunnableBinding) or not listened.config_factories:
            raise AttributeError("check_sync_or_async no longer returns the chain with its history listeners")


HISTORY_MERGE_CONFIGS = declare(
    f"{_HISTORY}.RunnableWithMessageHistory._merge_configs", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why="the call's config gets the session's message history (get_session_history, the missing-key errors) "
        "exactly as RunnableWithMessageHistory.invoke merges it",
    check=has_params(_HISTORY, "RunnableWithMessageHistory._merge_configs", ["configs"]))

HISTORY_LAYOUT = declare(
    f"{_HISTORY}.RunnableWithMessageHistory._history_chain", framework=LANGCHAIN_CORE, checked=CORE_CHECKED,
    why="the history is loaded by the runnable's own load_history chain, and written by the listeners its "
        "check_sync_or_async step puts on the user's chain (bound = (insert_history | check_sync_or_async))",
    check=all_of(has_attr(_HISTORY, "RunnableWithMessageHistory", "_enter_history", "_aenter_history"),
                 _history_layout_check))


def history_config(runnable: Any, config: Any) -> Any:
    """``config`` as ``RunnableWithMessageHistory`` merges it before calling its chain: with the
    session's history in ``configurable["message_history"]`` (raises stock's errors)."""
    return runnable._merge_configs(config)


def history_parts(runnable: Any) -> tuple[Any, Any]:
    """``(load step, check_sync_or_async step)`` of a ``RunnableWithMessageHistory``: the two steps of
    the sequence it runs (with their ``with_config`` bindings)."""
    steps = runnable.bound.bound.steps
    if len(steps) != 2 or steps[0] is not runnable._history_chain:
        raise TypeError(f"{type(runnable).__name__}: unexpected layout of its bound sequence")
    return steps[0], steps[1]


def listened_runnables(switch: Any) -> tuple[Any, Any]:
    """What ``check_sync_or_async`` returns under a sync and under an async call: the user's chain
    ``with_listeners`` / ``with_alisteners`` writing the history when its run ends.

    The async function awaits nothing: driving its coroutine one step gives its value without a loop.
    """
    lam = switch.bound if hasattr(switch, "config_factories") and hasattr(switch, "bound") else switch
    sync = lam.func(None)
    coroutine = lam.afunc(None)
    try:
        coroutine.send(None)
    except StopIteration as done:
        return sync, done.value
    coroutine.close()
    raise TypeError("check_sync_or_async awaited something: its async chain cannot be read ahead")


def _is_condition_check() -> None:
    from langchain_classic.chains import create_history_aware_retriever
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever

    class _Nothing(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list:
            return []

    prompt = ChatPromptTemplate.from_messages([("human", "{input}")])
    branch = create_history_aware_retriever(FakeListChatModel(responses=["x"]), _Nothing(), prompt).bound
    ((condition, _arm),) = branch.branches
    if not is_history_aware_condition(condition):
        raise AttributeError("create_history_aware_retriever's condition lambda moved or changed")


HAR_CONDITION = declare(
    f"{_HAR}.create_history_aware_retriever.<locals>.<lambda>", framework=LANGCHAIN_CLASSIC,
    checked=CLASSIC_CHECKED,
    why="a RunnableBranch built by create_history_aware_retriever (no chat history: retrieve the input; "
        "else rephrase, then retrieve) is recognized by its condition, a lambda of that function",
    check=_is_condition_check)


def is_history_aware_condition(condition: Any) -> bool:
    """``condition`` (a ``RunnableLambda``) is ``create_history_aware_retriever``'s "no chat history" test."""
    func = getattr(condition, "func", None)
    return (getattr(func, "__module__", None) == _HAR
            and getattr(func, "__qualname__", "").startswith("create_history_aware_retriever.<locals>."))
