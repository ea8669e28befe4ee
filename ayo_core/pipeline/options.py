"""The knobs of an optimized pipeline, one set for every adapter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Options:
    """What ``optimize(..., **options)`` takes, in either adapter (defaults are what the benchmarks use).

    A knob an adapter has nothing for is ignored there (the LlamaIndex query engines read ``policy``,
    ``passes``, ``timeout``, ``llm_inflight`` and ``batch_cross_encoder``; LangChain chains all but
    ``batch_cross_encoder``).
    """

    policy: str = "critical_path"  # the engine schedulers' policy (ayo_core.runtime.policies.POLICIES)
    passes: bool | Sequence[str] = True  # True: every core pass; False: none; a list: those passes, in order
    timeout: float | None = None  # seconds a query may run (QueryTimeout past it); None: no limit
    llm_inflight: int | None = None  # LLM requests kept at the server at once; None: the adapter's default
    # prefill splitting (the prefill pass and the adapters' warm-ups)
    prefill_split: bool = True
    min_prefill_tokens: int = 32  # below one KV block (vLLM CPU: --block-size 32) a prefill warms nothing
    prefill_lead: float = 0.3  # split only when the late inputs are expected this many seconds after the early
    progressive_prefill: bool = True  # warm the answer prompt as pipelined retrieval's documents arrive
    warmup_max_busy: int = 4  # no warm-up while this many LLM requests of the runtime are running
    exact_embeddings: bool = False  # True: embed each query alone (bit-identical vectors, no cross-query batching)
    # True: a cross-encoder reranker's predict serves concurrent queries in one forward pass (LlamaIndex
    # SentenceTransformerRerank); a score may then differ from stock's in its last float bit, so off by default
    batch_cross_encoder: bool = False

    def pass_list(self) -> Sequence[str] | None:
        """``passes`` as :func:`ayo_core.passes.optimize_graph` takes them (None: all; []: none)."""
        if self.passes is True:
            return None
        if self.passes is False:
            return []
        return list(self.passes)
