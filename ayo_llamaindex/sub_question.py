"""``SubQuestionQueryEngine`` lowered: a streamed question generator feeding concurrent sub-answers.

Stock ``SubQuestionQueryEngine`` waits for the generator's whole JSON list, then answers the
sub-questions (one after another with ``use_async=False``), then synthesizes. Here::

    query ── question_gen (DECODE, streamed: one part per complete {"sub_question", "tool_name"} object)
               └─ sub_answer (TOOL_CALL per part: the tool's query engine, optimized; starts as soon as
                  its object is complete, while the generator still writes the next one)
                    └─ synthesize (DECODE: the engine's synthesizer over the answered pairs) ── output

Every prompt is rendered by LlamaIndex's own code (the generator's prompt and ``build_tools_text``,
``LLMBinding.predict``); the final list is the generator's own output parser's (its errors, e.g.
``No valid JSON found in output``, are stock's); a streamed sub-question that the final parse does
not confirm is answered again (or cancelled). Each tool's query engine runs as an
:class:`~ayo_llamaindex.composed.ToolQueryEngine` on the same shared engine schedulers, so
the sub-answers' embeddings and decodes batch. A generator Ayo cannot reproduce (a subclass, another
generator class, an LLM it does not recognize) runs as the user's object in one node; an engine
subclass that overrides the control flow stays the user's object (see :func:`capture_sub_question`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.query_engine import SubQuestionQueryEngine
from llama_index.core.query_engine.sub_question_query_engine import SubQuestionAnswerPair
from llama_index.core.question_gen.llm_generators import LLMQuestionGenerator
from llama_index.core.question_gen.prompts import build_tools_text
from llama_index.core.question_gen.types import SubQuestion
from llama_index.core.schema import QueryBundle
from llama_index.core.utils import get_color_mapping, print_text

from ayo_core.explain import explanation, record_optimization
from ayo_core.graph import Graph
from ayo_core.introspect import overrides_reason
from ayo_core.pipeline import Options
from ayo_core.runtime.caller import call_stock
from ayo_core.templates import LLMCall, Opaque, Synthesis, SynthesisHooks, ToolCall
from ayo_llamaindex import events, spans, synthesis
from ayo_llamaindex.capture import SynthesizerPlan, capture_synthesizer
from ayo_llamaindex.composed import ComposedQueryEngine, ToolQueryEngine, tool_engine
from ayo_llamaindex.llm import LLMBinding
from ayo_llamaindex.lowering import synthesis_runner
from ayo_llamaindex.runtime import EngineAssignment, llm_send
from ayo_shims import llamaindex as shim
from ayo_shims import llamaindex_engines as eng

log = logging.getLogger(__name__)


@dataclass
class SubQuestionPlan:
    """What capture found in a ``SubQuestionQueryEngine``."""

    obj: Any
    parts: dict[str, Any]
    generator_llm: LLMBinding | None  # None: the generator runs as the user's object
    generator_reason: str
    tools: dict[str, ToolQueryEngine]
    synthesizer: SynthesizerPlan
    kind: str = "sub_question"
    notes: list[str] = field(default_factory=list)

    def llm_bindings(self) -> list[LLMBinding]:
        return [b for b in (self.generator_llm, self.synthesizer.llm) if b is not None]

    def opaque_modules(self) -> list[tuple[str, str]]:
        out = []
        if self.generator_llm is None:
            out.append(("question_gen", self.generator_reason))
        elif not self.generator_llm.recognized:
            out.append((self.generator_llm.label, f"LLM called as the user's object: {self.generator_llm.reason}"))
        if self.synthesizer.mode is None:
            out.append(("synthesizer", self.synthesizer.reason))
        for name, tool in self.tools.items():
            out.extend((f"tool[{name}].{m.name}", m.reason) for m in tool.explain().opaque)
        return out


def not_lowered_reason(engine: Any) -> str | None:
    """Why ``engine`` (a ``SubQuestionQueryEngine``) runs as the user's object; None when Ayo lowers it."""
    return overrides_reason(engine, SubQuestionQueryEngine, eng.SUBQ_MIRRORED)


def capture_sub_question(engine: Any, options: Options) -> SubQuestionPlan:
    parts = eng.subq_parts(engine)
    gen = parts["question_gen"]
    binding, reason = None, ""
    if not isinstance(gen, LLMQuestionGenerator):
        reason = f"{type(gen).__name__} is a question generator Ayo does not reproduce"
    elif over := overrides_reason(gen, LLMQuestionGenerator, eng.QUESTION_GEN_MIRRORED):
        reason = over
    else:
        binding = LLMBinding(eng.question_gen_llm(gen))
    tools: dict[str, ToolQueryEngine] = {}
    by_engine: dict[int, ToolQueryEngine] = {}
    for name, qe in parts["query_engines"].items():
        if id(qe) not in by_engine:  # one engine behind several tools is optimized once
            by_engine[id(qe)] = tool_engine(qe, options)
        tools[name] = by_engine[id(qe)]
    return SubQuestionPlan(engine, parts, binding, reason, tools, capture_synthesizer(parts["synthesizer"]))


