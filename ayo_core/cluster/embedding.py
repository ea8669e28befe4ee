"""``ClusterEmbeddingEngine``: the embedding engine's interface over embedding replicas.

Each call goes to the least-loaded replica (:class:`~ayo_core.cluster.replicas.EmbedReplica`),
carrying the engine settings; inside the replica, concurrent calls from every driver with
the same settings share forward passes (cross-query batching stays in the replicas). A replica
that dies mid-call fails over like an LLM replica (embedding is deterministic).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ayo_core.cluster.engine import ReplicaPool, ReplicaSource


class ClusterEmbeddingEngine(ReplicaPool):
    """``aembed``/``embed`` of :class:`~ayo_core.engines.embedding.EmbeddingEngine` on replicas."""

    def __init__(self, source: ReplicaSource, settings: dict[str, Any] | None = None, name: str = "cluster-embed",
                 max_inflight_per_replica: int = 256, failover_timeout: float = 180.0) -> None:
        super().__init__(source, model="embedding", router="least_outstanding",
                         max_inflight_per_replica=max_inflight_per_replica, failover_timeout=failover_timeout,
                         name=name)
        # Settings that change vectors travel with each call; thread counts stay the replica's.
        self.settings = tuple(sorted((k, v) for k, v in (settings or {}).items() if k != "torch_threads"))

    async def aembed(self, texts: list[str], kind: str = "text", normalize: bool | None = None,
                     batch_size: int | None = None) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("ClusterEmbeddingEngine expects a list of texts, got one str: wrap it in a list")
        if not texts:
            return []
        vectors: list[list[float]] = await self._dispatch(
            (), float(len(texts)), 0,
            lambda actor: _await_ref(actor.aembed.remote(self.settings, list(texts), kind, normalize, batch_size)))
        return vectors

    def embed(self, texts: list[str], kind: str = "text", normalize: bool | None = None,
              batch_size: int | None = None) -> list[list[float]]:
        """Blocking form (not from a running event loop)."""
        return asyncio.run(self.aembed(texts, kind, normalize, batch_size))

    def close(self) -> None:
        """Replicas belong to the cluster: nothing to close on the driver."""


async def _await_ref(ref: Any) -> Any:
    return await ref
