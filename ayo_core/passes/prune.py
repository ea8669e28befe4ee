"""Dependency pruning (Ayo/Teola paper, "dependency pruning").

Needs: nodes whose ``after`` edges reproduce the stock pipeline's sequential
order; ``side_effect`` flags and, where known, ``meta["resources"]``.

Guarantees: only data edges remain, plus the ordering edges needed so that any
two *conflicting* nodes (at least one has a side effect and their resources
overlap or are unknown) run in the same relative order as before. Results
therefore equal the original graph's. A kept edge may be re-targeted to the
nearest conflicting predecessor (the stock order's transitive chain through
pure nodes is dropped).

Example (``after`` edges as ``-->``, data edges as ``==>``)::

    before: ingest --> embed_query --> search       (search reads what ingest wrote)
    after:  ingest --> search;  embed_query ==> search
            (embed_query now runs concurrently with ingest)
"""

from __future__ import annotations

from ayo_core.graph import Graph, Node, Op
from ayo_core.passes.base import PassResult

_NO_EFFECT = (Op.INPUT, Op.OUTPUT)


def conflicts(a: Node, b: Node) -> bool:
    """Must ``a`` and ``b`` keep their relative order?"""
    if a.op in _NO_EFFECT or b.op in _NO_EFFECT:
        return False
    if not (a.side_effect or b.side_effect):
        return False
    ra, rb = a.meta.get("resources"), b.meta.get("resources")
    if ra is None or rb is None:
        return True  # unknown resources: keep the order to be safe
    return bool(set(ra) & set(rb))


def dependency_pruning(g: Graph) -> PassResult:
    """Drop ``after`` edges that are not needed; see the module docstring."""
    order = g.topo_order()
    position = {n: i for i, n in enumerate(order)}
    old_anc: dict[str, set[str]] = {}
    new_anc: dict[str, set[str]] = {}
    new_after: dict[str, set[str]] = {}
    for name in order:
        node = g.nodes[name]
        old_anc[name] = set().union(*([old_anc[d] | {d} for d in node.deps if d in old_anc] or [set()]))
        anc = set().union(*([new_anc[d] | {d} for d in node.inputs.values() if d in new_anc] or [set()]))
        keep: set[str] = set()
        # latest predecessors first: ordering after them usually implies the earlier ones
        for u in sorted(old_anc[name], key=position.__getitem__, reverse=True):
            if u not in anc and conflicts(g.nodes[u], node):
                keep.add(u)
                anc |= new_anc[u] | {u}
        new_anc[name], new_after[name] = anc, keep
    out = g.copy()
    changed = False
    for name in order:
        node = g.nodes[name]
        if new_after[name] != set(node.after):
            out.replace(node.replace(after=frozenset(new_after[name])))
            changed = True
    return PassResult(out, changed)
