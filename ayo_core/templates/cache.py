"""The shape cache: build + optimize a graph once per shape, hand out per-query copies.

Queries of one pipeline with the same shape (number of chunks, expansions,
synthesis mode: whatever the templates' ``shape()`` say) get the same graph;
only the INPUT values differ. A hit costs a dict lookup and a shallow copy,
which keeps per-query build+optimize far below a millisecond.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ayo_core.graph import Graph
from ayo_core.passes.manager import Pass, optimize_graph


def shape_key(*parts: Any) -> Hashable:
    """A cache key from templates (their ``shape()``) and any other hashable parts."""
    return tuple(p.shape() if hasattr(p, "shape") and callable(p.shape) else p for p in parts)


class ShapeCache:
    """LRU cache of optimized graphs by shape key.

    ``passes=None`` runs all passes; pass ``passes=[]`` to cache unoptimized graphs.
    """

    def __init__(self, passes: Sequence[Pass | str] | None = None, maxsize: int = 256, debug: bool = False):
        self.passes, self.maxsize, self.debug = passes, maxsize, debug
        self._graphs: OrderedDict[Hashable, Graph] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, build: Callable[[], Graph], query_id: str) -> Graph:
        """The optimized graph for ``key`` (built with ``build()`` on a miss) as query ``query_id``'s copy.

        The copy's ``meta["overhead"]`` holds this call's build and passes seconds.
        """
        t0 = time.perf_counter()
        cached = self._graphs.get(key)
        if cached is not None:
            self._graphs.move_to_end(key)
            self.hits += 1
            g = cached.for_query(query_id)
            g.meta["overhead"] = {"build": time.perf_counter() - t0, "passes": 0.0}
            return g
        self.misses += 1
        built = build()
        t1 = time.perf_counter()
        built.meta.pop("overhead", None)
        optimized = optimize_graph(built, self.passes, debug=self.debug) if self.passes != [] else built.copy()
        t2 = time.perf_counter()
        optimized.topo_order()  # computed once, shared by every copy
        optimized.depths()
        self._graphs[key] = optimized
        if len(self._graphs) > self.maxsize:
            self._graphs.popitem(last=False)
        g = optimized.for_query(query_id)
        g.meta["overhead"] = {"build": t1 - t0, "passes": t2 - t1}
        return g

    def template(self, key: Hashable, build: Callable[[], Graph]) -> Graph:
        """The cached optimized graph of ``key`` itself (built on a miss): the shape, not a query's copy."""
        if key not in self._graphs:
            self.get(key, build, "template")
        return self._graphs[key]

    def clear(self) -> None:
        self._graphs.clear()

    def __len__(self) -> int:
        return len(self._graphs)
