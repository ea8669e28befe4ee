"""Ayo's distributed tier on Ray: engines as replicas across nodes, routing, failover.

``ayo_core.configure(cluster="ray://host:10001" | "host:6379" | "auto")`` (or ``$AYO_RAY_ADDRESS``)
switches the process's engines to the cluster: the engine registry then hands out a
:class:`~ayo_core.cluster.engine.ClusterLLMEngine` (and, where the cluster has embedding
replicas, a :class:`~ayo_core.cluster.embedding.ClusterEmbeddingEngine`) with the interface of
the single-server engines, so ``optimize()`` and the user's code do not change.

Importing this package does not import Ray; only asking for a cluster engine connects.
"""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()
_settings: dict[str, Any] = {"address": None, "router": "prefix_affinity"}
_engines: dict[tuple, Any] = {}

ENV_ADDRESS = "AYO_RAY_ADDRESS"


def configure_cluster(address: str | None, router: str | None = None) -> None:
    """Use the Ray cluster at ``address`` for this process's engines (None: back to single servers)."""
    from ayo_core.cluster.routing import get_router

    if router is not None:
        get_router(router)  # an unknown name fails here, listing the valid ones
    with _lock:
        if (address, router or _settings["router"]) != (_settings["address"], _settings["router"]):
            _engines.clear()  # engines of the previous setting; unchanged settings keep their engines
        _settings["address"] = address
        if router is not None:
            _settings["router"] = router


def cluster_address() -> str | None:
    """The configured cluster address, else ``$AYO_RAY_ADDRESS``, else None (no cluster)."""
    return _settings["address"] or os.environ.get(ENV_ADDRESS) or None


def cluster_llm_engine(model: str) -> Any:
    """The process's cluster LLM engine for ``model`` (connects to Ray on first use)."""
    from ayo_core.cluster.engine import ClusterLLMEngine
    from ayo_core.cluster.ray_env import connect

    address = cluster_address()
    key = ("llm", address, model, _settings["router"])
    with _lock:
        if key not in _engines:
            connect(address)  # first: it sets Ray's environment before anything imports ray
            from ayo_core.cluster.replicas import ray_replica_source

            _engines[key] = ClusterLLMEngine(ray_replica_source("llm", model=model), model=model,
                                             router=_settings["router"], name=str(address))
        return _engines[key]


def cluster_embedding_engine(settings: dict[str, Any]) -> Any | None:
    """A cluster embedding engine for ``settings``, or None when the cluster has no embedding replicas."""
    from ayo_core.cluster.ray_env import connect

    address = cluster_address()
    key = ("embed", address, tuple(sorted(settings.items())))
    with _lock:
        if key not in _engines:
            connect(address)  # first: it sets Ray's environment before anything imports ray
            from ayo_core.cluster.embedding import ClusterEmbeddingEngine
            from ayo_core.cluster.replicas import ray_replica_source, replica_names

            if not replica_names("embed"):
                return None
            _engines[key] = ClusterEmbeddingEngine(ray_replica_source("embed"), settings, name=str(address))
        return _engines[key]


def reset_cluster_engines() -> None:
    with _lock:
        _engines.clear()
