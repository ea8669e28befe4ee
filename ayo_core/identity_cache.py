"""A bounded least-recently-used cache keyed by the identity of the object it derives from.

Adapters build a derived object (a captured module tree, a lowered stand-in) for a user's object
met at run time: a routing function's choice, an engine a workflow step built. Such objects are
often unhashable or compare equal while being different (two pydantic runnables with equal
fields), so the key is ``id(obj)``. Each entry holds ``obj`` itself: while cached it cannot be
collected, so its ``id`` cannot be reused by another object and hand that one the wrong value; a
hit is still checked with ``is``. A function that builds a new object per call would grow the
cache without limit, so the least recently used entries go past ``maxsize``.

Not locked: every user calls it from one thread (Ayo's loop, or the optimized chain's caller),
and ``build`` may be long (a capture) and must not run under a lock it could re-enter.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class IdentityLRU(Generic[V]):
    """``obj -> build(obj)`` kept per object identity, least recently used dropped past ``maxsize``.

    ``on_evict(obj, value)`` runs for each entry dropped, so the owner can forget what it recorded
    about that value elsewhere.
    """

    def __init__(self, maxsize: int, on_evict: Callable[[Any, V], None] | None = None) -> None:
        self.maxsize = maxsize
        self._on_evict = on_evict
        self._entries: OrderedDict[int, tuple[Any, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> list[V]:
        """The values kept, least recently used first."""
        return [value for _obj, value in self._entries.values()]

    def get(self, obj: Any, build: Callable[[Any], V]) -> V:
        """``obj``'s value: the kept one (now the most recently used), else ``build(obj)`` kept.

        Nothing is kept when ``build`` raises."""
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is obj:
            self._entries.move_to_end(key)
            return entry[1]
        value = build(obj)
        self._entries[key] = (obj, value)  # holds obj: its id stays unique while cached
        self._entries.move_to_end(key)
        self._evict()
        return value

    def _evict(self) -> None:
        while len(self._entries) > self.maxsize:
            _key, (obj, value) = self._entries.popitem(last=False)
            if self._on_evict is not None:
                self._on_evict(obj, value)
