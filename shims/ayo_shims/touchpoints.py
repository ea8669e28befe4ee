"""The register of every place Ayo reaches into a framework's, SDK's or Python's internals.

A *touchpoint* is one such place: a private attribute read, a private method called or
wrapped, a wrapt patch, an internal module imported. Each is declared once, here in
``ayo_shims`` (one module per framework), with the versions it was checked against and a
``check`` that fails when the installed version no longer has it. ``verify(framework)``
runs the checks of a framework once per process; the adapters call it from ``optimize()``,
so a framework release that renames an internal fails loudly, naming the touchpoint and the
fix, instead of silently running the pipeline opaque or answering differently.

Usage in a shim module::

    CHAIN_CALL = declare(
        "langchain_core.runnables.base.Runnable._call_with_config", framework="langchain-core",
        checked="1.0-1.2", why="opens the chain run exactly as RunnableSequence.invoke does",
        check=has_attr("langchain_core.runnables.base", "Runnable", "_call_with_config"))
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any


class ShimError(RuntimeError):
    """An internal Ayo relies on is missing or changed in the installed framework version."""


@dataclass(frozen=True)
class Touchpoint:
    """One reach into a framework's internals."""

    name: str  # dotted path of what is touched, e.g. "llama_index.core.indices.VectorStoreIndex._insert"
    framework: str  # distribution name whose version matters ("llama-index-core", "openai", "python")
    checked: str  # the versions it was checked against, e.g. "0.14.0-0.14.8"
    why: str  # what Ayo needs it for
    check: Callable[[], None]  # raises (anything) when the touchpoint is gone or changed

    def installed_version(self) -> str:
        if self.framework == "python":
            import sys

            return ".".join(map(str, sys.version_info[:3]))
        try:
            return metadata.version(self.framework)
        except metadata.PackageNotFoundError:
            return "not installed"

    def verify(self) -> None:
        try:
            self.check()
        except Exception as exc:  # noqa: BLE001 - re-raised as a ShimError naming the touchpoint
            raise ShimError(
                f"Ayo's touchpoint {self.name} ({self.why}) is missing or changed in {self.framework} "
                f"{self.installed_version()} (checked against {self.checked}): {type(exc).__name__}: {exc}. "
                f"Install a checked {self.framework} version, or update ayo_shims for this one.") from exc


_REGISTRY: dict[str, Touchpoint] = {}
_verified: set[str] = set()
_lock = threading.Lock()


def declare(name: str, *, framework: str, checked: str, why: str, check: Callable[[], None]) -> Touchpoint:
    """Register a touchpoint (idempotent by name: re-importing a shim module is harmless)."""
    tp = Touchpoint(name, framework, checked, why, check)
    with _lock:
        _REGISTRY.setdefault(name, tp)
        return _REGISTRY[name]


def touchpoints(framework: str | None = None) -> list[Touchpoint]:
    """The declared touchpoints (of one framework), in declaration order."""
    with _lock:
        return [tp for tp in _REGISTRY.values() if framework is None or tp.framework == framework]


def verify(*frameworks: str) -> None:
    """Check every touchpoint of ``frameworks`` (all when none are named), once per process.

    Raises :class:`ShimError` naming the first touchpoint that fails.
    """
    for tp in touchpoints():
        if frameworks and tp.framework not in frameworks:
            continue
        if tp.name in _verified:
            continue
        tp.verify()
        with _lock:
            _verified.add(tp.name)


# -- check builders -----------------------------------------------------------------------


def _resolve(module: str, qualname: str | None) -> Any:
    obj: Any = importlib.import_module(module)
    for part in (qualname.split(".") if qualname else ()):
        obj = getattr(obj, part)
    return obj


def importable(module: str, qualname: str | None = None) -> Callable[[], None]:
    """Check: ``module`` imports and has ``qualname`` (dotted, optional)."""
    def check() -> None:
        _resolve(module, qualname)
    return check


def has_attr(module: str, qualname: str, *attrs: str) -> Callable[[], None]:
    """Check: the object ``module.qualname`` has every attribute in ``attrs`` (class or module level)."""
    def check() -> None:
        obj = _resolve(module, qualname)
        missing = [a for a in attrs if not hasattr(obj, a)]
        if missing:
            raise AttributeError(f"{module}.{qualname} has no {', '.join(missing)}")
    return check


def has_private_attr(module: str, qualname: str, *attrs: str) -> Callable[[], None]:
    """Check: the pydantic model ``module.qualname`` declares every private attribute in ``attrs``
    (``PrivateAttr`` fields exist on instances only, so ``hasattr`` on the class cannot tell)."""
    def check() -> None:
        cls = _resolve(module, qualname)
        private = set(getattr(cls, "__private_attributes__", {}) or {})
        missing = [a for a in attrs if a not in private and not hasattr(cls, a)]
        if missing:
            raise AttributeError(f"{module}.{qualname} declares no private attribute {', '.join(missing)}")
    return check


def has_params(module: str, qualname: str, params: Iterable[str], exact: bool = False) -> Callable[[], None]:
    """Check: the callable ``module.qualname`` takes the parameters ``params`` (in that order when ``exact``)."""
    wanted = tuple(params)

    def check() -> None:
        found = tuple(inspect.signature(_resolve(module, qualname)).parameters)
        if exact and found != wanted:
            raise TypeError(f"{module}.{qualname} takes {found}, expected {wanted}")
        missing = [p for p in wanted if p not in found]
        if missing:
            raise TypeError(f"{module}.{qualname} takes no {', '.join(missing)} (takes {found})")
    return check


def all_of(*checks: Callable[[], None]) -> Callable[[], None]:
    """Check: every one of ``checks``."""
    def check() -> None:
        for c in checks:
            c()
    return check
