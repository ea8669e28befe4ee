"""Ayo core: graph IR, module templates, passes, runtime, engines and tracing.

Never imports LlamaIndex or LangChain (adapters depend on the core, not the
other way round). Heavy submodules load lazily so ``import ayo_core`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "serve_llm": ("ayo_core.engines.llm_server", "serve_llm"),
    "models": ("ayo_core.models", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ayo_core' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attr is None else getattr(module, attr)
