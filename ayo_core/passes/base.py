"""What every pass returns."""

from __future__ import annotations

from typing import NamedTuple

from ayo_core.graph import Graph


class PassResult(NamedTuple):
    """A pass's output graph and whether it changed anything (unpacks as ``graph, changed``)."""

    graph: Graph
    changed: bool
