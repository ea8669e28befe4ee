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


def configure(*, cluster: str | None = None, router: str | None = None) -> None:
    """Process-wide settings. ``cluster``: a Ray address (``"ray://host:10001"``, ``"host:6379"``,
    ``"auto"``) whose replicas serve this process's engines (see ``ayo_core.cluster``); ``router``:
    how LLM requests pick a replica (``round_robin``, ``least_outstanding``, ``prefix_affinity``)."""
    from ayo_core.cluster import configure_cluster

    configure_cluster(cluster, router)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ayo_core' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attr is None else getattr(module, attr)
