"""``optimize(compiled_graph)``: LangGraph's Pregel loop stays in charge, each node's work runs on Ayo.

A compiled LangGraph graph (``StateGraph(...).compile(checkpointer=...)``, LangChain v1's
``create_agent``, LangGraph's prebuilt ``create_react_agent``) is returned as a copy of itself
(an instance of a subclass of its own class, so every method is LangGraph's) whose nodes run
Ayo's optimized runnables instead of the user's LCEL runnables. Why not re-implement Pregel:
state reducers, checkpointers and ``thread_id``, recursion limits, interrupts and
``Command(resume=)``, ``Send`` fan-outs, conditional edges and every ``stream_mode`` are then
stock's by construction; what Ayo adds is inside each node (its chain lowered to primitives,
its model calls scheduled by Ayo's LLM engine with priorities, streams and batching). The nodes
of one super-step (a ``Send`` fan-out whose width is decided at run time) run concurrently, as
in stock, and their requests meet in the loop's shared engine schedulers, where Ayo ranks and
batches them together.

A node's LCEL sequence reports its steps under the node's run, flattened as LangGraph runs it, when
invoked and when streamed (``stream_mode="messages"`` / ``"custom"``, ``astream_events``); an invoked
node's configs are Ayo's own (LangGraph's config of the node is not folded into the ones Ayo merges).

What is not an LCEL runnable Ayo lowers (a Python function node, a ``ToolNode``, a custom
``Runnable`` class) runs as the user's object, with the reason in ``explain()``; a subgraph
used as a node is optimized the same way, recursively.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import BaseCallbackManager

from ayo_core.explain import Explanation, explanation
from ayo_langchain import capture as cap
from ayo_langchain.agent import early_tool_nodes
from ayo_langchain.explain import lowered_modules
from ayo_langchain.history import ambient_config
from ayo_langchain.lower import ChainCall
from ayo_langchain.runnable import OptimizedRunnable, Options
from ayo_shims import langgraph as lg

log = logging.getLogger(__name__)
START_NODE = "__start__"  # LangGraph's input node: writes the input into the channels, no user code
AGENT_MODEL_NODES = ("model", "agent")  # create_agent's and create_react_agent's model-call node
DEFAULT_GRAPH_NAME = "LangGraph"  # a compiled graph's name when none was given (an agent then names nothing)
EARLY_TOOLS_REASON = "its tool calls start as soon as their arguments are complete in the model's stream (when " \
                     "the model streams)"
WARM_REASON = "the next model call's prompt prefix is warmed while the tools run (async calls, where the device " \
              "rule allows)"
AGENT_MODEL_REASON = ("the agent's model call with tools bound (LangGraph's own node code), sent by the model's own "
                      "client: not a ChatOpenAI at a server of its own, or a model chosen per call")
AGENT_MODEL_ROUTED_REASON = ("the agent's model call with tools bound (LangGraph's own node code) runs over a copy of "
                             "the user's chat model whose async requests go through Ayo's LLM engine")


@dataclass
class NodePlan:
    """What Ayo made of one node of the graph."""

    name: str
    kind: str  # "lowered", "subgraph" or "opaque"
    reason: str = ""  # why the node runs as the user's object ('' when Ayo runs it)
    optimized: Any = None  # the OptimizedRunnable (or optimized subgraph) the node runs now


class GraphPlan:
    """Per optimized graph: one :class:`NodePlan` per node (built once, at ``optimize()``)."""

    def __init__(self, graph: Any, options: Options, runtime: Any = None) -> None:
        self.graph = graph  # the graph with the user's nodes (what optimizing again starts from)
        self.options = options
        self.nodes: dict[str, NodePlan] = {}
        self.new_nodes: dict[str, Any] = {}
        tool_node = lg.tool_node_class()
        agent = tool_node is not None and any(isinstance(lg.node_bound(n), tool_node) for n in graph.nodes.values())
        for name, node in graph.nodes.items():
            if name == START_NODE:
                self.new_nodes[name] = node
                continue
            plan = plan_node(name, lg.node_bound(node), options, runtime)
            if agent and name in AGENT_MODEL_NODES and plan.kind == "opaque":
                plan.reason = AGENT_MODEL_REASON
            self.nodes[name] = plan
            self.new_nodes[name] = node if plan.optimized is None else lg.with_bound(node, plan.optimized)
        self.early_tools = None
        if agent:
            self._start_tools_early(graph)

    def _start_tools_early(self, graph: Any) -> None:
        """An agent's tool calls start from the model's stream, and its next model call is warmed while
        they run (:mod:`ayo_langchain.agent`)."""
        bodies = {n: lg.node_bound(node) for n, node in graph.nodes.items() if self.nodes.get(n, NodePlan(n, "")).kind
                  == "opaque"}
        # create_agent / create_react_agent compile the graph under the agent's name= and give it to the
        # model's messages too
        name = graph.get_name()
        found = early_tool_nodes(bodies, None if name == DEFAULT_GRAPH_NAME else name)
        if found is None:
            return
        self.early_tools, replaced = found
        for node, body in replaced.items():
            self.new_nodes[node] = lg.with_bound(graph.nodes[node], body)
            if getattr(body, "engine", None) is not None:
                self.nodes[node].reason = f"{AGENT_MODEL_ROUTED_REASON} ({body.engine!r})"
            if self.early_tools.tools:
                self.nodes[node].reason += f"; {EARLY_TOOLS_REASON}"
            if node in AGENT_MODEL_NODES:
                self.nodes[node].reason += f"; {WARM_REASON}"

    def traces(self) -> list[Any]:
        """The traces of the nodes' last calls, oldest first (each node call is one Ayo query)."""
        found = [t for p in self.nodes.values() if isinstance(p.optimized, OptimizedRunnable)
                 for t in p.optimized.last_traces]
        return sorted(found, key=lambda t: getattr(t, "start", 0.0) or 0.0)


