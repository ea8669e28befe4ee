"""Decode pipelining (paper: "decoding pipelining").

Needs: a streamable producer (a DECODE with ``meta["parts"]``, or any node that
publishes parts with ``ctx.emit``) and a consumer with ``meta["per_part"] =
kwarg`` that maps over the producer's parts.

Guarantees: such consumers get ``meta["pipelined"] = True``; the runtime then
runs them once per part as each part is emitted, while the producer is still
generating, and their value is the list of per-part values in order — the same
list the reference interpreter's map over the whole output gives. Chains
propagate: a pipelined consumer is itself a streaming producer of its values.

Example::

    before: expand(decode, 3 queries) ==> embed_each(per_part) ==> search_each(per_part)
    after:  the same edges; embed_each/search_each run for query 1 while query 2 is decoded
"""

from __future__ import annotations

from ayo_core.graph import Graph
from ayo_core.passes.base import PassResult


def decode_pipelining(g: Graph) -> PassResult:
    """Mark per-part consumers of streaming producers as pipelined."""
    out = g.copy()
    streaming = {n.name for n in g.nodes.values() if n.streamable}
    changed = False
    for name in g.topo_order():
        node = g.nodes[name]
        kw = node.meta.get("per_part")
        if kw is None or kw not in node.inputs:
            continue
        if node.inputs[kw] not in streaming:
            continue
        streaming.add(name)
        if not node.meta.get("pipelined"):
            out.replace(node.with_meta(pipelined=True))
            changed = True
    return PassResult(out, changed)
