"""Templates bound to an adapter's own callables: the framework's code runs inside each step.

The default templates render prompts through hooks but call engines themselves. An
adapter that must keep a framework's whole control flow (LlamaIndex's synthesizers,
its fusion retriever, ``LLMRerank``'s batching and parsing) binds each *step* of a
template to one callable instead: ``fn(ctx, **inputs)``, where ``ctx`` gives the step
its engines and stream callback. The template still decides the step structure, the
primitive ops, the costs the scheduler starts from, which steps wait for the stock
order (``after``), what streams and what maps over parts; the adapter only says what
each step calls. Each step is one node named ``{name}.{step}`` after its hook.

Pass the hooks object as the template's ``hooks=`` option (``Retrieval``,
``Rerank``, ``Synthesis``, ``Indexing``) or use :class:`FusionRetrieval`.
In bound mode a step's inputs are the names the adapter passed to ``build`` (its
callables take those keywords), not the template's default input names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ayo_core.graph import Graph, Node, Op, PrefixSpec
from ayo_core.templates.base import Template, add_entry

NodeFn = Callable[..., Any]  # async (ctx, **inputs) -> value


def _require(template: Any, inputs: Mapping[str, str], *names: str) -> None:
    missing = [n for n in names if n not in inputs]
    if missing:
        raise ValueError(f"{type(template).__name__} template ({template.module!r}) bound with hooks needs inputs "
                         f"{missing}; pass inputs={{{', '.join(repr(m) + ': <node name>' for m in missing)}}}")


@dataclass(frozen=True)
class RetrievalHooks:
    """``embed(ctx, query)`` (the query embedding on ``engine``) then ``search(ctx, query, embedded)``.

    The stock order (``after``) holds only the search: embedding a query never waits for the index.
    """

    embed: NodeFn
    search: NodeFn
    engine: str = "local"


def build_retrieval(t: Any, h: RetrievalHooks, g: Graph, name: str, inputs: Mapping[str, str],
                    after: Iterable[str]) -> str:
    _require(t, inputs, "query")
    q = inputs["query"]
    g.add(Node(f"{name}.embed", Op.EMBED, fn=h.embed, inputs={"query": q}, engine=h.engine, module=t.module,
               batchable=True, cost=0.02))
    return add_entry(g, Node(f"{name}.search", Op.SEARCH, fn=h.search, inputs={"query": q, "embedded": f"{name}.embed"},
                             module=t.module, cost=0.01), after)


@dataclass(frozen=True)
class IndexingHooks:
    """``embed(ctx, **inputs)`` -> vectors on ``engine``, then ``add(ctx, vectors)`` writes them to the store.

    ``n_chunks`` sizes the embed step's cost; the write touches ``vector:<collection>``.
    """

    embed: NodeFn
    add: NodeFn
    engine: str = "local"
    n_chunks: int = 1


def build_indexing(t: Any, h: IndexingHooks, g: Graph, name: str, inputs: Mapping[str, str],
                   after: Iterable[str]) -> str:
    add_entry(g, Node(f"{name}.embed", Op.EMBED, fn=h.embed, inputs=dict(inputs), engine=h.engine, module=t.module,
                      batchable=True, cost=0.02 * max(1, h.n_chunks)), after)
    g.add(Node(f"{name}.add", Op.INGEST, fn=h.add, inputs={"vectors": f"{name}.embed"}, module=t.module,
               side_effect=True, cost=0.01, meta={"resources": frozenset({f"vector:{t.collection}"})}))
    return f"{name}.add"


@dataclass(frozen=True)
class RerankHooks:
    """LLM rerank in batches: ``batches(ctx, **inputs)`` -> batches, ``choose(ctx, query, batch)`` one
    decode per batch on ``engine`` (all in flight at once), ``merge(ctx, batches, raw)`` -> kept hits."""

    batches: NodeFn
    choose: NodeFn
    merge: NodeFn
    engine: str = "local"


def build_rerank(t: Any, h: RerankHooks, g: Graph, name: str, inputs: Mapping[str, str],
                 after: Iterable[str]) -> str:
    _require(t, inputs, "query")
    add_entry(g, Node(f"{name}.batches", Op.TRANSFORM, fn=h.batches, inputs=dict(inputs), module=t.module,
                      cost=0.001), after)
    g.add(Node(f"{name}.choose", Op.DECODE, fn=h.choose, inputs={"query": inputs["query"], "batch": f"{name}.batches"},
               engine=h.engine, module=t.module, batchable=True, cost=1.0, meta={"per_part": "batch"}))
    g.add(Node(f"{name}.merge", Op.AGGREGATE, fn=h.merge, module=t.module, cost=0.001,
               inputs={"batches": f"{name}.batches", "raw": f"{name}.choose"}))
    return f"{name}.merge"


@dataclass(frozen=True)
class SynthesisHooks:
    """The whole synthesis as one decode step: ``run(ctx, **inputs)`` -> the response, on ``engine``.

    ``prefix``: the prompt prefix known before the chunks (prefill splitting).
    """

    run: NodeFn
    engine: str = "local"
    prefix: PrefixSpec | None = None


def build_synthesis(t: Any, h: SynthesisHooks, g: Graph, name: str, inputs: Mapping[str, str],
                    after: Iterable[str]) -> str:
    meta: dict[str, Any] = {"mode": t.mode_label}
    if h.prefix is not None:
        meta["prefix"] = h.prefix
    return add_entry(g, Node(name, Op.DECODE, fn=h.run, inputs=dict(inputs), engine=h.engine, module=t.module,
                             cost=1.5, meta=meta), after)


@dataclass(frozen=True)
class FusionHooks:
    """Query expansion fused with retrieval (LlamaIndex ``QueryFusionRetriever``).

    ``expand(ctx, query)`` decodes the generated queries on ``engine``; while it streams,
    ``parts(text)`` gives the finished queries plus the one still being decoded.
    ``original(ctx, query)`` retrieves the user's query (during the decode),
    ``generated(ctx, queries)`` one generated query (once per part, as each is decoded),
    ``fuse(ctx, query, original, generated, queries)`` merges the results.
    ``keep_parts``: the fusion keeps only the first ``n`` generated queries, so the decode
    may stop once they are final (``ayo_core.passes.early_stop``); None: it reads them all.
    """

    expand: NodeFn
    parts: Callable[[str], list[Any]]
    original: NodeFn
    generated: NodeFn
    fuse: NodeFn
    engine: str = "local"
    keep_parts: int | None = None


class FusionRetrieval(Template):
    """QueryExpansion + Retrieval per query + fusion, bound to the adapter's steps (:class:`FusionHooks`).

    Inputs: ``query``. Steps: ``{name}.expand`` (streamed decode), ``{name}.original`` and
    ``{name}.generated`` (searches; the stock order ``after`` holds them, never the decode),
    ``{name}.fuse`` (the value).
    """

    kind = "fusion_retrieval"

    def __init__(self, hooks: FusionHooks, module: str | None = None):
        super().__init__(module)
        self.hooks = hooks

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "query")
        h, q, m = self.hooks, inputs["query"], self.module
        expand_meta: dict[str, Any] = {"parts": h.parts}
        if h.keep_parts is not None:
            expand_meta["keep_parts"] = h.keep_parts
        g.add(Node(f"{name}.expand", Op.DECODE, fn=h.expand, inputs={"query": q}, engine=h.engine, module=m,
                   streamable=True, cost=1.0, meta=expand_meta))
        add_entry(g, Node(f"{name}.original", Op.SEARCH, fn=h.original, inputs={"query": q}, module=m, cost=0.03),
                  after)
        add_entry(g, Node(f"{name}.generated", Op.SEARCH, fn=h.generated, inputs={"queries": f"{name}.expand"},
                          module=m, cost=0.03, meta={"per_part": "queries", "pipelined": True}), after)
        g.add(Node(f"{name}.fuse", Op.AGGREGATE, fn=h.fuse, module=m, cost=0.001,
                   inputs={"query": q, "original": f"{name}.original", "generated": f"{name}.generated",
                           "queries": f"{name}.expand"}))
        return f"{name}.fuse"

    def shape(self) -> Hashable:
        return ("FusionRetrieval",)
