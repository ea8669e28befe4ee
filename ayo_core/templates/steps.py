"""Templates whose steps call an adapter's own code, with the node names the adapter gives.

An adapter that keeps a framework's objects in charge of each step (LangChain's retriever
opens and ends its own run around the embedding and the search; its model formats the
request) binds the steps of a template to callables ``fn(ctx, **inputs)`` and keeps its
structural node names (``"3.embed"``, ``"4.search"``: the runtime's cost model learns per
name). The primitive ops, engines, costs and meta stay the template's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ayo_core.graph import Graph, Node, Op, PrefixSpec
from ayo_core.templates.base import add_entry
from ayo_core.templates.llm import LLMCall
from ayo_core.templates.retrieval import Retrieval

NodeFn = Callable[..., Any]  # (ctx, **inputs) -> value, sync or async


class StepRetrieval(Retrieval):
    """Retrieval through the adapter's steps: ``embed(ctx, query)`` -> ``search(ctx, vector)`` as
    EMBED and SEARCH nodes named ``names`` (default ``<name>.embed``, ``<name>.search``), or, with
    ``retrieve(ctx, query)``, one SEARCH node that retrieves as a whole (a retriever Ayo calls as
    the user's object, or one query of many with ``per_part=True``). ``costs=(embed, search)``."""

    def __init__(self, module: str, *, embed: NodeFn | None = None, search: NodeFn | None = None,
                 retrieve: NodeFn | None = None, names: tuple[str, str] | None = None,
                 costs: tuple[float, float] = (0.0, 0.0), per_part: bool = False):
        if retrieve is None and (embed is None or search is None):
            raise ValueError(f"StepRetrieval ({module!r}) needs embed= and search=, or retrieve=")
        super().__init__(module, per_part=per_part, module=module)
        self.embed, self.search, self.retrieve, self.names, self.costs = embed, search, retrieve, names, costs

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "query")
        each = {"per_part": "query"} if self.per_part else {}
        if self.retrieve is not None:
            return add_entry(g, Node(name, Op.SEARCH, fn=self.retrieve, inputs={"query": inputs["query"]},
                                     engine="embed", module=self.module, cost=sum(self.costs),
                                     meta={"resources": frozenset(), **each}), after)
        embed_name, search_name = self.names or (f"{name}.embed", f"{name}.search")
        add_entry(g, Node(embed_name, Op.EMBED, fn=self.embed, inputs={"query": inputs["query"]}, engine="embed",
                          module=self.module, batchable=True, cost=self.costs[0],
                          meta={"resources": frozenset(), **each}), after)
        g.add(Node(search_name, Op.SEARCH, fn=self.search, inputs={"vector": embed_name}, engine="vector",
                   module=self.module, cost=self.costs[1],
                   meta={"resources": frozenset(), **({"per_part": "vector"} if self.per_part else {})}))
        return search_name

    def shape(self) -> Hashable:
        return ("StepRetrieval", self.per_part, self.retrieve is not None)


class StepLLMCall(LLMCall):
    """An LLMCall whose call is the adapter's (``call(ctx, rendered)``) and whose early prefill is a
    ready :class:`PrefixSpec` (``prefix_spec``: the adapter renders the prefix itself, e.g. as the
    token ids of the final request)."""

    def __init__(self, render: NodeFn, module: str, *, call: NodeFn, prefix_spec: PrefixSpec | None = None,
                 **kw: Any):
        super().__init__(render, module, call=call, **kw)
        self.prefix_spec = prefix_spec

    def node(self, name: str, inputs: Mapping[str, str]) -> Node:
        node = super().node(name, inputs)
        return node.with_meta(prefix=self.prefix_spec) if self.prefix_spec is not None else node

    def shape(self) -> Hashable:
        return (*super().shape(), self.prefix_spec is not None)
