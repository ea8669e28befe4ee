"""``OptimizedRunnable.explain()``: the module tree, what stayed opaque, the last graph and trace."""

from __future__ import annotations

from typing import Any

from ayo_langchain.capture import format_tree


def explain(fast: Any) -> str:
    plan = fast.plan
    lines = [f"Ayo plan for {fast.get_name()} (policy {plan.policy})", "", "modules:",
             format_tree(plan.root, 1)]
    opaque = plan.capturer.opaque
    if fast.as_is():
        lines += ["", "the whole chain is one opaque node: every call runs the user's object itself"]
    lines += ["", f"opaque ({len(opaque)}): " + ("none" if not opaque else "")]
    lines += [f"  {label}: {reason}" for label, reason in opaque]
    lines += ["", "engines:",
              f"  llm: {plan.llm!r}" + ("" if plan.llm else " (no ChatOpenAI/OpenAI with base_url: models run as-is)"),
              f"  embed: {plan.embed!r}" + ("" if plan.embed else " (no Chroma+HuggingFaceEmbeddings retriever)"),
              f"  routed models: {len(plan.routed)}"]
    g = fast.last_graph
    if g is not None:
        lines += ["", "last graph:", g.format()]
        fired = g.meta.get("passes") or g.meta.get("passes_fired")
        if fired:
            lines.append(f"passes fired: {fired}")
    trace = fast.last_trace
    if trace is not None:
        s = trace.summary()
        bound, latency = s["critical_path_bound_s"], s["latency_s"]
        eff = f"{bound / latency:.2f}" if latency > 0 else "n/a"
        lines += ["", f"last trace: latency {latency:.3f}s, critical-path bound {bound:.3f}s, efficiency {eff}",
                  f"  nodes executed {s['nodes_executed']}, engine batches {s['engine_batches']}",
                  f"  overhead {({k: round(v, 4) for k, v in s['overhead_s'].items()})}"]
        for op, row in s["stage_breakdown"].items():
            lines.append(f"  {op:16s} busy {row['busy']:.3f}s wall {row['wall']:.3f}s x{row['count']}")
    return "\n".join(lines)
