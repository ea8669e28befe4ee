"""The LlamaIndex distributions ``ayo_shims`` touches, the versions they were checked on, and :func:`mirrored`.

Shared by :mod:`ayo_shims.llamaindex` and the modules it declares touchpoints with
(:mod:`ayo_shims.llamaindex_embeddings`, :mod:`ayo_shims.llamaindex_workflows`), which import these
names from here, never from :mod:`ayo_shims.llamaindex` (no import circle).
"""

from __future__ import annotations

from ayo_shims.touchpoints import declare, has_attr

CORE = "llama-index-core"
CORE_CHECKED = "0.14.x (checked 0.14.25)"
OPENAI_LLM = "llama-index-llms-openai"
OPENAI_LLM_CHECKED = "0.8.x (checked 0.8.3)"
HF_EMBED = "llama-index-embeddings-huggingface"
HF_EMBED_CHECKED = "0.8.x (checked 0.8.0)"
INSTRUMENTATION = "llama-index-instrumentation"
INSTRUMENTATION_CHECKED = "0.6.x (checked 0.6.0)"
CHROMA = "llama-index-vector-stores-chroma"
CHROMA_CHECKED = "0.6.x (checked 0.6.0)"
SBERT = "sentence-transformers"
SBERT_CHECKED = "6.x (checked 6.3.0)"
# the distributions ayo_llamaindex touches -> the module whose import means it is in use (None: always)
FRAMEWORKS = {CORE: None, INSTRUMENTATION: None, OPENAI_LLM: "llama_index.llms.openai",
              HF_EMBED: "llama_index.embeddings.huggingface", CHROMA: "llama_index.vector_stores.chroma",
              "openai": "openai", "llama-index-workflows": None,
              "llama-index-embeddings-openai": "llama_index.embeddings.openai",
              SBERT: "sentence_transformers"}


# -- methods whose stock behaviour Ayo mirrors ----------------------------------------------
# ``ayo_llamaindex`` reproduces what these methods do (or calls them at its own time); a user
# subclass overriding one stays opaque (``ayo_core.introspect.overridden`` compares them by identity). A
# release that renames one would make the mirror stale without anyone noticing: declared here.

def mirrored(module: str, qualname: str, methods: tuple[str, ...], *, framework: str = CORE,
             checked: str = CORE_CHECKED, why: str) -> tuple[str, ...]:
    """Declare that Ayo mirrors ``methods`` of ``module.qualname``; returns ``methods``."""
    declare(f"{module}.{qualname} mirrored methods", framework=framework, checked=checked, why=why,
            check=has_attr(module, qualname, *methods))
    return methods
