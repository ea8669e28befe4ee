"""``OptimizedPipeline``: capture once, lower, optimize (cached by shape), run, keep the trace.

The sequence every adapter's stand-in runs per query::

    capture (once) -> lower (GraphBuilder) -> lint -> passes -> Runtime.run -> the user's exception -> last_trace

Optimized graphs are cached by a *shape key* the adapter supplies for a call (the core's
:class:`~ayo_core.templates.cache.ShapeCache`): a constant for a pipeline whose graph never changes
(a static query engine: built and linted once, at construction, then copied per query), or None
for a call whose nodes close over that call's own state (a LangChain call's run managers): then
the graph is lowered and optimized for that call alone. Overhead goes into the graph's
``meta["overhead"]`` (the trace's ``overhead``): capture on the first query, build and passes on
each. A node's failure comes out as the user's own exception (:func:`unwrap_node_failure`), with
its own cause, as the stock pipeline raises it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from ayo_core.caller_code import running_ayo_code
from ayo_core.explain import Explanation, explanation
from ayo_core.graph import Graph
from ayo_core.passes import optimize_graph
from ayo_core.pipeline.options import Options
from ayo_core.runtime.errors import NodeFailed, unwrap_node_failure
from ayo_core.runtime.scheduler import Runtime
from ayo_core.templates.cache import ShapeCache

P = TypeVar("P")
CACHED_SHAPES = 256  # optimized graphs kept per pipeline (one per shape key)
_query_ids = itertools.count()  # process-wide: queries of different pipelines meet in the shared schedulers


class OptimizedPipeline(Generic[P]):
    """One optimized pipeline: ``plan = capture()`` once; per call ``lower(plan, call) -> Graph``.

    ``runtime()`` is the runtime a query runs on (called on the loop that runs it); ``shape_key(call)``
    the call's cache key (None: not cacheable); ``static``: the graph has one shape and is built now
    (a lowering error surfaces at construction, as ``optimize()`` promises); ``query_prefix`` names
    the queries of a cached graph (``li0``, ``li1``, ...; a per-call graph is named by the runtime).
    """

    def __init__(self, capture: Callable[[], P], lower: Callable[[P, Any], Graph], options: Options | None = None, *,
                 runtime: Callable[[], Runtime], shape_key: Callable[[Any], Hashable | None] | None = None,
                 static: bool = False, query_prefix: str = "q") -> None:
        t0 = time.perf_counter()
        self.options = options or Options()
        self.plan: P = capture()
        self._lower, self._runtime = lower, runtime
        self._shape_key = (lambda call: "static") if static else shape_key
        self.cache = ShapeCache(passes=self.options.pass_list(), maxsize=CACHED_SHAPES)
        self.query_prefix = query_prefix
        self.last_trace: Any = None
        self.last_graph: Graph | None = None
        self.template: Graph | None = self.cache.template("static", lambda: self._build(None)) if static else None
        self.capture_s = time.perf_counter() - t0
        self._captured_reported = False

    # ---- graphs ---------------------------------------------------------------------------
    def _build(self, call: Any) -> Graph:
        g = self._lower(self.plan, call)
        g.lint()
        return g

    def graph(self, call: Any = None) -> Graph:
        """The optimized graph of one query ``call``: a copy of the cached shape, or lowered for this call alone."""
        key = self._shape_key(call) if self._shape_key is not None else None
        if key is None:
            t0 = time.perf_counter()
            g = self._lower(self.plan, call)
            g.meta["overhead"] = {"build": time.perf_counter() - t0}
            passes = self.options.pass_list()
            g = optimize_graph(g, passes) if passes != [] else g
        else:
            g = self.cache.get(key, lambda: self._build(call), f"{self.query_prefix}{next(_query_ids)}")
        return g

    # ---- running --------------------------------------------------------------------------
    async def run(self, inputs: Mapping[str, Any], call: Any = None, graph: Graph | None = None) -> Any:
        """Run one query (``graph``, or :meth:`graph` of ``call``); its value. ``last_trace`` is its trace."""
        value, _trace = await self.run_traced(inputs, call, graph)
        return value

    async def run_traced(self, inputs: Mapping[str, Any], call: Any = None,
                         graph: Graph | None = None) -> tuple[Any, Any]:
        """:meth:`run`, returning ``(value, trace)`` (this query's trace, whatever others ran meanwhile)."""
        with running_ayo_code():
            return await self._run_traced(inputs, call, graph)

    async def _run_traced(self, inputs: Mapping[str, Any], call: Any, graph: Graph | None) -> tuple[Any, Any]:
        g = graph if graph is not None else self.graph(call)
        if graph is None and not self._captured_reported:  # capture is paid once: by the first query run, not explain()
            self._captured_reported = True
            g.meta["overhead"] = {**g.meta.get("overhead", {}), "capture": self.capture_s}
        self.last_graph = g
        try:
            value, trace = await self._runtime().run(g, inputs, timeout=self.options.timeout)
        except NodeFailed as failed:
            # the user's own exception, as the stock pipeline raises it, with its own cause (the SDK
            # error a framework re-raised, carrying Ayo's note on the failed engine), not Ayo's wrapper
            error = unwrap_node_failure(failed)
            raise error from error.__cause__
        self.last_trace = trace
        return value, trace

    # ---- introspection --------------------------------------------------------------------
    def explain(self, title: str, **parts: Any) -> Explanation:
        """The explanation of this pipeline: ``parts`` are the adapter's (modules, opaque, lines...);
        the graph is the last query's (else the static template), the trace the last one."""
        graph = parts.pop("graph", None) or self.last_graph or self.template
        return explanation(title, graph=graph, trace=self.last_trace, **parts)

    def statistics(self) -> dict[str, Any]:
        """Shape-cache hits and misses, and the capture's seconds."""
        return {"cache_hits": self.cache.hits, "cache_misses": self.cache.misses, "shapes": len(self.cache),
                "capture_s": self.capture_s}
