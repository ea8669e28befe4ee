"""``OptimizedRunnable.explain()``: the module tree, what stayed opaque, the last graph and trace,
as the core's :class:`~ayo_core.explain.Explanation`."""

from __future__ import annotations

from typing import Any

from ayo_core.explain import Explanation, explanation
from ayo_langchain.capture import Module, Opaque, format_tree, walk


def lowered_modules(root: Module) -> list[tuple[str, str]]:
    """``(label, kind)`` of every captured module Ayo lowers (opaque ones are listed apart)."""
    return [(m.label(), m.kind) for m in walk(root) if not isinstance(m, Opaque)]


def explain(fast: Any) -> Explanation:
    plan = fast.plan
    notes = []
    if fast.as_is():
        notes.append("the whole chain is one opaque node: every call runs the user's object itself")
    notes += ["engines:",
              f"  llm: {plan.llm!r}" + ("" if plan.llm else " (no ChatOpenAI/OpenAI with base_url: models run as-is)"),
              f"  embed: {plan.embed!r}" + ("" if plan.embed else " (no Chroma+HuggingFaceEmbeddings retriever)"),
              f"  routed models: {len(plan.routed)}"]
    notes += [m.note() for m in walk(plan.root) if hasattr(m, "note")]  # what a lowering runs concurrently
    return explanation(f"Ayo plan for {fast.get_name()} (policy {plan.policy})", graph=fast.last_graph,
                       trace=fast.last_trace, modules=lowered_modules(plan.root),
                       opaque=list(plan.capturer.opaque), module_lines=[format_tree(plan.root, 1)], notes=notes)