def plan_node(name: str, bound: Any, options: Options, runtime: Any = None) -> NodePlan:
    """Lower ``bound`` (a node's runnable) when Ayo recognizes it; else say why it runs as-is."""
    tool_node = lg.tool_node_class()
    if tool_node is not None and isinstance(bound, tool_node):
        return NodePlan(name, "opaque", "a ToolNode: LangGraph runs its tool calls (concurrently, with its "
                                        "error handling) as stock")
    if isinstance(bound, lg.runnable_callable_class()):
        return NodePlan(name, "opaque", "a Python function node: its body is the user's code, called as-is "
                                        "(a node given as an LCEL runnable is lowered)")
    if lg.is_compiled_graph(bound):
        return NodePlan(name, "subgraph", "", optimize_graph(bound, options, runtime))
    fast = NodeRunnable(bound, options, runtime=runtime)
    if fast.as_is():
        reasons = "; ".join(f"{label}: {why}" for label, why in fast.plan.capturer.opaque)
        return NodePlan(name, "opaque", reasons or f"{type(bound).__name__} is not a runnable Ayo lowers")
    return NodePlan(name, "lowered", "", fast)


class NodeRunnable(OptimizedRunnable):
    """A graph node's LCEL runnable on Ayo, reporting the runs stock reports for it.

    LangGraph flattens a node's ``RunnableSequence`` into the node's own run (the steps hang
    under the run named after the node, tagged ``seq:step:N``): a sequence node then opens no
    chain run of its own, its steps report under the node's run, as stock's do.
    """

    @property
    def flattened_by_langgraph(self) -> bool:
        return isinstance(self.plan.root, cap.Sequence)

    async def _query_run(self, input: Any, config: Any, sync: bool, streaming: bool = False) -> ChainCall:
        parent = config.get("callbacks")
        if (self.flattened_by_langgraph and isinstance(parent, BaseCallbackManager)
                and parent.parent_run_id is not None):
            # invoked or streamed (LangGraph streams a node's steps under stream_mode="messages"/"custom"
            # and astream_events, still flattened into the node's run): no run of its own
            return ChainCall(cfg=config, run_manager=None, sync=sync, streaming=streaming)
        # called outside a node's run (nothing to hang the steps under): a chain run, as a
        # RunnableSequence invoked alone opens
        return await super()._query_run(input, config, sync, streaming)

    async def _execute(self, input: Any, run: ChainCall) -> Any:
        if run.streaming:  # stock's streamed node runs all its steps in the node's step config: ambient, as there
            return await super()._execute(input, run)
        # invoked, LangGraph runs the node with its step config as the context's config, which LangChain's
        # merge_configs (a with_config binding's, the message history's) folds into every config it merges:
        # stock's steps each run under their own config there, Ayo's configs are explicit, so none is ambient
        # (a step's own run still sets its config, for interrupt() and get_stream_writer())
        with ambient_config(None):
            return await super()._execute(input, run)


