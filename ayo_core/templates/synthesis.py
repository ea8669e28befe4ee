"""The Synthesis template: simple, compact, refine and tree_summarize response synthesis.

Each mode decomposes into local packing plus LLM calls:

- ``simple``: one call over all chunks packed into one context.
- ``compact``: chunks packed into as few contexts as fit, then the refine chain.
- ``refine``: one call per context, each taking the previous answer (a chain).
- ``tree_summarize``: one call per packed context (independent), then the
  summaries are packed and summarised again until one answer remains; the
  upper levels are added at run time (``Expand``), as many as the data needs.
- ``accumulate``: one call per packed context (independent, all in flight at
  once), the answers joined by ``join(answers) -> text`` (LlamaIndex's
  ``accumulate`` / ``compact_accumulate``: the adapter's pack decides which).

The refine chain is built for ``n_steps`` contexts (its expected count) and
grows with ``Expand`` when more arrive. Hooks (from the adapter, using the
framework's own prompt code): ``render_qa(question=, context=)``,
``render_refine(question=, answer=, context=)``, ``render_summary(question=,
context=)`` (tree), ``pack(question, texts) -> list[str]``, optional
``prefix_qa(question=)`` / ``prefix_refine(question=)`` giving the prompt prefix
known before the chunks (prefill splitting), ``parse(text) -> answer``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ayo_core.graph import Graph, Node, Op, PrefixSpec
from ayo_core.runtime.context import Expand
from ayo_core.templates.base import Rendered, Template, add_entry, call_llm, hit_text, maybe_await, prefill_prefix
from ayo_core.templates.bound import SynthesisHooks, build_synthesis

MODES = ("simple", "compact", "refine", "tree_summarize", "accumulate")
# LlamaIndex's response_mode names
# (LlamaIndex's "generation" is one call, like simple, whose prompt ignores the chunks)
ALIASES = {"tree": "tree_summarize", "simple_summarize": "simple", "compact_accumulate": "accumulate",
           "generation": "simple"}
MAX_TREE_LEVELS = 12


def greedy_pack(texts: list[str], max_chars: int = 4000, sep: str = "\n\n") -> list[str]:
    """Join consecutive texts while they fit in ``max_chars`` (a text longer than that stays alone)."""
    packs: list[str] = []
    for t in texts:
        if packs and len(packs[-1]) + len(sep) + len(t) <= max_chars:
            packs[-1] = packs[-1] + sep + t
        else:
            packs.append(t)
    return packs


def _default_pack(mode: str) -> Callable[[str, list[str]], list[str]]:
    if mode == "simple":
        return lambda question, texts: ["\n\n".join(texts)]
    if mode in ("refine", "accumulate"):
        return lambda question, texts: list(texts)
    return lambda question, texts: greedy_pack(texts)


class _Hooks:
    """The adapter's hooks plus how to call the LLM, shared by every node of one synthesis."""

    def __init__(self, syn: Synthesis):
        self.syn = syn

    async def llm(self, ctx: Any, rendered: Rendered) -> str:
        syn = self.syn
        rendered = await maybe_await(rendered)
        if syn.call is not None:
            text = await syn.call(ctx, rendered)
        else:
            text = await call_llm(ctx, rendered, max_tokens=syn.max_tokens, llm_kwargs=syn.llm_kwargs)
        return syn.parse(text) if syn.parse is not None else text


class _Pack:
    def __init__(self, pack: Callable[[str, list[str]], list[str]]):
        self.pack = pack

    def __call__(self, ctx: Any, question: str, chunks: list[Any]) -> list[str]:
        return list(self.pack(question, [hit_text(c) for c in chunks]))


class _Simple:
    def __init__(self, hooks: _Hooks):
        self.hooks = hooks

    async def __call__(self, ctx: Any, question: str, packs: list[str]) -> str:
        return await self.hooks.llm(ctx, self.hooks.syn.render_qa(question=question, context=packs[0] if packs else ""))


class _Prefix:
    def __init__(self, render_prefix: Callable[..., Rendered | None]):
        self.render_prefix = render_prefix

    async def __call__(self, ctx: Any, question: str) -> None:
        await prefill_prefix(ctx, await maybe_await(self.render_prefix(question=question)))


class _Const:
    def __init__(self, value: Any):
        self.value = value

    def __call__(self, ctx: Any) -> Any:
        return self.value


