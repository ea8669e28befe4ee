"""A routing lambda (a ``RunnableLambda`` whose function returns a runnable) with stock's runs.

Stock's ``RunnableLambda`` invokes the runnable its function returns *inside its own run*: the
routed runnable's run is a child of the lambda's (``run_manager.get_child()``, no step tag), and
the lambda's run ends with the routed runnable's output, or with its error. Ayo lowers the routed
runnable into nodes of the running graph (its model calls batch and stream on Ayo's engines), so
the lambda's run stays open while those nodes run (:class:`RoutedRun`): a node after them ends it
with their value, and a failure of the query ends it with the error (``ChainCall.open_runs``).

Under ``ainvoke`` the lambda is called as stock calls it (``_acall_with_config`` opens and ends its
run) in a task of its own, whose function body, when the user's function returns a runnable, hands
it over and awaits the routed value. Under ``invoke`` the lambda's body runs in a worker thread,
which must not wait for the routed nodes (they may need worker threads themselves): the run is
opened by a mirror of ``_call_with_config`` that leaves it open for a routed output
(``ayo_shims.langchain.call_with_config_open``) and ended later from the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from ayo_shims import langchain as shims

Body = Callable[[Any, Any, RunnableConfig], Any]  # (value, run_manager, config), as _call_with_config calls it


@dataclass
class RoutedRun:
    """The lambda's open run while the runnable its function returned runs as graph nodes."""

    runnable: Any
    callbacks: Any  # the lambda run's child callback manager: the routed runnable's parent
    recursion_limit: int
    end: Callable[[Any], Awaitable[Any]]  # ends the run with the routed runnable's value; returns it
    fail: Callable[[BaseException], Awaitable[None]]  # ends the run with the query's error, as stock's


def check_depth(lam: Any, value: Any, out: Any, config: RunnableConfig) -> None:
    if isinstance(out, Runnable) and config["recursion_limit"] <= 0:  # RunnableLambda's own check, in its run
        raise RecursionError(f"Recursion limit reached when invoking {lam} with input {value}.")


async def call_async(lam: Any, body: Body, value: Any, config: RunnableConfig) -> Any | RoutedRun:
    """The lambda under ``_acall_with_config``: its value, or a :class:`RoutedRun` when its function
    returned a runnable (its run still open)."""
    loop = asyncio.get_running_loop()
    handed: asyncio.Future = loop.create_future()
    routed_value: asyncio.Future = loop.create_future()

    async def routing_body(value: Any, run_manager: Any, config: RunnableConfig) -> Any:
        out = await body(value, run_manager, config)
        if not isinstance(out, Runnable):
            return out
        check_depth(lam, value, out, config)
        handed.set_result((out, run_manager.get_child(), config["recursion_limit"] - 1))
        return await routed_value  # the run _acall_with_config opened ends with the routed output

    # a plain task, not the query's (start_owned): when the routed runnable fails, the query fails and
    # would cancel an owned task before the error reaches it, ending the lambda's run with
    # CancelledError where stock's ends with the routed runnable's error; this function awaits it
    task = asyncio.ensure_future(shims.acall_with_config(lam, routing_body, value, config))
    try:
        await asyncio.wait({task, handed}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if not handed.done():
        return task.result()  # a plain value, or the function's error (its run ended with it)

    async def finish(value: Any) -> Any:
        routed_value.set_result(value)
        return await task

    async def abort(error: BaseException) -> None:
        if not routed_value.done():
            routed_value.set_exception(error)
        try:
            await task
        except BaseException:  # noqa: BLE001, S110 - the query's own error, which its caller raises
            pass

    runnable, callbacks, limit = handed.result()
    return RoutedRun(runnable, callbacks, limit, finish, abort)


async def call_sync(lam: Any, body: Body, value: Any, config: RunnableConfig) -> Any | RoutedRun:
    """The lambda under ``_call_with_config`` (mirrored: a routed output leaves its run open), in a
    worker thread: its value, or a :class:`RoutedRun`."""

    def checked_body(value: Any, run_manager: Any, config: RunnableConfig) -> Any:
        out = body(value, run_manager, config)
        check_depth(lam, value, out, config)
        return out

    out, run_manager = await asyncio.to_thread(
        shims.call_with_config_open, lam, checked_body, value, config, lambda o: isinstance(o, Runnable))
    if run_manager is None:
        return out

    async def finish(value: Any) -> Any:
        await asyncio.to_thread(run_manager.on_chain_end, value)
        return value

    async def abort(error: BaseException) -> None:
        await asyncio.to_thread(run_manager.on_chain_error, error)

    return RoutedRun(out, run_manager.get_child(), config["recursion_limit"] - 1, finish, abort)
