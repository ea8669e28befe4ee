"""Module templates: what adapters lower recognised modules to, and how each becomes primitives.

Each template's ``build(graph, name, inputs, after=())`` adds its primitive nodes
and returns the node holding its result; :class:`ShapeCache` caches
build+optimize by shape.
"""

from ayo_core.templates.base import Template, call_llm, hit_text, with_score
from ayo_core.templates.bound import (
    FusionHooks,
    FusionRetrieval,
    IndexingHooks,
    RerankHooks,
    RetrievalHooks,
    SynthesisHooks,
)
from ayo_core.templates.cache import ShapeCache, shape_key
from ayo_core.templates.flow import Aggregate, Route, Warmup
from ayo_core.templates.llm import LLMCall, QueryExpansion, Rerank
from ayo_core.templates.local import LocalRerank, Opaque, ToolCall, Transform
from ayo_core.templates.retrieval import Indexing, Retrieval, to_records
from ayo_core.templates.steps import StepLLMCall, StepRetrieval
from ayo_core.templates.synthesis import Synthesis, greedy_pack

__all__ = [
    "Aggregate", "FusionHooks", "FusionRetrieval", "Indexing", "IndexingHooks", "LLMCall", "LocalRerank", "Opaque",
    "QueryExpansion", "Rerank", "RerankHooks", "Retrieval", "RetrievalHooks", "Route", "ShapeCache", "StepLLMCall",
    "StepRetrieval", "Synthesis", "SynthesisHooks", "Template", "ToolCall", "Transform", "Warmup", "call_llm",
    "greedy_pack", "hit_text", "shape_key", "to_records", "with_score",
]
