"""Chat history: ``RunnableWithMessageHistory`` and ``create_history_aware_retriever``, lowered.

``RunnableWithMessageHistory(chain, get_session_history, ...)`` runs ``insert_history |
check_sync_or_async``: the first step loads the session's messages (its own ``load_history``
lambda), the second returns the user's chain ``with_listeners(on_end=<write the history>)``.
Ayo lowers exactly that: the call's config is merged by the runnable's own ``_merge_configs``
(``get_session_history``, stock's missing-key errors), the load step is captured and lowered
as any chain, and the user's chain is lowered *in place* of the routing lambda, under the
runs stock opens (``check_sync_or_async``, then the chain's own run carrying the listeners'
tracer): when that run ends, the runnable's own listener writes the history, from the run's
own inputs and outputs. So the store holds what stock writes, after each call, for sync
(``messages`` / ``add_messages``) and async (``aget_messages`` / ``aadd_messages``) calls.
Nested in a chain or a graph node, the runnable's own run (``RunnableWithMessageHistory``) is
opened around those steps, as stock opens it (at the root, the query's run is that run).

``create_history_aware_retriever(llm, retriever, prompt)`` is a ``RunnableBranch`` (no
``chat_history``: retrieve the input; else ``prompt | llm | StrOutputParser() | retriever``),
recognized by its condition and lowered as branches are (the chosen arm captured and lowered
when the condition is known: the rephrase decode, then embed + search). Inside
``create_retrieval_chain(history_aware_retriever, create_stuff_documents_chain(...))`` the
answer prompt's static part, the question and the history are known before the rephrase
starts: a warm-up node prefills that token prefix of the final request while the rephrase
decodes (the core's :class:`~ayo_core.engines.prompt_warmer.PromptWarmer`; it does nothing
where the device rule says an early prefill does not pay, e.g. a CPU server).

Legacy ``langchain_classic`` chains (``AgentExecutor``, ``LLMChain``...) stay the user's
object, with the reason in ``explain()``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableBranch, RunnableConfig
from langchain_core.runnables.config import (
    patch_config,
    var_child_runnable_config,
)
from langchain_core.runnables.history import RunnableWithMessageHistory

from ayo_core.engines.prompt_warmer import PromptWarmer
from ayo_core.explain import record_optimization
from ayo_core.templates import Opaque, Warmup
from ayo_langchain import capture as cap
from ayo_langchain.callbacks import PlannedChainRun, leaf_config, step_config
from ayo_langchain.lower import COST, LOWERINGS, Lowerer
from ayo_langchain.prefill import cache_kwargs, render_request
from ayo_shims import langchain as shims
from ayo_shims import langchain_history as hshims

log = logging.getLogger(__name__)


# ---- captured modules ------------------------------------------------------------------
@dataclass
class History(cap.Module):
    """``RunnableWithMessageHistory``: load the history, run the user's chain, write the history."""

    loader: cap.Module | None = None  # insert_history (or load_history): the runnable's own load step
    switch: cap.Module | None = None  # check_sync_or_async (its binding names the run)
    inner: cap.Module | None = None  # the user's chain
    listened: tuple[Any, ...] = ()  # (sync, async): the user's chain with the history-writing listeners

    def children(self) -> list[cap.Module]:
        return [m for m in (self.loader, self.inner) if m is not None]

    def label(self) -> str:
        return type(self.runnable).__name__  # its own get_name() is its inner sequence's


@dataclass
class HistoryAware(cap.Branch):
    """``create_history_aware_retriever``'s branch: rephrase with the history (when there is one), retrieve."""

    condition: Any = None  # its "no chat history" test (a RunnableLambda)
    rephrase: cap.Module | None = None  # prompt | llm | StrOutputParser() | retriever, for explain()

    def children(self) -> list[cap.Module]:
        return [self.rephrase] if self.rephrase is not None else []


