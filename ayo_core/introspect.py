"""Plain-Python introspection the adapters share: is a method overridden, run an installer once.

Adapters decide whether Ayo may mirror a user object by checking that none of the methods
whose stock behaviour Ayo reproduces is overridden by the object's class; that check (and
the reason ``explain()`` shows) is the same for every framework.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any


def raw_attr(cls: type, name: str) -> Any:
    """The class-dict entry that defines ``name`` for ``cls`` (first in its MRO), or None.

    Compared by identity to tell whether a subclass overrides a method: ``getattr``
    on a class can build a fresh wrapper object each time (wrapt-decorated spans).
    """
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def overridden(obj: Any, base: type, names: tuple[str, ...] | list[str]) -> list[str]:
    """Which of ``names`` ``obj`` (a class, or an instance's class) defines differently from ``base``."""
    cls = obj if isinstance(obj, type) else type(obj)
    return [n for n in names if raw_attr(cls, n) is not raw_attr(base, n)]


def overrides_reason(obj: Any, base: type, names: tuple[str, ...] | list[str]) -> str | None:
    """``"<class> overrides a, b"`` when ``obj`` overrides any of ``names`` of ``base`` (why it stays
    opaque, for ``explain()``); None when it overrides none."""
    over = overridden(obj, base, names)
    return f"{(obj if isinstance(obj, type) else type(obj)).__name__} overrides {', '.join(over)}" if over else None


def once(install: Callable[[], None]) -> Callable[[], None]:
    """``install`` run at most once per process, even when threads race to it (process-wide
    wrapt hooks must not wrap a method twice)."""
    lock, done = threading.Lock(), [False]

    @functools.wraps(install)
    def run_once() -> None:
        with lock:
            if not done[0]:
                install()
                done[0] = True

    return run_once
