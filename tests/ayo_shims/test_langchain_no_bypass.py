"""Static guard: ``ayo_langchain`` reaches framework / SDK / Python internals only through ``ayo_shims``.

The scan parses every module of the adapter and reports each reach of an internal outside
``ayo_shims``: an attribute ``obj._name`` (or ``getattr(obj, "_name")``) whose name the adapter
does not define itself, an import of a private module or name, ``wrapt``, and the pydantic
dunders that hold a model's internals. "Defines itself" means the package assigns or defines
that underscore name somewhere (``self._x = ...``, ``def _x``, ``class _X``, ``_X = ...``), so
``self._runtimes`` or ``self._owner._routed(...)`` (our own objects) pass, while
``resource._client`` (the openai SDK's) does not.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ADAPTER = REPO / "ayo_langchain"
OUR_PACKAGES = ("ayo_core", "ayo_langchain", "ayo_llamaindex", "ayo_shims", "__future__")
INTERNAL_DUNDERS = {"__private_attributes__", "__pydantic_private__", "__pydantic_fields__",
                    "__pydantic_generic_metadata__"}

# Reaches in files other slices of issue 12 are rewriting (``lower.py`` / ``capture.py``): file -> internal -> the shim to call instead.
# Delete an entry when its file stops touching it; nothing may be added here.
PENDING: dict[str, dict[str, str]] = {}


def _underscore(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def own_names(trees: list[ast.Module], module_names: list[str]) -> set[str]:
    """Underscore names the package defines itself (its modules, functions, classes, attributes)."""
    own = {m for m in module_names if _underscore(m)}
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                own.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                own.add(n.attr)
    return {name for name in own if _underscore(name)}


def _reach(n: ast.AST, own: set[str]) -> list[str]:
    """The internals node ``n`` reaches (empty for anything else)."""
    if isinstance(n, ast.Attribute):
        if n.attr in INTERNAL_DUNDERS or (_underscore(n.attr) and n.attr not in own):
            return [n.attr]
    elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in (
            "getattr", "hasattr", "setattr", "delattr") and len(n.args) >= 2:
        name = n.args[1].value if isinstance(n.args[1], ast.Constant) else None
        if isinstance(name, str) and (name in INTERNAL_DUNDERS or (_underscore(name) and name not in own)):
            return [name]
    elif isinstance(n, ast.Import):
        return [a.name for a in n.names if a.name.split(".")[0] == "wrapt" or any(map(_underscore, a.name.split(".")))]
    elif isinstance(n, ast.ImportFrom) and not (n.module or "").startswith(OUR_PACKAGES):
        module = n.module or ""
        if module.split(".")[0] == "wrapt" or any(map(_underscore, module.split("."))):
            return [module]
        return [f"{module}.{a.name}" for a in n.names if _underscore(a.name)]
    return []


def framework_internals(sources: dict[str, str]) -> dict[str, set[str]]:
    """file name -> the internals it reaches (see the module doc), for a package given as sources."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    own = own_names(list(trees.values()), [name.removesuffix(".py") for name in sources])
    found: dict[str, set[str]] = {}
    for name, tree in trees.items():
        hits = {h for n in ast.walk(tree) for h in _reach(n, own)}
        if hits:
            found[name] = hits
    return found


def test_the_scan_flags_framework_internals_and_not_our_own() -> None:
    ours = """
from ayo_langchain import _loop
from concurrent.futures.thread import _worker
import wrapt
class _Shim:
    def __init__(self, original):
        self._original = original
    def _routed(self):
        return self._original.create, _loop.run_sync
def use(shim, model, cls):
    shim._routed()
    getattr(shim, "_original", None)
    getattr(model, "_client", None)
    model._get_request_payload(1)
    cls.__pydantic_generic_metadata__
"""
    other = "def f(x):\n    return x._default_params, x.__name__\n"
    assert framework_internals({"a.py": ours, "b.py": other}) == {
        "a.py": {"concurrent.futures.thread._worker", "wrapt", "_client", "_get_request_payload",
                 "__pydantic_generic_metadata__"},
        "b.py": {"_default_params"},
    }


def test_adapter_reaches_no_internal_outside_ayo_shims() -> None:
    sources = {str(p.relative_to(ADAPTER)): p.read_text() for p in sorted(ADAPTER.rglob("*.py"))}
    found = framework_internals(sources)
    bypass = {f: sorted(hits - set(PENDING.get(f, {}))) for f, hits in found.items()}
    bypass = {f: hits for f, hits in bypass.items() if hits}
    assert not bypass, (
        f"ayo_langchain reaches framework internals directly: {bypass}. Reach each through a function in "
        "an ayo_shims module that declares the touchpoint (see shims/langchain.py), or, for an attribute of "
        "Ayo's own object, define it in the adapter.")
