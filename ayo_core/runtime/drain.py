"""Which nodes a failure dooms when a query drains instead of failing fast.

A graph with ``meta["drain_on_failure"]`` mirrors a stock pipeline that lets the work it already
started finish before the error propagates: LangChain's sync ``RunnableParallel.invoke`` submits
every branch to a thread pool and leaves the pool (waiting for all of them) before it raises. The
query then cancels only what can no longer run (whatever waits, directly or through an expansion,
on the failed node) and what Ayo added on its own (optional nodes), and raises once the rest is done.
"""

from __future__ import annotations

from collections.abc import Mapping

from ayo_core.graph import Graph


def doomed_by(graph: Graph, failed: str, expanded_to: Mapping[str, str]) -> set[str]:
    """``failed`` and every node that can never get its inputs because of it: its consumers, their
    consumers, and any expanded node whose expansion's output is among them (it waits for that)."""
    doomed: set[str] = set()
    todo = [failed]
    while todo:
        name = todo.pop()
        if name in doomed or name not in graph.nodes:
            continue
        doomed.add(name)
        todo += graph.consumers(name)
        todo += [n for n, out in expanded_to.items() if out == name]
    return doomed | {n for n, node in graph.nodes.items() if node.meta.get("optional")}
