"""LangGraph touchpoints: the langgraph internals ``ayo_langchain``'s graph front-end reaches.

Ayo keeps LangGraph's own Pregel loop in charge of a compiled graph (state reducers,
checkpointers, ``thread_id``, recursion limits, interrupts and stream modes stay stock's by
construction) and only swaps what a node runs: a copy of the compiled graph whose nodes'
``bound`` runnables are Ayo's optimized runnables. That needs three reaches below the public
API, each one function here, declared once with the version it was checked on.

Imports langgraph only (lazily, in the checks): never ``ayo_core`` or an adapter.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ayo_shims.touchpoints import all_of, declare, has_attr, has_params, importable, verify

LANGGRAPH = "langgraph"
FRAMEWORKS = (LANGGRAPH,)
CHECKED = "1.x (checked 1.2.24)"


def verify_all() -> None:
    """Check every langgraph touchpoint (once per process); raises ``ShimError``."""
    verify(*FRAMEWORKS)


RUNNABLE_CALLABLE = declare(
    "langgraph._internal._runnable.RunnableCallable", framework=LANGGRAPH, checked=CHECKED,
    why="a node given as a Python function is wrapped in this class (private module): Ayo recognizes it "
        "to say why that node runs as the user's code",
    check=importable("langgraph._internal._runnable", "RunnableCallable"))


def runnable_callable_class() -> type:
    """The class LangGraph wraps a function node in."""
    return importlib.import_module("langgraph._internal._runnable").RunnableCallable


PREGEL_NODE_COPY = declare(
    "langgraph.pregel._read.PregelNode.copy", framework=LANGGRAPH, checked=CHECKED,
    why="a compiled graph's node (bound runnable + channel writers) is copied with another bound runnable, "
        "keeping its triggers, writers, retry and cache policies",
    check=has_attr("langgraph.pregel._read", "PregelNode", "copy", "node"))


def node_bound(node: Any) -> Any:
    """What a compiled graph's node runs (before its channel writes)."""
    return node.bound


def with_bound(node: Any, bound: Any) -> Any:
    """A copy of the compiled graph's ``node`` that runs ``bound`` instead."""
    return node.copy({"bound": bound})


PREGEL_COPY = declare(
    "langgraph.pregel.main.Pregel.copy", framework=LANGGRAPH, checked=CHECKED,
    why="the optimized graph is the user's compiled graph rebuilt from its attributes (copy(update=)) as an "
        "instance of a subclass that adds explain(); every Pregel method stays LangGraph's own",
    check=all_of(has_attr("langgraph.pregel.main", "Pregel", "copy"),
                 has_params("langgraph.pregel.main", "Pregel.__init__", ["nodes", "channels", "checkpointer"])))


def graph_attributes(graph: Any) -> dict[str, Any]:
    """The keyword arguments that rebuild ``graph`` (what ``Pregel.copy`` passes its class)."""
    return {k: v for k, v in vars(graph).items() if k != "__orig_class__"}


def is_compiled_graph(obj: Any) -> bool:
    """A compiled LangGraph graph (``StateGraph(...).compile()``, ``create_agent``, ``create_react_agent``)."""
    try:
        from langgraph.pregel import Pregel
    except ImportError:
        return False
    return isinstance(obj, Pregel)


def tool_node_class() -> type | None:
    """LangGraph's prebuilt ``ToolNode`` (None when langgraph-prebuilt is not installed)."""
    try:
        from langgraph.prebuilt import ToolNode
    except ImportError:
        return None
    return ToolNode


TOOL_NODE_TOOLS = declare(
    "langgraph.prebuilt.tool_node.ToolNode._tools_by_name", framework=LANGGRAPH, checked="langgraph-prebuilt 1.x "
    "(checked 1.1.3)",
    why="an agent's ToolNode is copied with tools that take a result started early (as soon as the model's stream "
        "completed the call's arguments); the copy keeps every other setting (error handling, wrappers)",
    check=all_of(has_attr("langgraph.prebuilt.tool_node", "ToolNode", "tools_by_name", "_func", "_afunc"),
                 has_attr("langgraph._internal._runnable", "RunnableCallable", "invoke", "ainvoke")))


