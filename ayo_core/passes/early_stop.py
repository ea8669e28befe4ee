"""Early stop of a decode whose consumer keeps a bounded prefix of its parts.

Needs: a streamable DECODE with ``meta["parts"]`` (its parser) and ``meta["keep_parts"] = n``:
the module that reads the output keeps only its first ``n`` parts and discards the rest
(LlamaIndex's ``QueryFusionRetriever`` keeps ``num_queries - 1`` generated lines; a
parser that keeps the first N items). Stock decodes on to ``max_tokens`` and then
throws the tail away.

Guarantees: the node gets ``meta["early_stop"] = True``; the runtime then streams the
decode and ends the request (``StopStream``) as soon as ``n`` parts are final, so the
value the consumer keeps is the same and the tail is never decoded. Each node it marks
is listed in ``graph.meta["optimizations"]``.

Example::

    before: expand(decode, keep_parts=2) ==> retrieve_each(per_part)   decodes to max_tokens
    after:  expand(decode, keep_parts=2, early_stop) ==> ...            stops after line 2
"""

from __future__ import annotations

from ayo_core.graph import Graph, Node, Op
from ayo_core.passes.base import PassResult


def early_stop(g: Graph) -> PassResult:
    """Mark decodes whose kept parts are bounded for an early stop; see the module docstring."""
    marked: dict[str, Node] = {}
    for name, node in g.nodes.items():
        keep = node.meta.get("keep_parts")
        if keep is None or node.meta.get("early_stop") or node.op is not Op.DECODE:
            continue
        if not node.streamable or node.meta.get("parts") is None:
            continue  # nothing tells the runtime where a part ends
        marked[name] = node.with_meta(early_stop=True)
    if not marked:
        return PassResult(g.copy(), False)
    # rebuilt in the same node order: insertion order breaks ties in the topological order
    out = Graph(g.query_id, [marked.get(name, node) for name, node in g.nodes.items()], meta=g.meta)
    out.meta["optimizations"] = [*g.meta.get("optimizations", []), *(
        {"name": "early_stop", "node": name,
         "detail": f"the decode stops once {node.meta['keep_parts']} parts are final (its consumer keeps only those)"}
        for name, node in marked.items())]
    return PassResult(out, True)
