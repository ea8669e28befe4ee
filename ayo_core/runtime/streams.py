"""Part channels: how a streaming node hands finished parts to per-part consumers early."""

from __future__ import annotations

import asyncio
from typing import Any


def same_part(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # objects whose == raises or returns arrays: treat as changed
        return False


class PartChannel:
    """Indexed parts of one node's output, published as they finish.

    ``put(i, part)`` publishes (or replaces) part ``i``; ``close(final)`` fixes
    the final list: parts that equal what was published keep their identity,
    parts that differ replace it (a consumer that used a stale part recomputes
    it), extra parts are dropped. Consumers poll :attr:`version` and wait with
    :meth:`wait`.
    """

    def __init__(self) -> None:
        self.parts: dict[int, Any] = {}
        self.closed = False
        self.length: int | None = None
        self.version = 0
        self._waiters: list[asyncio.Future] = []

    def put(self, index: int, part: Any) -> None:
        if self.closed:
            return
        self.parts[index] = part
        self._notify()

    def append(self, part: Any) -> None:
        self.put(len(self.parts), part)

    def close(self, final: list[Any]) -> None:
        for i, part in enumerate(final):
            if i not in self.parts or not same_part(self.parts[i], part):
                self.parts[i] = part
        for i in [i for i in self.parts if i >= len(final)]:
            del self.parts[i]
        self.length = len(final)
        self.closed = True
        self._notify()

    async def wait(self, version: int) -> None:
        """Return once the channel has changed since ``version``."""
        if self.version != version:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _notify(self) -> None:
        self.version += 1
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
