"""Ordered state enums with their legal transitions (nodes in a query, requests at an engine)."""

from __future__ import annotations

from enum import IntEnum

from ayo_core.runtime.errors import IllegalTransition


class NodeState(IntEnum):
    PENDING = 0  # waiting for producers
    RUNNING = 1  # fn executing (or consuming parts)
    EXPANDED = 2  # fn returned Expand; waiting for the expansion's output
    DONE = 3
    FAILED = 4
    CANCELLED = 5


class RequestState(IntEnum):
    WAITING = 0  # queued at the engine scheduler
    RUNNING = 1  # part of a batch the engine is executing
    FINISHED = 2
    FAILED = 3
    CANCELLED = 4


_NODE_NEXT = {
    NodeState.PENDING: {NodeState.RUNNING, NodeState.CANCELLED, NodeState.FAILED},
    NodeState.RUNNING: {NodeState.EXPANDED, NodeState.DONE, NodeState.FAILED, NodeState.CANCELLED},
    NodeState.EXPANDED: {NodeState.DONE, NodeState.FAILED, NodeState.CANCELLED},
}
_REQUEST_NEXT = {
    RequestState.WAITING: {RequestState.RUNNING, RequestState.CANCELLED},
    RequestState.RUNNING: {RequestState.FINISHED, RequestState.FAILED, RequestState.CANCELLED},
}


def node_transition(current: NodeState, new: NodeState, what: str = "node") -> NodeState:
    """Return ``new`` if ``current -> new`` is legal, else raise :class:`IllegalTransition`."""
    if new not in _NODE_NEXT.get(current, ()):
        raise IllegalTransition(f"{what}: illegal state change {current.name} -> {new.name}")
    return new


def request_transition(current: RequestState, new: RequestState, what: str = "request") -> RequestState:
    """Return ``new`` if ``current -> new`` is legal, else raise :class:`IllegalTransition`."""
    if new not in _REQUEST_NEXT.get(current, ()):
        raise IllegalTransition(f"{what}: illegal state change {current.name} -> {new.name}")
    return new
