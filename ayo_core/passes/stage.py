"""Stage decomposition (paper: "stage decomposition").

Needs: nodes that are ``batchable`` and ``splittable`` with ``meta["split"] =
Splitter(...)``; optionally ``meta["size"]`` (items known at build time).

Guarantees: each such node ``n`` becomes ``k`` micro-batch nodes ``n#0..n#k-1``
(same op and engine, each computing slice ``i`` of ``k`` of the data at run
time) and an AGGREGATE named ``n`` that merges their values, so consumers and
ordering edges are untouched and results are equal. ``k`` comes from the size
(``min_items`` per part, at most ``max_parts``) or ``default_parts`` when the
size is unknown. A contiguous node split along the same ``axis`` as an
elementwise producer that was split with the same ``k`` takes micro-batch ``i``
straight from the producer's micro-batch ``i`` (embed -> ingest pipelines).

Example::

    before: chunks ==> embed(48) ==> ingest
    after:  chunks ==> embed#0 ==> ingest#0 ==> ingest(AGGREGATE)
            chunks ==> embed#1 ==> ingest#1 ==^      (embed is also re-joined as embed(AGGREGATE))
"""

from __future__ import annotations

import math
from typing import Any

from ayo_core.graph import Graph, Node, Op, Splitter, slice_inputs
from ayo_core.passes.base import PassResult
from ayo_core.runtime.execute import is_async_callable

_DROP_META = ("split", "size", "prefix")


class _Slicer:
    def __init__(self, splitter: Splitter, index: int, k: int, presliced: frozenset[str]):
        self.splitter, self.index, self.k, self.presliced = splitter, index, k, presliced

    def inputs(self, inputs: dict[str, Any]) -> dict[str, Any] | None:
        """This micro-batch's inputs, or None when its slice is empty (the result is ``empty()``)."""
        s = self.splitter
        if not s.kwargs:
            return s.split(inputs, self.k)[self.index]
        cut = [kw for kw in s.kwargs if kw not in self.presliced]
        sliced = slice_inputs(inputs, cut, self.index, self.k)
        if s.empty is not None and all(isinstance(sliced.get(kw), (list, tuple)) and not sliced[kw]
                                       for kw in s.kwargs if kw in sliced):
            return None
        return sliced


class AsyncPartFn(_Slicer):
    def __init__(self, fn: Any, *args: Any):
        super().__init__(*args)
        self.fn = fn

    async def __call__(self, ctx: Any, /, **inputs: Any) -> Any:
        sliced = self.inputs(inputs)
        return self.splitter.empty() if sliced is None else await self.fn(ctx, **sliced)


class SyncPartFn(_Slicer):
    def __init__(self, fn: Any, *args: Any):
        super().__init__(*args)
        self.fn = fn

    def __call__(self, ctx: Any, /, **inputs: Any) -> Any:
        sliced = self.inputs(inputs)
        return self.splitter.empty() if sliced is None else self.fn(ctx, **sliced)


class MergeFn:
    def __init__(self, merge: Any, k: int):
        self.merge, self.k = merge, k

    def __call__(self, ctx: Any, /, **parts: Any) -> Any:
        return self.merge([parts[f"p{i}"] for i in range(self.k)])


def _choose_k(node: Node, max_parts: int, min_items: int, default_parts: int) -> int:
    size = node.meta.get("size")
    if size is None:
        return default_parts
    return max(1, min(max_parts, math.ceil(size / max(1, min_items)) if size >= 2 * min_items else 1))


def stage_decomposition(g: Graph, max_parts: int = 4, min_items: int = 16, default_parts: int = 2) -> PassResult:
    """Split batchable+splittable nodes into micro-batches; see the module docstring."""
    out = g.copy()
    split_info: dict[str, tuple[str | None, int, bool]] = {}  # name -> (axis, k, elementwise)
    changed = False
    for name in g.topo_order():
        node = g.nodes[name]
        splitter = node.meta.get("split")
        if not (node.batchable and node.splittable and isinstance(splitter, Splitter)) or node.meta.get("per_part"):
            continue
        chained = {kw: g.nodes.get(node.inputs[kw]) for kw in splitter.kwargs if kw in node.inputs}
        chained = {kw: src.name for kw, src in chained.items()
                   if src is not None and src.name in split_info and splitter.axis is not None
                   and split_info[src.name][0] == splitter.axis and split_info[src.name][2]}
        k = split_info[next(iter(chained.values()))][1] if chained else _choose_k(node, max_parts, min_items,
                                                                                   default_parts)
        chained = {kw: src for kw, src in chained.items() if split_info[src][1] == k}
        if k < 2:
            continue
        _split_node(out, node, splitter, k, chained)
        split_info[name] = (splitter.axis, k, splitter.elementwise)
        changed = True
    return PassResult(out, changed)


def _split_node(out: Graph, node: Node, splitter: Splitter, k: int, chained: dict[str, str]) -> None:
    presliced = frozenset(chained)
    meta = {key: v for key, v in node.meta.items() if key not in _DROP_META}
    part_cls = AsyncPartFn if is_async_callable(node.fn) else SyncPartFn
    out.remove(node.name)
    for i in range(k):
        inputs = {kw: (f"{chained[kw]}#{i}" if kw in chained else src) for kw, src in node.inputs.items()}
        out.add(node.replace(name=f"{node.name}#{i}", fn=part_cls(node.fn, splitter, i, k, presliced), inputs=inputs,
                             splittable=False, cost=node.cost / k,
                             meta={**meta, "split_of": node.name, "split_index": i}))
    out.add(Node(node.name, Op.AGGREGATE, fn=MergeFn(splitter.merge, k), inputs={f"p{i}": f"{node.name}#{i}"
                                                                                for i in range(k)},
                 module=node.module, cost=0.0,
                 meta={key: v for key, v in meta.items() if key in ("parts", "resources")} | {"split_into": k}))
