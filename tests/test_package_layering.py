"""What each installed package may import, read from the source (fast; no install needed).

The dependency direction (docs/core-api.md): ``ayo_core`` imports no adapter, no ``ayo_shims``, no
framework and nothing of the demo side (``ayo_bench``, ``ayo_examples``); nothing installed
imports the checkout's ``benchmarks/`` or ``examples/`` folders by those names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# installed import name -> folder in the checkout (ayo_shims lives in shims/; setup.py maps examples/)
INSTALLED = {"ayo_core": "ayo_core", "ayo_llamaindex": "ayo_llamaindex", "ayo_langchain": "ayo_langchain",
             "ayo_shims": "shims/ayo_shims", "ayo_examples": "examples", "ayo_bench": "ayo_bench"}
CORE_MAY_NOT_IMPORT = {"ayo_llamaindex", "ayo_langchain", "ayo_shims", "ayo_bench", "ayo_examples",
                       "llama_index", "langchain", "langchain_core", "langchain_classic", "langgraph",
                       "benchmarks", "examples"}


def imported_top_levels(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one file (relative imports stay inside the package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_ayo_core_imports_no_adapter_framework_or_demo_code() -> None:
    offenders = {str(p.relative_to(REPO)): sorted(imported_top_levels(p) & CORE_MAY_NOT_IMPORT)
                 for p in sorted((REPO / "ayo_core").rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("package", sorted(INSTALLED))
def test_installed_packages_never_import_the_checkout_folders(package: str) -> None:
    offenders = {str(p.relative_to(REPO)): sorted(imported_top_levels(p) & {"benchmarks", "examples", "shims"})
                 for p in sorted((REPO / INSTALLED[package]).rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}