cap.TEMPLATES[History] = "MessageHistory"
cap.TEMPLATES[HistoryAware] = "HistoryAwareRetrieval"


# ---- recognition -----------------------------------------------------------------------
@cap.RECOGNIZERS.register(RunnableWithMessageHistory)
def recognize_history(capturer: cap.Capturer, r: Any, wrappers: tuple[Any, ...]) -> cap.Module:
    hshims.verify_all()
    if type(r) is not RunnableWithMessageHistory:
        return cap.Opaque(r, wrappers, f"{type(r).__name__} subclasses RunnableWithMessageHistory (it may change how "
                                       "the history is read or written): called as-is")
    loader, switch = hshims.history_parts(r)
    listened = hshims.listened_runnables(switch)
    # the runnable and its with_config(run_name="RunnableWithMessageHistory") binding configure the call
    # (as top-level wrappers: the query's config is merged by them, see OptimizedRunnable._top_config)
    inside = (*wrappers, r, r.bound)
    return History(r, inside, loader=capturer.capture(loader, inside), switch=capturer.capture(switch, inside),
                   inner=capturer.capture(listened[0].bound, inside), listened=listened)


@cap.RECOGNIZERS.register(RunnableBranch)
def recognize_history_aware(capturer: cap.Capturer, r: Any, wrappers: tuple[Any, ...]) -> cap.Module | None:
    if len(r.branches) != 1 or not hshims.is_history_aware_condition(r.branches[0][0]):
        return None  # any other branch: the usual capture
    hshims.verify_all()
    # the arms are captured when chosen (as any branch's); this capture only shows them in explain()
    return HistoryAware(r, wrappers, condition=r.branches[0][0], rephrase=cap.Capturer().capture(r.default))


def _legacy_chain_classes() -> tuple[type, ...]:
    try:
        from langchain_classic.agents import AgentExecutor
        from langchain_classic.chains.base import Chain
    except ImportError:  # pragma: no cover - langchain-classic is a dependency
        return ()
    return AgentExecutor, Chain


def recognize_legacy(capturer: cap.Capturer, r: Any, wrappers: tuple[Any, ...]) -> cap.Module:
    from langchain_classic.agents import AgentExecutor

    if isinstance(r, AgentExecutor):
        why = ("legacy AgentExecutor (langchain_classic): its loop parses each step from the model's text and "
               "calls the tools in turn inside its own Chain code, which Ayo does not lower; it runs as the "
               "user's object (same steps, stream and callbacks)")
    else:
        why = (f"legacy langchain_classic Chain {type(r).__name__}: its own Chain code runs as the user's "
               "object (LCEL chains are lowered)")
    return cap.Opaque(r, wrappers, why)


for _legacy in _legacy_chain_classes():
    cap.RECOGNIZERS.add(_legacy, recognize_legacy)


# ---- runs opened at run time, named when the graph is built ------------------------------
# ---- lowering --------------------------------------------------------------------------
@contextmanager
def ambient_config(cfg: RunnableConfig | None) -> Iterator[None]:
    """Make ``cfg`` the context's config: what LangChain's ``merge_configs`` folds into every config it merges
    (None: nothing, the merged configs alone)."""
    token = var_child_runnable_config.set(cfg)
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def lower_history(lw: Lowerer, m: History, src: str, cfg: RunnableConfig) -> str:
    """load the history (the runnable's own step) -> the user's chain, lowered, under the runs stock opens."""
    own_run = None
    if m is not lw.plan.root:  # nested: merge here what the root's top config merges for the whole call
        cfg = hshims.history_config(m.runnable, cfg)
        # and open the runnable's own run, which the query's run is for a root (its binding names it)
        own_run = PlannedChainRun(m.runnable, shims.binding_config(m.runnable.bound, cfg))
        src = lw.start_run(own_run, src, m.label(), "history_open")
    # stock runs each of its steps under that step's own config; Ayo's configs are explicit: none is ambient
    # (a graph node streamed by LangGraph has its config there, which merge_configs would fold into each)
    with ambient_config(None):
        return _lower_history_steps(lw, m, src, cfg, own_run)