class _RefineStep:
    """Step ``i`` of the chain: QA on context 0, refine on the others; the last planned step
    grows the chain when more contexts arrived than planned."""

    def __init__(self, hooks: _Hooks, name: str, index: int, grows: bool):
        self.hooks, self.name, self.index, self.grows = hooks, name, index, grows

    async def __call__(self, ctx: Any, question: str, packs: list[str], prev: str | None = None) -> Any:
        syn, i = self.hooks.syn, self.index
        if i >= len(packs):
            return prev if prev is not None else ""
        if i == 0:
            answer = await self.hooks.llm(ctx, syn.render_qa(question=question, context=packs[0]))
        else:
            answer = await self.hooks.llm(ctx, syn.render_refine(question=question, answer=prev, context=packs[i]))
        if not self.grows or len(packs) <= i + 1:
            return answer
        return self._grow(ctx.node, answer, len(packs))

    def _grow(self, node: Node, answer: str, n: int) -> Expand:
        seed = f"{self.name}.more{self.index}"
        nodes = [Node(seed, Op.TRANSFORM, fn=_Const(answer), module=node.module, meta={"resources": frozenset()})]
        prev = seed
        for j in range(self.index + 1, n):
            step = f"{self.name}.more{j}"
            nodes.append(node.replace(name=step, fn=_RefineStep(self.hooks, self.name, j, False), after=frozenset(),
                                      inputs={**node.inputs, "prev": prev},
                                      meta={k: v for k, v in node.meta.items() if k not in ("prefix", "prefill_node")}))
            prev = step
        return Expand(nodes, prev)


class _Reduce:
    """Tree level ``level``: one summary is the answer; several are packed and summarised again."""

    def __init__(self, hooks: _Hooks, root: str, level: int):
        self.hooks, self.root, self.level = hooks, root, level

    def __call__(self, ctx: Any, question: str, summaries: list[str]) -> Any:
        if len(summaries) <= 1:
            return summaries[0] if summaries else ""
        if self.level + 1 >= MAX_TREE_LEVELS:
            raise RuntimeError(f"tree_summarize did not converge after {MAX_TREE_LEVELS} levels: {len(summaries)} "
                               "summaries still need more than one context; the summaries are too long for the "
                               "packing budget (lower max_tokens or give pack() a larger context)")
        inputs = {"question": ctx.node.inputs["question"], "chunks": ctx.node.inputs["summaries"]}
        nodes = self.hooks.syn.tree_level(self.root, ctx.node.module, inputs, self.hooks, self.level + 1)
        return Expand(nodes, nodes[-1].name)


class _Summary:
    def __init__(self, hooks: _Hooks):
        self.hooks = hooks

    async def __call__(self, ctx: Any, question: str, context: str) -> str:
        render = self.hooks.syn.render_summary or self.hooks.syn.render_qa
        return await self.hooks.llm(ctx, render(question=question, context=context))


class _Answer:
    """One independent QA call over one context (accumulate)."""

    def __init__(self, hooks: _Hooks):
        self.hooks = hooks

    async def __call__(self, ctx: Any, question: str, context: str) -> str:
        return await self.hooks.llm(ctx, self.hooks.syn.render_qa(question=question, context=context))


def _numbered_join(answers: list[str]) -> str:
    return "\n\n".join(f"Response {i + 1}: {a}" for i, a in enumerate(answers))


class _Join:
    def __init__(self, join: Callable[[list[str]], str]):
        self.join = join

    def __call__(self, ctx: Any, answers: list[str]) -> str:
        return self.join(list(answers))


