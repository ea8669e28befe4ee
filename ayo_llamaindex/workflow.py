"""``ayo_llamaindex.optimize(workflow)``: a LlamaIndex ``Workflow`` (user subclasses with ``@step`` s,
and the agents built on it: ``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``) run by Ayo.

``fast = optimize(workflow)``; ``handler = fast.run(...)`` returns stock's own ``WorkflowHandler``
(await it for the result; ``handler.stream_events()``; ``handler.ctx``): the workflow's control loop
runs unchanged, so events, their order, ``Context`` state and errors are stock's. Each run is one
Ayo query whose graph grows by the step invocations its events start, and the model calls of the
steps go through Ayo's shared LLM engine schedulers (see :mod:`ayo_llamaindex.workflow_run`).

Not recognized (returned unchanged by ``optimize`` with a warning naming why): a user's subclass of
a LlamaIndex agent class that overrides its methods (Ayo knows the agents as LlamaIndex ships
them), a workflow whose async OpenAI models cannot be routed (they then run as stock inside the
optimized run, and ``explain()`` says so).
"""

from __future__ import annotations

import logging
from typing import Any

from ayo_core.explain import Explanation, explanation
from ayo_core.pipeline import Options
from ayo_core.runtime import LoopRuntimes
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.runtime import LLM_INFLIGHT, assign_engines
from ayo_llamaindex.workflow_engines import StepQueryEngines
from ayo_llamaindex.workflow_run import WorkflowRun, begin_run, end_run
from ayo_shims import llamaindex_workflows as wf_shim

log = logging.getLogger(__name__)

__all__ = ["OptimizedWorkflow", "unrecognized_reason"]


def _agent_classes() -> tuple[type, ...]:
    from llama_index.core.agent.workflow import AgentWorkflow, CodeActAgent, FunctionAgent, ReActAgent

    return (FunctionAgent, ReActAgent, CodeActAgent, AgentWorkflow)


def unrecognized_reason(workflow: Any) -> str | None:
    """Why Ayo leaves this workflow as the user's object (None: Ayo runs it).

    A user's own ``Workflow`` subclass is the general case and is run (its steps are user code
    anyway). A subclass of a LlamaIndex agent class that changes it is not: Ayo knows those agents
    as shipped, and a changed agent loop is the user's to run."""
    from ayo_core.introspect import overridden

    cls = type(workflow)
    for agent in _agent_classes():
        if isinstance(workflow, agent) and cls is not agent:
            own = sorted(n for n, v in vars(cls).items() if callable(v) and not n.startswith("__"))
            changed = overridden(workflow, agent, own)
            if changed or cls.__module__.split(".")[0] != "llama_index":
                detail = f"overrides {', '.join(changed)}" if changed else "is a user's subclass"
                return (f"{cls.__name__} subclasses LlamaIndex's {agent.__name__} and {detail}: Ayo optimizes "
                        f"{agent.__name__} as LlamaIndex ships it; pass a {agent.__name__} (its tools, prompts and "
                        "llm are yours to set) or a Workflow subclass of your own")
    return None