def _lower_history_steps(lw: Lowerer, m: History, src: str, cfg: RunnableConfig,
                         own_run: PlannedChainRun | None) -> str:
    # a failure (the store's read, the chain) ends the runs opened here with its error, innermost
    # first, as in stock (ChainCall.fail_open_runs)
    loaded = lw.lower(m.loader, src, own_run.child("seq:step:1") if own_run is not None
                      else step_config(cfg, lw.run.run_manager, "seq:step:1"))
    switch_cfg = leaf_config(own_run.child("seq:step:2") if own_run is not None
                             else step_config(cfg, lw.run.run_manager, "seq:step:2"), m.switch.wrappers,
                             m.switch.runnable)
    body = _lower_switch(lw, m, loaded, switch_cfg)
    if own_run is None:
        return body
    return lw.end_run(own_run, body, m.label(), "history_close")


def _lower_switch(lw: Lowerer, m: History, loaded: str, switch_cfg: RunnableConfig) -> str:
    """check_sync_or_async's step: the user's chain, lowered, under its run and the chain's own run
    (a composite's, which its lowering opens: the listeners' tracer writes the history when it ends)."""
    switch_run = PlannedChainRun(m.switch.runnable, switch_cfg)
    limit = switch_run.cfg["recursion_limit"]
    # what check_sync_or_async returns under this call (sync: with_listeners, async: with_alisteners),
    # invoked as RunnableLambda invokes a returned runnable; its config factory adds the listeners' tracer
    listened = m.listened[0] if lw.run.sync else m.listened[1]
    inner_cfg = shims.binding_config(listened, patch_config(switch_run.child(), recursion_limit=limit - 1))
    switch = m.switch.runnable

    def within_limit(value: Any) -> None:
        if limit <= 0:
            raise RecursionError(f"Recursion limit reached when invoking {switch} with input {value}.")

    started = lw.start_run(switch_run, loaded, m.switch.label(), "history_start", check=within_limit)
    if isinstance(m.inner, cap.Lambda):
        # a lambda's run is the listeners' root; Ayo ends a routing lambda's run with the runnable it
        # returns (its expansion runs after), so the history would be written from that: call it as-is
        body = lw._call_node("opaque", m.inner, started, inner_cfg, COST["opaque"], kind=Opaque)
    else:
        body = lw.lower(m.inner, started, inner_cfg)
    return lw.end_run(switch_run, body, m.switch.label(), "history_end")


def lower_history_aware(lw: Lowerer, m: HistoryAware, src: str, cfg: RunnableConfig) -> str:
    """The branch as any branch; plus, before it, the answer prompt's warm-up (see the module doc)."""
    warm_answer_prompt(lw, m, src)
    return lw._lower_branch(m, src, cfg)


LOWERINGS.add(History, lower_history)
LOWERINGS.add(HistoryAware, lower_history_aware)


# ---- warming the answer prompt while the rephrase decodes ----------------------------------
@dataclass
class Answer:
    """The answer step of ``create_retrieval_chain(<this retriever>, create_stuff_documents_chain(...))``."""

    prompt: cap.Prompt
    model: cap.Model
    late: list[str]  # prompt keys that come from the retrieval (the documents, formatted)


