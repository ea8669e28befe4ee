"""The module graph: what capture produces and lowering consumes.

An adapter walks the user's object into a tree of :class:`BoundModule` s: each says
*what* a framework object is (a core template kind such as ``Retrieval``,
``Synthesis(mode=refine)``, ``LLMCall``, ``Transform``, ``ToolCall`` or ``Opaque``) and
holds the user's object it is bound to; an opaque module carries the reason. The core
says *how* each kind runs (``ayo_core.templates``). :class:`ModuleGraph` is the tree plus
the queries ``explain()`` and the benchmarks ask of it.

:class:`TypeDispatch` maps classes to handlers through the MRO, so adapters recognise
framework objects and lower captured modules by type, never by class name (a renamed
class must fail to match loudly, not silently become opaque).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

OPAQUE = "Opaque"


@dataclass
class BoundModule:
    """One captured module: its template kind, the user's object, its sub-modules."""

    name: str  # structural and stable across queries ("retriever", "3.prompt")
    kind: str  # the core template it lowers to ("Retrieval", "Synthesis(mode=refine)") or "Opaque"
    obj: Any = None  # the user's object this module is bound to
    reason: str = ""  # why the module stays opaque (empty when lowered)
    children: list[BoundModule] = field(default_factory=list)
    detail: str = ""  # what explain() adds (store type, top-k, ...)

    @property
    def opaque(self) -> bool:
        return self.kind == OPAQUE

    def walk(self) -> Iterator[BoundModule]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class ModuleGraph:
    """The module tree of one optimized pipeline."""

    root: BoundModule

    def modules(self) -> list[BoundModule]:
        return list(self.root.walk())

    def lowered(self) -> list[BoundModule]:
        return [m for m in self.root.walk() if not m.opaque]

    def opaque(self) -> list[BoundModule]:
        return [m for m in self.root.walk() if m.opaque]

    def lines(self) -> list[str]:
        """The tree as indented lines (the human view ``explain()`` prints)."""
        out: list[str] = []

        def visit(m: BoundModule, depth: int) -> None:
            what = f"{m.kind}[{type(m.obj).__name__}]" if m.obj is not None else m.kind
            extra = f" {m.detail}" if m.detail else ""
            why = f" -- {m.reason}" if m.reason else ""
            out.append(f"{'  ' * depth}{m.name}: {what}{extra}{why}")
            for child in m.children:
                visit(child, depth + 1)

        visit(self.root, 0)
        return out


H = TypeVar("H")


class TypeDispatch(Generic[H]):
    """Handlers registered per class, found through the MRO of an object's type.

    ``register(cls)`` decorates a handler; ``find(obj)`` returns the handler of the most
    derived registered class of ``type(obj)`` (or of ``resolve(obj)`` when given: e.g. the
    origin of a pydantic generic), None when none matches.
    """

    def __init__(self, name: str, resolve: Callable[[Any], type] | None = None) -> None:
        self.name = name
        self._handlers: dict[type, H] = {}
        self._resolve = resolve or type

    def register(self, *classes: type) -> Callable[[H], H]:
        def deco(handler: H) -> H:
            for cls in classes:
                if not isinstance(cls, type):
                    raise TypeError(f"{self.name}: register() takes classes, got {cls!r}")
                self._handlers[cls] = handler
            return handler
        return deco

    def add(self, cls: type, handler: H) -> None:
        self.register(cls)(handler)

    def find(self, obj: Any) -> H | None:
        for cls in self._resolve(obj).__mro__:
            handler = self._handlers.get(cls)
            if handler is not None:
                return handler
        return None

    def __contains__(self, cls: type) -> bool:
        return cls in self._handlers
