"""Running one call per input of a batch concurrently, with the error semantics stock frameworks have.

Adapters run every input of a ``batch``/``abatch`` as its own query on one runtime (so the engine
schedulers batch and prioritize across them); what differs between frameworks is only which error
a failing batch raises. An async batch over ``asyncio.gather`` raises the first in *time*; a sync
batch mapped over a thread pool raises the first in *input order* (``first_in_order``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


async def gather_batch(call: Callable[[int], Awaitable[Any]], n: int, *, max_concurrency: int | None = None,
                       return_exceptions: bool = False, first_in_order: bool = False) -> list[Any]:
    """``[await call(0), ..., await call(n - 1)]`` run concurrently, at most ``max_concurrency`` at once.

    ``return_exceptions``: a failed input's exception is its result. Otherwise the batch raises:
    the first failure in time, or with ``first_in_order`` the failure of the lowest input index
    (every input still runs to its end first, as a thread pool's ``map`` does).
    """
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(i: int) -> Any:
        if gate is None:
            return await call(i)
        async with gate:
            return await call(i)

    if return_exceptions or not first_in_order:
        return list(await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=return_exceptions))
    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    first = next((r for r in results if isinstance(r, BaseException)), None)
    if first is not None:
        raise first
    return list(results)