def answer_after(root: cap.Module, retriever: cap.Module) -> Answer | None:
    """The answer prompt + model fed by ``retriever`` in ``.assign(context=retriever).assign(answer=
    format | prompt | model | ...)`` (``create_retrieval_chain``'s shape) anywhere under ``root``."""
    for seq in cap.walk(root):
        if not isinstance(seq, cap.Sequence):
            continue
        for first, second in zip(seq.steps, seq.steps[1:], strict=False):
            keys = [k for k, v in first.mapper.branches.items() if v is retriever] \
                if isinstance(first, cap.Assign) and first.mapper else []
            if not keys or not isinstance(second, cap.Assign) or not second.mapper:
                continue
            for chain in second.mapper.branches.values():
                steps = chain.steps if isinstance(chain, cap.Sequence) else []
                if (len(steps) >= 3 and isinstance(steps[0], cap.Assign) and steps[0].mapper
                        and isinstance(steps[1], cap.Prompt) and isinstance(steps[2], cap.Model)):
                    return Answer(steps[1], steps[2], sorted({*keys, *steps[0].mapper.branches}))
    return None


def warm_answer_prompt(lw: Lowerer, m: HistoryAware, src: str) -> str | None:
    """Add the warm-up node of the answer prompt (its static part, question and history); its name or None."""
    answer = answer_after(lw.plan.root, m)
    if answer is None or not lw.plan.prefill_split or lw.plan.routed.get(id(answer.model)) is None:
        return None
    plan, prompt, model = lw.plan, answer.prompt, answer.model
    server = getattr(plan.llm, "root_url", None) or getattr(getattr(plan.llm, "engine", None), "root_url", None)
    warmer = PromptWarmer(lambda values: render_request(prompt.runnable, model.chat, model.model, values),
                          {"base": "__base__"}, answer.late, server=server, min_tokens=plan.min_prefill_tokens,
                          max_busy=plan.options.warmup_max_busy, request=cache_kwargs(model.model))
    no_history = m.condition.func  # the branch's own test: True when stock skips the rephrase

    async def warm(ctx: Any, base: Any) -> Any:
        if not isinstance(base, dict) or no_history(base):  # stock retrieves at once: no decode to hide
            return None
        return await warmer.static(ctx, base=base)

    node = lw.build(Warmup(warm, model.label(), takes_ctx=True), {"base": src}, "answer_warmup")
    record_optimization(lw.graph, "history_prefill", node,
                        "prefills the answer prompt's static part, question and history while the rephrase "
                        "decodes (only where the device rule says an early prefill pays)")
    return node


# ---- streaming -------------------------------------------------------------------------
@dataclass
class StreamTwin:
    """What ``stream``/``astream`` of an optimized ``RunnableWithMessageHistory`` run: a runnable like
    the user's (same session factory and keys) whose chain is Ayo's optimized chain.

    Stock's own stream then loads the history, opens the runs, and its listener writes the history
    from the chain run's merged output when the stream ends; the chain's tokens come from Ayo's
    stream of it. ``outer`` are the bindings around the user's runnable (``with_config`` on it):
    they configure the call before the twin's own config factory, as stock's do."""

    runnable: Any
    chain: Any  # the optimized chain (its last_trace is the stream's)
    outer: tuple[Any, ...]


def stream_twin(module: cap.Module, top_wrappers: tuple[Any, ...], optimized: Callable[[Any], Any]) -> StreamTwin | None:
    """The :class:`StreamTwin` of a captured root ``History`` whose bindings (outermost first, the
    runnable itself last) are ``top_wrappers``; None for any other root. ``optimized(chain)`` is the
    optimized runnable of the user's chain (the caller's class and options)."""
    if not isinstance(module, History) or not module.listened:
        return None
    r = module.runnable
    chain = optimized(module.listened[0].bound)
    with warnings.catch_warnings():  # the user was told once that the class is deprecated, not again here
        warnings.simplefilter("ignore")
        twin = RunnableWithMessageHistory(
            chain, r.get_session_history, input_messages_key=r.input_messages_key,
            output_messages_key=r.output_messages_key, history_messages_key=r.history_messages_key,
            history_factory_config=r.history_factory_config)
    outer = tuple(w for w in top_wrappers if w is not r and w is not r.bound)
    return StreamTwin(twin, chain, outer)
