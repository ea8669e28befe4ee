"""``RunnableEach`` (``runnable.map()``): the bound runnable lowered once per element, all elements at once.

Stock ``RunnableEach`` opens its own chain run, then ``batch``-es its bound runnable over the
input list (each element's run a child of it); its models run as a batch of whole calls in
threads, outside any view of the rest of the application. Ayo lowers the bound runnable (a
chain: prompt, model, parser...) once per element when the list is known (the graph grows by
``Expand``), so every element's decode goes to the LLM engine together with the rest of the
query's work, and collects the outputs in input order. ``RunnableEach``'s stream is its
``invoke`` (its ``transform`` buffers the input): the bound runnable's models never stream.
A subclass of ``RunnableEach`` stays opaque.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.base import RunnableEach

from ayo_core.runtime.context import Expand
from ayo_core.templates import Route, Transform
from ayo_langchain import capture as cap
from ayo_langchain.callbacks import child, leaf_config, reported, start_chain_run
from ayo_langchain.lower import COST, LOWERINGS, Lowerer, _close_run


@dataclass
class Each(cap.Module):
    """``RunnableEach``: ``bound`` applied to every element of the input list."""

    bound: cap.Module | None = None
    opens_own_run: ClassVar[bool] = True  # as the root, its lowering reports its run (no chain run around it)

    def children(self) -> list[cap.Module]:
        return [self.bound] if self.bound is not None else []

    def note(self) -> str:
        return f"{self.label()}: the bound runnable runs once per element, every element's model call at once"


cap.TEMPLATES[Each] = "Map"


def recognize_each(capturer: cap.Capturer, r: Any, wrappers: tuple[Any, ...]) -> cap.Module:
    if cap._cls(r) is not RunnableEach:
        return cap.Opaque(r, wrappers, f"{type(r).__name__} subclasses RunnableEach: called as-is")
    return Each(r, wrappers, bound=capturer.capture(r.bound))


cap.RECOGNIZERS.add(RunnableEach, recognize_each)


def lower_each(lw: Lowerer, m: Each, src: str, cfg: RunnableConfig) -> str:
    each = m.runnable
    run_cfg = leaf_config(cfg, m.wrappers, each)
    box: list[str] = []

    async def fan_out(ctx: Any, value: Any) -> Any:
        run_manager = await start_chain_run(each, value, run_cfg)
        try:
            items = list(value)
        except BaseException as exc:
            await run_manager.on_chain_error(exc)
            raise
        if not items:  # stock: batch([]) is []
            return await reported(run_manager, _empty())
        return _close_run(_per_element(lw, m, box[0], src, len(items), child(run_cfg, run_manager)), run_manager,
                          box[0])

    box.append(lw.build(Route(fan_out, m.label(), takes_ctx=True, cost=COST["branch"]), {"value": src}, "each"))
    return box[0]


async def _empty() -> list[Any]:
    return []


def _per_element(lw: Lowerer, m: Each, parent: str, src: str, n: int, cfg: RunnableConfig) -> Expand:
    sub = lw.sub(parent)
    sub.invoked = True  # RunnableEach streams by invoking: its models do not stream
    outs = {}
    for i in range(n):
        async def pick(ctx: Any, value: Any, i: int = i) -> Any:
            return list(value)[i]

        item = sub.build(Transform(pick, m.label(), takes_ctx=True), {"value": src}, f"item{i}")
        outs[f"o{i}"] = sub.lower(m.bound, item, cfg)

    async def collect(ctx: Any, **outputs: Any) -> list[Any]:
        return [outputs[f"o{i}"] for i in range(n)]

    out = sub.build(Transform(collect, m.label(), takes_ctx=True), outs, "collect")
    return Expand(nodes=list(sub.graph.nodes.values()), output=out)


LOWERINGS.add(Each, lower_each)