# -- streaming the generator's JSON ----------------------------------------------------------

def complete_objects(text: str) -> list[SubQuestion]:
    """The sub-questions whose JSON objects are complete in ``text`` (the list the generator is writing),
    in order; stops at the first object that is not a valid sub-question."""
    start = text.find("[")
    out: list[SubQuestion] = []
    if start < 0:
        return out
    depth, in_string, escaped, obj_start = 0, False, False, -1
    for i in range(start + 1, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
            if depth == 1:
                obj_start = i
        elif ch == "}":
            depth -= 1
            if depth == 0:
                try:
                    out.append(SubQuestion.model_validate(json.loads(text[obj_start:i + 1])))
                except ValueError:
                    return out
        elif ch == "]" and depth == 0:
            break
    return out


def streaming_parts(text: str) -> list[Any]:
    """Finished sub-questions, then a stand-in for the object still being written (held back by the runtime)."""
    return [*complete_objects(text), None]


# -- lowering --------------------------------------------------------------------------------

def build_sub_question_graph(plan: SubQuestionPlan, assign: EngineAssignment) -> Graph:
    g = Graph(query_id="q")
    g.input("query")
    questions = _lower_generator(g, plan, assign)
    answers = ToolCall(_sub_answer_fn(plan), "sub_question", takes_ctx=True, per_part="sub_q", side_effect=False,
                       resources=None, cost=2.0).build(g, "sub_answer", {"sub_q": questions})
    g.output(_lower_synthesis(g, plan, assign, answers))
    if plan.generator_llm is not None:
        record_optimization(g, "sub_question_pipelining", "sub_answer",
                            "each sub-question's query engine starts once its JSON object is complete in the "
                            "generator's stream; sub-answers run concurrently on the shared engine schedulers")
    else:
        record_optimization(g, "concurrent_sub_answers", "sub_answer",
                            "sub-answers run concurrently on the shared engine schedulers")
    return g


def _lower_generator(g: Graph, plan: SubQuestionPlan, assign: EngineAssignment) -> str:
    gen, metadatas = plan.parts["question_gen"], plan.parts["metadatas"]
    verbose = plan.parts["verbose"]

    def announce(questions: list[SubQuestion]) -> list[SubQuestion]:
        if verbose:
            print_text(f"Generated {len(questions)} sub questions.\n")
        return questions

    if plan.generator_llm is None:
        async def run(ctx: Any, query: QueryBundle) -> list[SubQuestion]:
            return announce(await call_stock(gen.generate, gen.agenerate, metadatas, query))

        return Opaque(run, "question_gen", takes_ctx=True, resources=None, cost=1.0,
                      reason=plan.generator_reason).build(g, "question_gen", {"query": "query"})
    binding, kind = plan.generator_llm, assign.llm_kind(plan.generator_llm)
    prompt = eng.question_gen_prompt(gen)

    async def call(ctx: Any, query: QueryBundle) -> list[SubQuestion]:
        """``LLMQuestionGenerator.generate`` in its own span: its predict (the decode streamed to the
        sub-answers) and its own output parser (its errors, e.g. ``No valid JSON found in output``)."""
        with spans.opened(gen, spans.call_names(gen, "generate"), metadatas, query) as box:
            text = await binding.predict(llm_send(ctx, kind), prompt, stream_cb=ctx.stream_cb,
                                         tools_str=build_tools_text(metadatas), query_str=query.query_str)
            box.set(prompt.output_parser.parse(text).parsed_output)
        return announce(box.value)

    return LLMCall(lambda query: query, "question_gen", call=call, parts=streaming_parts,
                   cost=1.0).build(g, "question_gen", {"query": "query"})


def _sub_answer_fn(plan: SubQuestionPlan) -> Any:
    engine, verbose, use_async = plan.obj, plan.parts["verbose"], plan.parts["use_async"]
    tools = plan.tools

    async def answer(ctx: Any, sub_q: SubQuestion) -> SubQuestionAnswerPair | None:
        """``SubQuestionQueryEngine._aquery_subq`` with the tool's optimized query engine."""
        index = ctx.span.part if ctx.span is not None and ctx.span.part is not None else 0
        color = get_color_mapping([str(i) for i in range(index + 1)])[str(index)]
        question = sub_q.sub_question
        try:
            with engine.callback_manager.event(
                    CBEventType.SUB_QUESTION,
                    payload={EventPayload.SUB_QUESTION: SubQuestionAnswerPair(sub_q=sub_q)}) as event:
                query_engine = tools[sub_q.tool_name]
                if verbose:
                    print_text(f"[{sub_q.tool_name}] Q: {question}\n", color=color)
                response = await query_engine.aquery_in_graph(question, async_call=use_async or None)
                response_text = str(response)
                if verbose:
                    print_text(f"[{sub_q.tool_name}] A: {response_text}\n", color=color)
                qa_pair = SubQuestionAnswerPair(sub_q=sub_q, answer=response_text, sources=response.source_nodes)
                event.on_end(payload={EventPayload.SUB_QUESTION: qa_pair})
            return qa_pair
        except Exception:  # stock: a failed sub-question is logged and left out
            log.warning(f"[{sub_q.tool_name}] Failed to run {question}", exc_info=True)  # noqa: G004 - stock's text
            return None

    return answer


def _answered(engine: Any, pairs: list[SubQuestionAnswerPair | None]) -> tuple[list[Any], list[Any]]:
    qa_pairs = [p for p in pairs if p]
    nodes = [eng.subq_construct_node(engine, p) for p in qa_pairs]
    return nodes, [n for p in qa_pairs for n in p.sources]


def _lower_synthesis(g: Graph, plan: SubQuestionPlan, assign: EngineAssignment, answers: str) -> str:
    synth, engine = plan.synthesizer.obj, plan.obj
    if plan.synthesizer.mode is None:
        async def run_opaque(ctx: Any, query: QueryBundle, pairs: list) -> Any:
            nodes, sources = _answered(engine, pairs)
            return await call_stock(synth.synthesize, synth.asynthesize, query=query, nodes=nodes,
                                    additional_source_nodes=sources)

        return Opaque(run_opaque, "synthesizer", takes_ctx=True, resources=None, cost=1.0,
                      reason=plan.synthesizer.reason).build(g, "synthesize", {"query": "query", "pairs": answers})

    kind = assign.llm_kind(plan.synthesizer.llm)
    synthesize_text = synthesis_runner(plan.synthesizer, assign)

    async def run(ctx: Any, query: QueryBundle, pairs: list) -> Any:
        nodes, sources = _answered(engine, pairs)
        event = events.Synthesis(synth, query)  # BaseSynthesizer.synthesize's events
        if not nodes:
            return event.end(synthesis.empty_response(synth))
        event.begin()
        with event.failing():
            text = await synthesize_text(ctx, query.query_str, nodes)
            return event.end(shim.prepare_response_output(synth, text, [*nodes, *sources]))

    hooks = SynthesisHooks(run=run, engine=kind or "local")
    return Synthesis(plan.synthesizer.mode, module="synthesizer", hooks=hooks).build(
        g, "synthesize", {"query": "query", "pairs": answers})


class OptimizedSubQuestionQueryEngine(ComposedQueryEngine):
    """A ``SubQuestionQueryEngine`` run as an Ayo graph: same ``query``/``aquery`` results (text, source
    nodes, the ``SUB_QUESTION`` events' answer pairs), sub-answers started while the generator writes."""

    capture = staticmethod(capture_sub_question)
    build = staticmethod(build_sub_question_graph)

    def explain(self) -> Any:
        lines = [f"query_engine: {type(self._stock).__name__}",
                 f"  question_gen: {'LLMCall(streamed parts)' if self._plan.generator_llm else 'Opaque'}"
                 f" ({type(self._plan.parts['question_gen']).__name__})",
                 *(f"  tool[{name}]: {tool.explain().modules[0].template if tool.explain().modules else 'Opaque'}"
                   f" ({type(tool.stock).__name__})" for name, tool in self._plan.tools.items()),
                 f"  synthesizer: {self._plan.synthesizer.template}"]
        modules = [(type(self._stock).__name__, "QueryEngine")]
        if self._plan.generator_llm is not None:
            modules.append((type(self._plan.parts["question_gen"]).__name__, "LLMCall(parts)"))
        if self._plan.synthesizer.mode is not None:
            modules.append((type(self._plan.synthesizer.obj).__name__, self._plan.synthesizer.template))
        return explanation(f"Ayo plan for {type(self._stock).__name__}", graph=self.graph, trace=self.last_trace,
                           modules=modules, opaque=self._plan.opaque_modules(), module_lines=lines)

    def __repr__(self) -> str:
        return f"OptimizedSubQuestionQueryEngine({type(self._stock).__name__})"
