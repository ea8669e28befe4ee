"""What every module template shares: the builder interface and small helpers."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from ayo_core.graph import Graph, Node
from ayo_core.runtime.execute import is_async_callable

Rendered = str | list[dict[str, Any]]  # a prompt string or chat messages


class Template:
    """A module template: ``build`` adds the module's primitive nodes to a graph.

    ``inputs`` maps the template's named inputs (documented per template) to
    existing node names; ``after`` names nodes the module's entry nodes must
    follow (the stock pipeline's sequential order; dependency pruning drops
    what is not needed). ``build`` returns the name of the node holding the
    module's result. Templates are built per query from the query's actual
    shape (chunk counts, number of expansions); :meth:`shape` is the part of
    the graph-cache key the template contributes.
    """

    kind = "template"

    def __init__(self, module: str | None = None):
        self.module = module or self.kind

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        raise NotImplementedError

    def shape(self) -> Hashable:
        return (type(self).__name__,)

    def _require(self, inputs: Mapping[str, str], *names: str) -> None:
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ValueError(f"{type(self).__name__} template ({self.module!r}) needs inputs {missing}; "
                             f"pass inputs={{{', '.join(repr(m) + ': <node name>' for m in missing)}}}")


def add_entry(g: Graph, node: Node, after: Iterable[str]) -> str:
    """Add an entry node of a template with the stock-order ``after`` edges."""
    after = frozenset(after)
    g.add(node.replace(after=node.after | after) if after else node)
    return node.name


def hit_text(hit: Any) -> str:
    """The text of a retrieval hit: a str, a dict with document/text, or an object with .text/.document."""
    if isinstance(hit, str):
        return hit
    if isinstance(hit, Mapping):
        for key in ("document", "text", "page_content", "content"):
            if key in hit and hit[key] is not None:
                return str(hit[key])
        raise KeyError(f"retrieval hit {hit!r} has no document/text field")
    for attr in ("text", "document", "page_content"):
        value = getattr(hit, attr, None)
        if value is not None:
            return str(value)
    return str(hit)


def with_score(hit: Any, score: float) -> Any:
    """A copy of a dict hit carrying ``score``; other hits are returned as they are."""
    return {**hit, "score": score} if isinstance(hit, Mapping) else hit


def result_text(result: Any) -> str:
    return result.text if hasattr(result, "text") else str(result)


async def call_llm(ctx: Any, rendered: Rendered, *, max_tokens: int, llm_kwargs: Mapping[str, Any] | None = None,
                   stream: bool = False) -> str:
    """One LLM call through the scheduler: ``complete`` for a prompt, ``chat`` for messages; returns the text."""
    kwargs = dict(llm_kwargs or {})
    kwargs.setdefault("max_tokens", max_tokens)
    if stream and ctx.stream_cb is not None:
        kwargs["stream_cb"] = ctx.stream_cb
    if isinstance(rendered, str):
        result = await ctx.llm.complete(rendered, **kwargs)
    else:
        result = await ctx.llm.chat(rendered, **kwargs)
    return result_text(result)


async def prefill_prefix(ctx: Any, rendered: Rendered | None) -> None:
    """Prefill a prompt prefix (a str or chat messages); nothing to do for ``None``."""
    if rendered is None:
        return
    if isinstance(rendered, str):
        await ctx.llm.prefill(prompt=rendered)
    else:
        await ctx.llm.prefill(messages=rendered)


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def plain_fn(fn: Callable[..., Any], takes_ctx: bool = False) -> Callable[..., Any]:
    """Wrap a user function of the inputs only into a node fn ``(ctx, **inputs)`` (async stays async)."""
    if takes_ctx:
        return fn
    if inspect.iscoroutinefunction(fn):
        async def async_node(ctx: Any, /, **inputs: Any) -> Any:
            return await fn(**inputs)
        return async_node

    def node(ctx: Any, /, **inputs: Any) -> Any:
        return fn(**inputs)
    return node


def run_within(g: Graph, names: Iterable[str], scope: Callable[[Any], AbstractContextManager[Any]]) -> None:
    """Run the fns of nodes ``names`` inside ``scope(ctx)``: a framework context that stock code opens around
    several modules (a query engine's event holding its retriever's events) when lowering splits them into
    nodes, which do not inherit one another's context. A sync fn enters it in its own thread."""
    for name in names:
        node = g.nodes[name]
        if node.fn is not None:
            g.replace(node.replace(fn=_scoped(node.fn, scope)))


def _scoped(fn: Callable[..., Any], scope: Callable[[Any], AbstractContextManager[Any]]) -> Callable[..., Any]:
    if is_async_callable(fn):
        async def async_scoped(ctx: Any, /, **inputs: Any) -> Any:
            with scope(ctx):
                return await fn(ctx, **inputs)
        return async_scoped

    def scoped(ctx: Any, /, **inputs: Any) -> Any:
        with scope(ctx):
            result = fn(ctx, **inputs)
        if inspect.isawaitable(result):  # a plain function that returned a coroutine: it runs when awaited
            return _awaited_within(result, scope, ctx)
        return result
    return scoped


async def _awaited_within(result: Any, scope: Callable[[Any], AbstractContextManager[Any]], ctx: Any) -> Any:
    with scope(ctx):
        return await result
