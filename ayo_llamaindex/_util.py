"""Small helpers shared by the adapter's modules."""

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


def spanned_elsewhere(method: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method so LlamaIndex's ``DispatcherSpanMixin`` does not wrap it in a span of its own.

    The mixin opens a span around every override of a spanned base method; a stand-in method
    that only delegates to a spanned one (the stock engine's, or ``super()``'s) would then
    open two, and a failing query would emit one ``SpanDropEvent`` more than stock.
    """
    from ayo_shims import llamaindex as shim

    return shim.mark_spanned_elsewhere(method)


def without_span(bound: Any) -> Any:
    """``bound`` (a method of a user object) minus the dispatcher span the mixin put around it.

    For a stock method whose span Ayo's own method of the same name already opened (the
    query engine's ``_query``): calling the wrapped one would open that span twice.
    """
    from ayo_shims import llamaindex as shim

    return shim.without_span(bound)