def tool_node_with_tools(tool_node: Any, tools_by_name: dict[str, Any]) -> Any:
    """A shallow copy of ``tool_node`` that runs ``tools_by_name`` (same names) instead of its tools."""
    import copy

    copied = copy.copy(tool_node)
    copied._tools_by_name = dict(tools_by_name)
    # RunnableCallable keeps the functions it runs as bound methods of the original node: rebind them
    copied.func, copied.afunc = copied._func, copied._afunc
    return copied


STREAMING_HANDLER = declare(
    "langchain_core.tracers._streaming._StreamingCallbackHandler", framework="langchain-core",
    checked="1.x (checked 1.8.3)",
    why="a chat model streams its answer when a handler of this class listens (LangGraph's stream_mode='messages'): "
        "only then do tool calls arrive part by part, and only then does Ayo start them early",
    check=importable("langchain_core.tracers._streaming", "_StreamingCallbackHandler"))


def makes_model_stream(callbacks: Any) -> bool:
    """Whether a chat model called with ``callbacks`` streams (a streaming handler listens)."""
    from langchain_core.tracers._streaming import _StreamingCallbackHandler

    handlers = getattr(callbacks, "handlers", callbacks) or []
    return isinstance(handlers, list) and any(isinstance(h, _StreamingCallbackHandler) for h in handlers)


def _source_has(module: str, qualname: str, *needles: str) -> Callable[[], None]:
    """Check: the source of ``module.qualname`` still contains every one of ``needles``."""
    def check() -> None:
        import inspect

        source = inspect.getsource(getattr(importlib.import_module(module), qualname))
        missing = [n for n in needles if n not in source]
        if missing:
            raise AttributeError(f"{module}.{qualname} no longer contains {missing}: its model node changed")
    return check


AGENT_MODEL_CLOSURE = declare(
    "langchain.agents.factory.create_agent.<locals>.amodel_node (closure variable 'model')", framework="langchain",
    checked="1.x (checked 1.5.2)",
    why="an agent's model node is LangGraph's function node closing over the user's chat model; Ayo's copy of the "
        "node runs the same function code over a copy of the model whose client sends through Ayo's LLM engine",
    check=all_of(_source_has("langchain.agents.factory", "create_agent", "async def amodel_node", "model=model"),
                 has_attr("langgraph._internal._runnable", "RunnableCallable", "ainvoke")))
REACT_AGENT_MODEL_CLOSURE = declare(
    "langgraph.prebuilt.chat_agent_executor.create_react_agent.<locals>.acall_model (closure variable "
    "'static_model')", framework="langgraph-prebuilt", checked="1.x (checked 1.1.3)",
    why="the same for LangGraph's prebuilt ReAct agent, whose node closes over its prompt piped into the bound model",
    check=_source_has("langgraph.prebuilt.chat_agent_executor", "create_react_agent", "async def acall_model",
                      "static_model.ainvoke"))
# the closure variable that holds the model, per agent kind (a dynamic model, chosen per call, is left alone)
AGENT_MODEL_VARIABLES = ("model", "static_model")


def agent_model(node: Any) -> tuple[str, Any] | None:
    """(closure variable, what it holds) for the chat model an agent's model node closes over
    (``create_agent``: the model; ``create_react_agent``: its prompt piped into the bound model);
    None when the node is not such a function node."""
    afunc = getattr(node, "afunc", None)
    code = getattr(afunc, "__code__", None)
    if code is None or not afunc.__closure__:
        return None
    cells = dict(zip(code.co_freevars, afunc.__closure__, strict=True))
    if cells.get("is_dynamic_model") is not None and cells["is_dynamic_model"].cell_contents:
        return None
    for name in AGENT_MODEL_VARIABLES:
        if name in cells and cells[name].cell_contents is not None:
            return name, cells[name].cell_contents
    return None


def agent_model_node_with(node: Any, variable: str, value: Any) -> Any:
    """A shallow copy of the agent's model ``node`` whose async function is the same code with the closure
    ``variable`` holding ``value`` (the sync function stays the user's)."""
    import copy
    import types

    afunc = node.afunc
    cells = list(afunc.__closure__)
    cells[afunc.__code__.co_freevars.index(variable)] = types.CellType(value)
    new = types.FunctionType(afunc.__code__, afunc.__globals__, afunc.__name__, afunc.__defaults__, tuple(cells))
    new.__kwdefaults__, new.__qualname__ = afunc.__kwdefaults__, afunc.__qualname__
    new.__dict__.update(afunc.__dict__)
    copied = copy.copy(node)
    copied.afunc = new
    return copied
