"""Errors raised by the runtime; each names the query, node and module involved and the fix."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class AyoError(Exception):
    """Base class of Ayo runtime errors."""


class NodeFailed(AyoError):
    """A node raised: its query fails, other queries go on."""

    def __init__(self, query_id: str, node: str, module: str, op: str, cause: BaseException):
        self.query_id, self.node, self.module, self.op, self.cause = query_id, node, module, op, cause
        where = f"module {module!r}" if module else "no module"
        super().__init__(f"query {query_id!r}: node {node!r} ({where}, op {op}) failed: "
                         f"{type(cause).__name__}: {cause}")


def unwrap_node_failure(exc: BaseException, note: bool = True) -> BaseException:
    """The user's own exception inside a (possibly nested) :class:`NodeFailed`, else ``exc``.

    Adapters re-raise it so callers see the very exception the stock pipeline raises (a prompt
    missing a variable, a parser failing, the SDK's ``BadRequestError``). With ``note``, it
    carries a note naming the node, module and query where it happened.
    """
    failed: NodeFailed | None = None
    while isinstance(exc, NodeFailed) and exc.cause is not None:
        failed, exc = exc, exc.cause
    if note and failed is not None:
        exc.add_note(f"(raised in Ayo node {failed.node!r}, module {failed.module!r}, query {failed.query_id!r})")
    return exc


class QueryTimeout(AyoError, TimeoutError):
    """A query ran past its timeout; everything it held was released."""

    def __init__(self, query_id: str, timeout: float, running: list[str]):
        self.query_id, self.timeout, self.running = query_id, timeout, running
        super().__init__(f"query {query_id!r} exceeded its timeout of {timeout:g}s "
                         f"(still running: {running or 'nothing'}); raise timeout= or find the slow node in the trace")


class QueueFull(AyoError):
    """An engine scheduler's bounded queue is full (``submit_nowait``); the async ``submit`` waits instead."""


class IllegalTransition(AyoError):
    """A state machine was asked for a transition its table does not allow (a bug in Ayo)."""


class MissingEngine(AyoError):
    """A node asked for an engine kind the Runtime was not given."""


class Captured:
    """An exception carried as a value to the node that raises it.

    For work that must not fail on its own (a per-part task): the consuming node raises
    ``exc``, so the query fails once, from one node, with the user's own exception.
    """

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def capturing(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``fn`` returning a :class:`Captured` where it would raise an ``Exception``."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised by the consuming node
            return Captured(exc)

    return call
