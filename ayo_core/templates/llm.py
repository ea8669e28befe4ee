"""LLM-backed templates: LLMCall, QueryExpansion, Rerank.

Prompts are never typed here: ``render`` hooks come from the adapter and use
the framework's own templates and formatting, so prompts stay identical to the
stock pipeline's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from ayo_core.graph import Graph, Node, Op, PrefixSpec, Splitter
from ayo_core.templates.base import (
    Rendered,
    Template,
    add_entry,
    call_llm,
    hit_text,
    maybe_await,
    prefill_prefix,
    with_score,
)


class _Decode:
    """Node fn of an LLM decode: render the prompt, call the LLM (streaming parts when asked), parse."""

    def __init__(self, render: Callable[..., Rendered], max_tokens: int, llm_kwargs: Mapping[str, Any] | None,
                 parse: Callable[[str], Any] | None, stream: bool, call: Callable[..., Any] | None):
        self.render, self.max_tokens, self.llm_kwargs = render, max_tokens, llm_kwargs
        self.parse, self.stream, self.call = parse, stream, call

    async def __call__(self, ctx: Any, /, **inputs: Any) -> Any:
        rendered = await maybe_await(self.render(**inputs))
        if self.call is not None:
            text = await self.call(ctx, rendered)
        else:
            text = await call_llm(ctx, rendered, max_tokens=self.max_tokens, llm_kwargs=self.llm_kwargs,
                                  stream=self.stream)
        return self.parse(text) if self.parse is not None else text


class _Prefix:
    def __init__(self, render_prefix: Callable[..., Rendered | None]):
        self.render_prefix = render_prefix

    async def __call__(self, ctx: Any, /, **early: Any) -> None:
        await prefill_prefix(ctx, await maybe_await(self.render_prefix(**early)))


class LLMCall(Template):
    """One LLM call: ``render(**inputs) -> prompt | messages`` then prefill+decode on the LLM engine.

    Inputs: any names. Value: the text, or ``parse(text)``. Options:
    ``prefix=(early_inputs, render_prefix)``: ``render_prefix(**early)`` gives a
    prompt prefix (a token prefix of the final prompt) that prefill splitting
    computes as soon as those inputs exist. ``parts=parser``: the output divides
    into parts (``parser(text) -> list``) that stream to per-part consumers.
    ``per_part="kw"``: one call per part of input ``kw``. ``call(ctx, rendered)``
    replaces the default ``ctx.llm.complete/chat`` call.
    """

    kind = "llm"

    def __init__(self, render: Callable[..., Rendered], module: str | None = None, *, max_tokens: int = 256,
                 parse: Callable[[str], Any] | None = None, parts: Callable[[str], list[Any]] | None = None,
                 prefix: tuple[Sequence[str], Callable[..., Rendered | None]] | None = None,
                 per_part: str | None = None, llm_kwargs: Mapping[str, Any] | None = None,
                 call: Callable[..., Any] | None = None, cost: float = 0.0):
        super().__init__(module)
        self.render, self.max_tokens, self.parse, self.parts = render, max_tokens, parse, parts
        self.prefix, self.per_part, self.llm_kwargs, self.call, self.cost = prefix, per_part, llm_kwargs, call, cost

    def node(self, name: str, inputs: Mapping[str, str]) -> Node:
        meta: dict[str, Any] = {"resources": frozenset()}
        if self.parts is not None:
            meta["parts"] = self.parts
        if self.per_part:
            meta["per_part"] = self.per_part
        if self.prefix is not None:
            early, render_prefix = self.prefix
            meta["prefix"] = PrefixSpec(tuple(early), _Prefix(render_prefix))
        fn = _Decode(self.render, self.max_tokens, self.llm_kwargs, self.parse, self.parts is not None, self.call)
        return Node(name, Op.DECODE, fn=fn, inputs=dict(inputs), engine="llm", module=self.module,
                    streamable=self.parts is not None, cost=self.cost, meta=meta)

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        return add_entry(g, self.node(name, inputs), after)

    def shape(self) -> Hashable:
        return ("LLMCall", self.per_part, self.parts is not None, self.prefix is not None)


def _wrap(ctx: Any, scored: list[Any]) -> list[list[Any]]:
    return [scored]


def _identity(ctx: Any, query: Any) -> Any:
    return query


class QueryExpansion(Template):
    """Generate ``n`` queries with one LLM call whose output streams one query per part.

    Inputs: ``query`` (plus any other names ``render`` takes). ``render(query=..., **other)``
    gives the prompt; ``parse(text) -> list[str]`` splits the output into queries
    (finished ones first: while streaming, every part but the last is final).
    Value: the list of generated queries; a per-part consumer (``Retrieval(per_part=True)``)
    gets each query while the next is still being decoded.
    """

    kind = "query_expansion"

    def __init__(self, n: int, render: Callable[..., Rendered], parse: Callable[[str], list[str]],
                 module: str | None = None, *, max_tokens: int = 128, llm_kwargs: Mapping[str, Any] | None = None,
                 call: Callable[..., Any] | None = None):
        super().__init__(module)
        self.n, self.render, self.parse = n, render, parse
        self.max_tokens, self.llm_kwargs, self.call = max_tokens, llm_kwargs, call

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "query")
        decode = LLMCall(self.render, self.module, max_tokens=self.max_tokens, parts=self.parse,
                         llm_kwargs=self.llm_kwargs, call=self.call).build(g, f"{name}.decode", inputs, after)
        g.add(Node(name, Op.TRANSFORM, fn=_identity, inputs={"query": decode}, module=self.module,
                   meta={"per_part": "query", "resources": frozenset()}))
        return name

    def shape(self) -> Hashable:
        return ("QueryExpansion", self.n)


class _Batches:
    def __init__(self, size: int):
        self.size = size

    def __call__(self, ctx: Any, hits: list[Any]) -> list[list[Any]]:
        hits = list(hits)
        return [hits[i:i + self.size] for i in range(0, len(hits), self.size)]


class _Select:
    def __init__(self, top_n: int, select: Callable[[list[tuple[Any, float]], int], list[Any]] | None):
        self.top_n, self.select = top_n, select

    def __call__(self, ctx: Any, scored: list[list[tuple[Any, float]]]) -> list[Any]:
        flat = [pair for batch in scored for pair in batch]
        if self.select is not None:
            return self.select(flat, self.top_n)
        ranked = sorted(range(len(flat)), key=lambda i: (-flat[i][1], i))  # stable: ties keep hit order
        return [with_score(flat[i][0], flat[i][1]) for i in ranked[:self.top_n]]


class _EngineScores:
    def __init__(self, engine: str):
        self.engine = engine

    async def __call__(self, ctx: Any, query: str, hits: list[Any]) -> list[tuple[Any, float]]:
        if not hits:
            return []
        results = await ctx.engine(self.engine).rerank(query, [hit_text(h) for h in hits])
        scores = [0.0] * len(hits)
        for pos, r in enumerate(results):  # RerankResult(index, score) objects, or plain scores in order
            if hasattr(r, "index"):
                scores[r.index] = float(r.score)
            else:
                scores[pos] = float(r)
        return list(zip(hits, scores, strict=True))


class _Flatten:
    def __call__(self, ctx: Any, hits: list[Any]) -> list[Any]:
        flat, seen = [], set()
        for group in hits:
            for hit in group if isinstance(group, list) else [group]:
                key = hit.get("id") if isinstance(hit, Mapping) else getattr(hit, "id", None)
                key = id(hit) if key is None else key
                if key not in seen:
                    seen.add(key)
                    flat.append(hit)
        return flat


class Rerank(Template):
    """Keep the ``top_n`` most relevant hits.

    ``mode="llm"`` (LlamaIndex ``LLMRerank``): hits go in batches of
    ``batch_size``, one LLM call per batch — ``render(query=, texts=)`` and
    ``parse(text, batch) -> [(hit, score)]`` — all batches run concurrently,
    then the best ``top_n`` (stable order on ties, or ``select(pairs, top_n)``).
    ``mode="engine"``: a cross-encoder engine (``ctx.engine(engine).rerank(query,
    texts) -> scores``), batchable and splittable.

    Inputs: ``query``, ``hits`` (a list, or a list of lists that is flattened
    and de-duplicated by id). Value: the selected hits.
    """

    kind = "rerank"

    def __init__(self, top_n: int, mode: str = "llm", module: str | None = None, *, batch_size: int = 10,
                 render: Callable[..., Rendered] | None = None,
                 parse: Callable[[str, list[Any]], list[tuple[Any, float]]] | None = None,
                 select: Callable[[list[tuple[Any, float]], int], list[Any]] | None = None, engine: str = "rerank",
                 max_tokens: int = 64, llm_kwargs: Mapping[str, Any] | None = None, n_hits: int | None = None):
        super().__init__(module)
        if mode not in ("llm", "engine"):
            raise ValueError(f"Rerank mode {mode!r} is not one of 'llm', 'engine'")
        if mode == "llm" and (render is None or parse is None):
            raise ValueError("Rerank(mode='llm') needs render(query=, texts=) and parse(text, batch) hooks")
        self.top_n, self.mode, self.batch_size, self.render, self.parse = top_n, mode, batch_size, render, parse
        self.select, self.engine, self.max_tokens, self.llm_kwargs, self.n_hits = select, engine, max_tokens, \
            llm_kwargs, n_hits

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        self._require(inputs, "query", "hits")
        pure = frozenset()
        flat = add_entry(g, Node(f"{name}.flatten", Op.TRANSFORM, fn=_Flatten(), inputs={"hits": inputs["hits"]},
                                 module=self.module, meta={"resources": pure}), after)
        if self.mode == "llm":
            g.add(Node(f"{name}.batches", Op.TRANSFORM, fn=_Batches(self.batch_size), inputs={"hits": flat},
                       module=self.module, meta={"resources": pure}))
            score = LLMCall(_RerankPrompt(self.render), self.module, max_tokens=self.max_tokens,
                            llm_kwargs=self.llm_kwargs, per_part="batch").node(
                f"{name}.score", {"query": inputs["query"], "batch": f"{name}.batches"})
            g.add(score.replace(fn=_ParseWith(score.fn, self.parse)))
            scored = f"{name}.score"
        else:
            size = {"size": self.n_hits} if self.n_hits else {}
            g.add(Node(f"{name}.score", Op.RERANK, fn=_EngineScores(self.engine),
                       inputs={"query": inputs["query"], "hits": flat}, engine=self.engine, module=self.module,
                       batchable=True, splittable=True,
                       meta={"split": Splitter.contiguous(["hits"], axis=f"{name}:hits"), "resources": pure, **size}))
            g.add(Node(f"{name}.wrap", Op.TRANSFORM, fn=_wrap, inputs={"scored": f"{name}.score"},
                       module=self.module, meta={"resources": pure}))
            scored = f"{name}.wrap"
        g.add(Node(name, Op.AGGREGATE, fn=_Select(self.top_n, self.select), inputs={"scored": scored},
                   module=self.module, meta={"resources": pure}))
        return name

    def shape(self) -> Hashable:
        return ("Rerank", self.mode, self.top_n, self.batch_size, self.n_hits)


class _RerankPrompt:
    def __init__(self, render: Callable[..., Rendered]):
        self.render = render

    def __call__(self, query: str, batch: list[Any]) -> Rendered:
        return self.render(query=query, texts=[hit_text(h) for h in batch])


class _ParseWith:
    """Decode fn of one rerank batch: the LLM text parsed against that batch's hits."""

    def __init__(self, decode: _Decode, parse: Callable[[str, list[Any]], list[tuple[Any, float]]]):
        self.decode, self.parse = decode, parse

    async def __call__(self, ctx: Any, query: str, batch: list[Any]) -> list[tuple[Any, float]]:
        text = await self.decode(ctx, query=query, batch=batch)
        return list(self.parse(text, batch))