class OptimizedWorkflow:
    """A LlamaIndex ``Workflow`` run by Ayo: ``run(...)`` returns stock's handler; ``explain()``,
    ``last_trace``. Any other attribute is the workflow's own."""

    def __init__(self, workflow: Any, policy: str = "critical_path", options: Options | None = None) -> None:
        self.stock = workflow
        self._options = options or Options(policy=policy)
        self._policy = self._options.policy
        self._llm_inflight = self._options.llm_inflight or LLM_INFLIGHT
        self._runtimes = LoopRuntimes(self._policy)
        self._llms: list[LLMBinding] = []
        self._routed_steps: dict[str, int] = {}  # step -> model calls Ayo's engine served
        self._own_client_steps: dict[str, int] = {}  # step -> model calls sent through the model's own client
        self.query_engines = StepQueryEngines(self._options)  # the query engines its steps call, lowered
        self.last_trace: Any = None
        self.last_graph: Any = None
        self.last_run: WorkflowRun | None = None
        for llm in _models_of(workflow):
            self._binding(llm)

    # -- the stock interface -------------------------------------------------------------------
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """``workflow.run(...)``: stock's handler; this run's steps are scheduled by Ayo."""
        assignment = assign_engines(self._llms, [])
        rt = self._runtimes.get(assignment.engines, assignment.configs(self._llm_inflight))
        run = WorkflowRun(self, rt)
        token = begin_run(run)
        try:
            handler = self.stock.run(*args, **kwargs)
        finally:
            end_run(token)
        run.start(handler)
        self.last_run = run
        return handler

    def __getattr__(self, name: str) -> Any:
        if name == "stock":  # not set yet (a copy being built): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.stock, name)

    # -- engines -------------------------------------------------------------------------------
    def _binding(self, llm: Any) -> LLMBinding:
        for b in self._llms:
            if b.llm is llm:
                return b
        binding = LLMBinding(llm)
        self._llms.append(binding)
        return binding

    def engine_kind(self, llm: Any, runtime: Any) -> str | None:
        """The engine kind serving ``llm`` on ``runtime`` (one met at run time is added); None when Ayo
        does not send this model's requests (it then runs as stock)."""
        binding = self._binding(llm)
        if not binding.recognized:
            return None
        assignment = assign_engines(self._llms, [])
        kind = assignment.llm_kind(binding)
        if kind is not None:
            runtime.add_engines({kind: assignment.engines[kind]}, assignment.configs(self._llm_inflight))
        return kind

    def note_model_calls(self, step: str, served: int, own_client: int) -> None:
        if served:
            self._routed_steps[step] = self._routed_steps.get(step, 0) + served
        if own_client:
            self._own_client_steps[step] = self._own_client_steps.get(step, 0) + own_client

    # -- explain -------------------------------------------------------------------------------
    def explain(self) -> Explanation:
        """The steps (lowered: their model calls go to Ayo's engine; opaque: user code only), the
        models and the last run's grown graph and trace."""
        steps = wf_shim.workflow_steps(self.stock)
        lowered = [(type(self.stock).__name__, "Workflow")]
        opaque = []
        lines = [f"workflow {type(self.stock).__name__}: each step invocation is a node added while the run "
                 "goes on (events.N routes grow the graph)"]
        for name, fn in steps.items():
            summary = wf_shim.step_summary(fn)
            own = self._own_client_steps.get(name, 0)
            note = (f"; {own} model request(s) the engine does not speak (tools, response_format, logprobs) "
                    "went through the model's own client") if own else ""
            queries = self.query_engines.served.get(name, 0)
            if name in self._routed_steps:
                lowered.append((f"step:{name}", "LLMCall"))
                also = f"; {queries} query engine or retriever call(s) ran as Ayo's graph" if queries else ""
                lines.append(f"  step {name} ({summary}): model calls through Ayo's LLM engine "
                             f"({self._routed_steps[name]} so far){also}{note}")
            elif queries:
                lowered.append((f"step:{name}", "QueryEngine"))
                lines.append(f"  step {name} ({summary}): its query engine and retriever calls ran as Ayo's graph "
                             f"({queries} so far)")
            else:
                why = "its model requests use tools" if own else "no model call of a recognized LLM seen"
                opaque.append((f"step:{name}", f"user code ({why})"))
                lines.append(f"  step {name} ({summary}): user code{note}")
        lines += self.query_engines.explain_lines()
        early = list(self.last_run.early_tools.log) if self.last_run is not None else []
        if early:
            lines.append(f"  last run: {len(early)} tool call(s) started as soon as their arguments were complete in "
                         f"the model's stream ({', '.join(e['tool'] for e in early)})")
        for b in self._llms:
            if not b.recognized:
                opaque.append((b.label, f"its calls run as stock: {b.reason}"))
        return explanation(f"Ayo plan for workflow {type(self.stock).__name__}", graph=self.last_graph,
                           trace=self.last_trace, modules=lowered, opaque=opaque, module_lines=lines)


def _models_of(workflow: Any, depth: int = 2) -> list[Any]:
    """The LlamaIndex LLMs a workflow holds in its attributes (agents: ``llm``; AgentWorkflow: its
    agents' ``llm``), found up front so explain() names them; others are met at run time."""
    from llama_index.core.llms.llm import LLM

    found: list[Any] = []

    def visit(obj: Any, level: int) -> None:
        if isinstance(obj, LLM):
            if all(obj is not f for f in found):
                found.append(obj)
            return
        if level <= 0 or obj is None or isinstance(obj, str | int | float | bool | type):
            return
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else None
        if items is None:
            fields = getattr(type(obj), "model_fields", None)
            names = list(fields) if isinstance(fields, dict) else list(getattr(obj, "__dict__", {}))
            items = [getattr(obj, n, None) for n in names if not n.startswith("_")]
        for item in items:
            visit(item, level - 1)

    visit(workflow, depth)
    return found
