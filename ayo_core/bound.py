"""An optimized function used as a method: what ``instance.method`` returns for ``@optimize`` on a method.

Adapters' optimized stand-ins for a user's function (``OptimizedFunction``) are descriptors like
the function they replace; bound, they keep the stand-in's extra API (``acall``, ``explain()``,
``last_trace``, ``stock``).
"""

from __future__ import annotations

import functools
from typing import Any


class BoundOptimizedFunction:
    """An optimized function bound to its instance (``__func__`` the optimized function, ``__self__`` the
    instance): calls pass the instance first, every other attribute is the optimized function's."""

    def __init__(self, optimized: Any, instance: Any) -> None:
        self.__func__, self.__self__ = optimized, instance
        functools.update_wrapper(self, optimized, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__(self.__self__, *args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """The optimized function's async form, with the instance first."""
        return await self.__func__.acall(self.__self__, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # explain(), last_trace, stock
        return getattr(self.__func__, name)

    def __repr__(self) -> str:
        return f"<bound {self.__func__!r} of {self.__self__!r}>"