class OptimizedGraphMixin:
    """Added to the user's compiled-graph class: the graph is LangGraph's own, ``explain()`` is Ayo's."""

    def __init__(self, *, ayo_plan: GraphPlan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ayo_plan = ayo_plan

    @property
    def last_traces(self) -> list[Any]:
        """Ayo's traces of the node calls of the last runs (each lowered node call is one query)."""
        return self.ayo_plan.traces()

    @property
    def last_trace(self) -> Any:
        traces = self.last_traces
        return traces[-1] if traces else None

    def explain(self) -> Explanation:
        """Per node: lowered (its modules), a subgraph, or run as the user's object (and why)."""
        modules: list[tuple[str, str]] = []
        opaque: list[tuple[str, str]] = []
        lines: list[str] = []
        last_graph = None
        for plan in self.ayo_plan.nodes.values():
            if plan.kind == "opaque":
                opaque.append((f"node {plan.name}", plan.reason))
                lines.append(f"  {plan.name}: Opaque ({plan.reason})")
            elif plan.kind == "subgraph":
                modules.append((f"node {plan.name}", "Subgraph"))
                lines.append(f"  {plan.name}: subgraph, optimized node by node")
                lines += [f"    {line}" for line in str(plan.optimized.explain()).splitlines()[1:]]
            else:
                fast = plan.optimized
                modules += [(f"node {plan.name}: {label}", kind) for label, kind in lowered_modules(fast.plan.root)]
                opaque += [(f"node {plan.name}: {label}", why) for label, why in fast.plan.capturer.opaque]
                lines.append(f"  {plan.name}: lowered ({fast.plan.root.label()})")
                last_graph = fast.last_graph or last_graph
        early = self.ayo_plan.early_tools
        if early is not None:
            if early.tools:
                lines.append(f"  tools started from the model's stream: {sorted(early.tools)}")
            lines += [f"    {tool}: started {ahead:.3f} s before its model message ended"
                      for tool, ahead in early.started_before_message_end()[-8:]]
            lines += [f"  next model call warmed while the tools ran: {line}" for line in early.warms.summary()]
        notes = [] if any(p.kind != "opaque" for p in self.ayo_plan.nodes.values()) else [
            "no node is lowered: the whole chain is one opaque node per graph node, each the user's own code"]
        notes += ["LangGraph's Pregel loop runs the graph (state, checkpoints, interrupts, streams as stock); "
                 "lowered nodes run on Ayo's runtime, their model calls through Ayo's LLM engine"]
        return explanation(f"Ayo plan for graph {self.get_name()}", graph=last_graph, trace=self.last_trace,
                           modules=modules, opaque=opaque, module_lines=lines, notes=notes)


_CLASSES: dict[type, type] = {}


def _optimized_class(cls: type) -> type:
    """``Optimized<cls>``: the user's graph class with :class:`OptimizedGraphMixin` in front."""
    if issubclass(cls, OptimizedGraphMixin):
        return cls
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Optimized{cls.__name__}", (OptimizedGraphMixin, cls), {"__module__": __name__})
    return _CLASSES[cls]


def optimize_graph(graph: Any, options: Options | None = None, runtime: Any = None) -> Any:
    """A copy of the compiled ``graph`` whose lowered nodes run on Ayo (see the module doc)."""
    lg.verify_all()
    if isinstance(graph, OptimizedGraphMixin):  # optimized again (other options): the user's nodes, this
        # copy's other settings (a with_config on it)
        graph = type(graph)(**{**lg.graph_attributes(graph), "nodes": graph.ayo_plan.graph.nodes})
    plan = GraphPlan(graph, options or Options(), runtime)
    attrs = {**lg.graph_attributes(graph), "nodes": plan.new_nodes, "ayo_plan": plan}
    fast = _optimized_class(type(graph))(**attrs)
    log.debug("optimized graph %s: %s", graph.get_name(),
              {n: p.kind for n, p in plan.nodes.items()})
    return fast