class Synthesis(Template):
    """Response synthesis. Inputs: ``question``, ``chunks`` (hits or texts). Value: the answer text.

    ``hooks`` (:class:`~ayo_core.templates.bound.SynthesisHooks`): the adapter runs the whole
    synthesis (its framework's own control flow) in one decode step; no ``render_*`` needed.
    """

    kind = "synthesis"

    def __init__(self, mode: str, render_qa: Callable[..., Rendered] | None = None, module: str | None = None, *,
                 render_refine: Callable[..., Rendered] | None = None,
                 render_summary: Callable[..., Rendered] | None = None,
                 pack: Callable[[str, list[str]], list[str]] | None = None, n_steps: int | None = None,
                 prefix_qa: Callable[..., Rendered | None] | None = None,
                 prefix_refine: Callable[..., Rendered | None] | None = None, max_tokens: int = 256,
                 parse: Callable[[str], str] | None = None, llm_kwargs: Mapping[str, Any] | None = None,
                 call: Callable[..., Any] | None = None, hooks: SynthesisHooks | None = None,
                 join: Callable[[list[str]], str] | None = None):
        super().__init__(module)
        self.mode_label, self.hooks = mode, hooks  # the mode as the adapter named it (graph meta)
        mode = ALIASES.get(mode, mode)
        if mode not in MODES:
            raise ValueError(f"Synthesis mode {mode!r} is not one of {MODES}")
        if hooks is None and render_qa is None:
            raise ValueError(f"Synthesis(mode={mode!r}) needs render_qa(question=, context=) or hooks=SynthesisHooks")
        if hooks is None and mode in ("compact", "refine") and render_refine is None:
            raise ValueError(f"Synthesis(mode={mode!r}) needs render_refine(question=, answer=, context=)")
        self.mode, self.render_qa, self.render_refine, self.render_summary = mode, render_qa, render_refine, \
            render_summary
        self.pack = pack or _default_pack(mode)
        self.n_steps = max(1, n_steps or 1)
        self.prefix_qa, self.prefix_refine = prefix_qa, prefix_refine
        self.max_tokens, self.parse, self.llm_kwargs, self.call = max_tokens, parse, llm_kwargs, call
        self.join = join or _numbered_join

    def shape(self) -> Hashable:
        return ("Synthesis", self.mode, self.n_steps if self.mode in ("compact", "refine") else None)

    def build(self, g: Graph, name: str, inputs: Mapping[str, str], after: Iterable[str] = ()) -> str:
        if self.hooks is not None:
            return build_synthesis(self, self.hooks, g, name, inputs, after)
        self._require(inputs, "question", "chunks")
        hooks = _Hooks(self)
        if self.mode == "accumulate":
            return self._accumulate(g, name, inputs, hooks, after)
        if self.mode == "tree_summarize":
            nodes = self.tree_level(name, self.module, inputs, hooks, 0)
            add_entry(g, nodes[0], after)
            for n in nodes[1:]:
                g.add(n)
            return name
        packs = add_entry(g, Node(f"{name}.pack", Op.TRANSFORM, fn=_Pack(self.pack),
                                  inputs={"question": inputs["question"], "chunks": inputs["chunks"]},
                                  module=self.module, meta={"resources": frozenset()}), after)
        q = inputs["question"]
        if self.mode == "simple":
            g.add(self._decode(name, _Simple(hooks), {"question": q, "packs": packs}, self.prefix_qa))
            return name
        prev = None
        for i in range(self.n_steps):
            step = name if i == self.n_steps - 1 else f"{name}.step{i}"
            ins = {"question": q, "packs": packs} | ({"prev": prev} if prev else {})
            prefix = self.prefix_qa if i == 0 else self.prefix_refine if i == 1 else None
            g.add(self._decode(step, _RefineStep(hooks, name, i, step == name), ins, prefix))
            prev = step
        return name

    def _accumulate(self, g: Graph, name: str, inputs: Mapping[str, str], hooks: _Hooks, after: Iterable[str]) -> str:
        """pack -> one answer per pack (per part: all in flight at once) -> join (the value, named ``name``)."""
        pure = {"resources": frozenset()}
        packs = add_entry(g, Node(f"{name}.pack", Op.TRANSFORM, fn=_Pack(self.pack),
                                  inputs={"question": inputs["question"], "chunks": inputs["chunks"]},
                                  module=self.module, meta=pure), after)
        leaf = self._decode(f"{name}.answer", _Answer(hooks), {"question": inputs["question"], "context": packs},
                            self.prefix_qa).with_meta(per_part="context")
        g.add(leaf)
        g.add(Node(name, Op.TRANSFORM, fn=_Join(self.join), inputs={"answers": leaf.name}, module=self.module,
                   meta=pure))
        return name

    def tree_level(self, root: str, module: str, inputs: Mapping[str, str], hooks: _Hooks, level: int) -> list[Node]:
        """The nodes of one tree level: pack -> one summary per pack (per part) -> reduce (named ``root``
        at level 0)."""
        base = root if level == 0 else f"{root}.L{level}"
        pure = {"resources": frozenset()}
        pack = Node(f"{base}.pack", Op.TRANSFORM, fn=_Pack(self.pack),
                    inputs={"question": inputs["question"], "chunks": inputs["chunks"]}, module=module, meta=pure)
        leaf = self._decode(f"{base}.summarize", _Summary(hooks), {"question": inputs["question"], "context": pack.name},
                            self.prefix_qa if level == 0 else None)
        leaf = leaf.with_meta(per_part="context")
        reduce = Node(root if level == 0 else f"{base}.reduce", Op.TRANSFORM, fn=_Reduce(hooks, root, level),
                      inputs={"question": inputs["question"], "summaries": leaf.name}, module=module, meta=pure)
        return [pack, leaf, reduce]

    def _decode(self, name: str, fn: Any, inputs: Mapping[str, str], prefix: Callable[..., Any] | None) -> Node:
        meta: dict[str, Any] = {"resources": frozenset()}
        if prefix is not None:
            meta["prefix"] = PrefixSpec(("question",), _Prefix(prefix))
        return Node(name, Op.DECODE, fn=fn, inputs=dict(inputs), engine="llm", module=self.module, meta=meta)
