"""Templates for work that stays in Python: Transform, ToolCall, Opaque."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ayo_core.graph import Graph, Node, Op
from ayo_core.templates.base import Template, add_entry, plain_fn


class Transform(Template):
    """Local Python: ``fn(**inputs) -> value`` (``takes_ctx=True``: ``fn(ctx, **inputs)``).

    Inputs: any names. ``per_part="kw"`` maps ``fn`` over the list (or parts) at
    input ``kw``. Pure by default (no side effect, touches no resource).
    """

    kind = "transform"
    op = Op.TRANSFORM

    def __init__(self, fn: Callable[..., Any], module: str | None = None, *, takes_ctx: bool = False,
                 per_part: str | None = None, side_effect: bool = False, resources: Iterable[str] | None = (),
                 cost: float = 0.0):
        super().__init__(module)
        self.fn, self.takes_ctx, self.per_part = fn, takes_ctx, per_part
        self.side_effect, self.cost = side_effect, cost
        self.resources = None if resources is None else frozenset(resources)

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        meta: dict[str, Any] = {}
        if self.resources is not None:
            meta["resources"] = self.resources
        if self.per_part:
            meta["per_part"] = self.per_part
        return add_entry(g, Node(name, self.op, fn=plain_fn(self.fn, self.takes_ctx), inputs=dict(inputs),
                                 module=self.module, side_effect=self.side_effect, cost=self.cost, meta=meta), after)

    def shape(self) -> Hashable:
        return (type(self).__name__, self.per_part)


class ToolCall(Transform):
    """A tool invocation (``fn(**inputs)``). Assumed to have side effects on unknown resources
    unless told otherwise, so dependency pruning keeps its order with other side effects."""

    kind = "tool"
    op = Op.TOOL_CALL

    def __init__(self, fn: Callable[..., Any], module: str | None = None, *, side_effect: bool = True,
                 resources: Iterable[str] | None = None, **kw: Any):
        super().__init__(fn, module, side_effect=side_effect, resources=resources, **kw)


class Opaque(Transform):
    """A module Ayo does not understand: one node that calls the user's object as it is.

    ``call(**inputs)`` (sync calls run in a thread). It is not split, but still
    runs in parallel with independent work. Pass ``side_effect=True`` (and
    ``resources`` when known) if the object writes anything.
    """

    kind = "opaque"
    op = Op.OPAQUE

    def __init__(self, call: Callable[..., Any], module: str | None = None, *, side_effect: bool = False,
                 resources: Iterable[str] | None = (), **kw: Any):
        super().__init__(call, module, side_effect=side_effect, resources=resources, **kw)
