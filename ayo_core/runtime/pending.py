"""Deferred writes into shared objects that have not landed yet, per target, in order.

An adapter that defers a write (a vector-store add moved into the query graph) lists it here so
that any other access to the same target can wait for it first (a barrier), and so that a later
deferred write into the same target lands after the earlier one, as the stock calls would.
"""

from __future__ import annotations

import threading
from typing import Any


class PendingWrites:
    """Pending items per target object, in the order they were deferred.

    Keyed by ``id(target)``: targets may be unhashable (pydantic models); a listed item holds
    its target, so the id cannot be reused while the item is listed.
    """

    def __init__(self) -> None:
        self._by_target: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def add(self, target: Any, item: Any) -> Any | None:
        """List ``item`` as pending into ``target``; returns the item listed before it (which must
        land first), or None."""
        with self._lock:
            items = self._by_target.setdefault(id(target), [])
            earlier = items[-1] if items else None
            items.append(item)
            return earlier

    def remove(self, target: Any, item: Any) -> None:
        """``item`` landed (or failed): no longer pending."""
        with self._lock:
            items = self._by_target.get(id(target))
            if items and item in items:
                items.remove(item)
            if not items:
                self._by_target.pop(id(target), None)

    def of(self, target: Any) -> list[Any]:
        """The items still pending into ``target`` (a copy)."""
        with self._lock:
            return list(self._by_target.get(id(target), ()))

    def __contains__(self, target: Any) -> bool:
        return id(target) in self._by_target
