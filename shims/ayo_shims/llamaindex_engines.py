"""LlamaIndex internals the SubQuestion and Router engine lowerings touch (``ayo_llamaindex.sub_question``,
``ayo_llamaindex.router``): the engines' private state, the question generator's and selectors' LLM and
prompt, and the selectors' private helpers. Each is reached through one function here, declared once.
"""

from __future__ import annotations

from typing import Any

from ayo_shims.llamaindex import CORE, CORE_CHECKED, assigns, mirrored
from ayo_shims.touchpoints import declare, has_attr

_SUBQ = "llama_index.core.query_engine.sub_question_query_engine"
_ROUTER = "llama_index.core.query_engine.router_query_engine"
_QGEN = "llama_index.core.question_gen.llm_generators"
_SEL = "llama_index.core.selectors.llm_selectors"

# -- SubQuestionQueryEngine ------------------------------------------------------------------

declare(f"{_SUBQ}.SubQuestionQueryEngine._question_gen/_response_synthesizer/_metadatas/_query_engines/"
        "_verbose/_use_async", framework=CORE, checked=CORE_CHECKED,
        why="capture reads the engine's question generator, tools, synthesizer and flags",
        check=assigns(_SUBQ, "SubQuestionQueryEngine", "_question_gen", "_response_synthesizer", "_metadatas",
                      "_query_engines", "_verbose", "_use_async"))


def subq_parts(engine: Any) -> dict[str, Any]:
    """The engine's parts: ``question_gen``, ``synthesizer``, ``metadatas``, ``query_engines``, ``verbose``,
    ``use_async``."""
    return {"question_gen": engine._question_gen, "synthesizer": engine._response_synthesizer,
            "metadatas": list(engine._metadatas), "query_engines": dict(engine._query_engines),
            "verbose": bool(engine._verbose), "use_async": bool(engine._use_async)}


declare(f"{_SUBQ}.SubQuestionQueryEngine._construct_node", framework=CORE, checked=CORE_CHECKED,
        why="the final synthesis reads each answered sub-question as the node stock builds for it",
        check=has_attr(_SUBQ, "SubQuestionQueryEngine", "_construct_node"))


def subq_construct_node(engine: Any, qa_pair: Any) -> Any:
    return engine._construct_node(qa_pair)


SUBQ_MIRRORED = mirrored(_SUBQ, "SubQuestionQueryEngine", (
    "query", "aquery", "_query", "_aquery", "_aquery_subq", "_query_subq", "_construct_node"),
    why="the engine's control flow (generate, answer each sub-question, synthesize) is lowered to a graph")

declare(f"{_QGEN}.LLMQuestionGenerator._llm/_prompt", framework=CORE, checked=CORE_CHECKED,
        why="the question generator's decode is sent through Ayo's engine and streamed, with its own prompt",
        check=assigns(_QGEN, "LLMQuestionGenerator", "_llm", "_prompt"))


def question_gen_llm(generator: Any) -> Any:
    return generator._llm


def question_gen_prompt(generator: Any) -> Any:
    return generator._prompt


QUESTION_GEN_MIRRORED = mirrored(_QGEN, "LLMQuestionGenerator", ("generate", "agenerate"),
                                 why="the generator's predict + parse runs as one streamed decode")

# -- RouterQueryEngine -----------------------------------------------------------------------

declare(f"{_ROUTER}.RouterQueryEngine._selector/_query_engines/_metadatas/_summarizer/_verbose", framework=CORE,
        checked=CORE_CHECKED, why="capture reads the router's selector, candidate engines and summarizer",
        check=assigns(_ROUTER, "RouterQueryEngine", "_selector", "_query_engines", "_metadatas", "_summarizer",
                      "_verbose"))


def router_parts(engine: Any) -> dict[str, Any]:
    """The router's parts: ``selector``, ``query_engines``, ``metadatas``, ``summarizer``, ``verbose``."""
    return {"selector": engine._selector, "query_engines": list(engine._query_engines),
            "metadatas": list(engine._metadatas), "summarizer": engine._summarizer, "verbose": bool(engine._verbose)}


ROUTER_MIRRORED = mirrored(_ROUTER, "RouterQueryEngine", ("query", "aquery", "_query", "_aquery"),
                           why="the router's control flow (select, run the chosen engines, combine) is a graph")

declare(f"{_SEL}.LLMSingleSelector/LLMMultiSelector._llm/_prompt, LLMMultiSelector._max_outputs", framework=CORE,
        checked=CORE_CHECKED, why="the selector's decode is sent through Ayo's engine with the selector's own prompt",
        check=lambda: (assigns(_SEL, "LLMSingleSelector", "_llm", "_prompt")(),
                       assigns(_SEL, "LLMMultiSelector", "_llm", "_prompt", "_max_outputs")()))


def selector_llm(selector: Any) -> Any:
    return selector._llm


def selector_prompt(selector: Any) -> Any:
    return selector._prompt


def selector_max_outputs(selector: Any) -> int | None:
    return selector._max_outputs


def _check_module_functions() -> None:
    import importlib

    module = importlib.import_module(_SEL)
    missing = [f for f in ("_build_choices_text", "_structured_output_to_selector_result") if not hasattr(module, f)]
    if missing:
        raise AttributeError(f"{_SEL} has no {', '.join(missing)}")


declare(f"{_SEL}._build_choices_text/_structured_output_to_selector_result", framework=CORE, checked=CORE_CHECKED,
        why="the selector's prompt arguments and result are built with the selector module's own helpers",
        check=_check_module_functions)


def build_choices_text(choices: Any) -> str:
    from llama_index.core.selectors import llm_selectors

    return llm_selectors._build_choices_text(choices)


def selector_result(parsed: Any) -> Any:
    from llama_index.core.selectors import llm_selectors

    return llm_selectors._structured_output_to_selector_result(parsed)


SELECTOR_MIRRORED = mirrored(_SEL, "LLMSingleSelector", ("select", "aselect", "_select", "_aselect"),
                             why="the selector's predict + parse runs as one decode through Ayo's engine")
MULTI_SELECTOR_MIRRORED = mirrored(_SEL, "LLMMultiSelector", ("select", "aselect", "_select", "_aselect"),
                                   why="the selector's predict + parse runs as one decode through Ayo's engine")

# -- TransformQueryEngine (HyDE) ----------------------------------------------------------------

_TRANSFORM = "llama_index.core.query_engine.transform_query_engine"
_QT = "llama_index.core.indices.query.query_transform.base"

declare(f"{_TRANSFORM}.TransformQueryEngine._query_engine/_query_transform/_transform_metadata", framework=CORE,
        checked=CORE_CHECKED, why="capture reads the engine the transformed query goes to, and the transform",
        check=assigns(_TRANSFORM, "TransformQueryEngine", "_query_engine", "_query_transform", "_transform_metadata"))


def transform_parts(engine: Any) -> dict[str, Any]:
    """The engine's parts: ``query_engine``, ``transform``, ``metadata``."""
    return {"query_engine": engine._query_engine, "transform": engine._query_transform,
            "metadata": engine._transform_metadata}


TRANSFORM_MIRRORED = mirrored(_TRANSFORM, "TransformQueryEngine", ("query", "aquery", "_query", "_aquery"),
                              why="the engine's control flow (transform the query, then query the engine) is a graph")

declare(f"{_QT}.HyDEQueryTransform._llm/_hyde_prompt/_include_original", framework=CORE, checked=CORE_CHECKED,
        why="the hypothetical document's decode is sent through Ayo's engine with the transform's own prompt",
        check=assigns(_QT, "HyDEQueryTransform", "_llm", "_hyde_prompt", "_include_original"))


def hyde_parts(transform: Any) -> dict[str, Any]:
    """A ``HyDEQueryTransform``'s ``llm``, ``prompt`` and ``include_original``."""
    return {"llm": transform._llm, "prompt": transform._hyde_prompt,
            "include_original": bool(transform._include_original)}


HYDE_MIRRORED = mirrored(_QT, "HyDEQueryTransform", ("run", "_run", "__call__"),
                         why="the transform's predict runs as one decode through Ayo's engine")

# -- RetrySourceQueryEngine ------------------------------------------------------------------------

_RETRY_SOURCE = "llama_index.core.query_engine.retry_source_query_engine"

declare(f"{_RETRY_SOURCE}.RetrySourceQueryEngine._evaluator", framework=CORE, checked=CORE_CHECKED,
        why="the stand-in's running copy holds an evaluator that runs the per-source evaluations at once",
        check=assigns(_RETRY_SOURCE, "RetrySourceQueryEngine", "_evaluator"))


def retry_source_evaluator(engine: Any) -> Any:
    return engine._evaluator


def set_retry_source_evaluator(engine: Any, evaluator: Any) -> None:
    """On the stand-in's own copy of the engine: the user's engine keeps its evaluator."""
    engine._evaluator = evaluator


RETRY_SOURCE_MIRRORED = mirrored(
    _RETRY_SOURCE, "RetrySourceQueryEngine", ("_query", "_aquery"),
    why="the concurrent per-source evaluations are the ones stock's _query makes, one evaluate per source node, "
        "after a failed evaluate_response; a subclass that overrides them keeps its own evaluator")

# -- RouterRetriever -------------------------------------------------------------------------------

_ROUTER_RETRIEVER = "llama_index.core.retrievers.router_retriever"

declare(f"{_ROUTER_RETRIEVER}.RouterRetriever._selector/_retrievers/_metadatas", framework=CORE,
        checked=CORE_CHECKED, why="capture reads the router retriever's selector and candidate retrievers",
        check=assigns(_ROUTER_RETRIEVER, "RouterRetriever", "_selector", "_retrievers", "_metadatas"))


def router_retriever_parts(retriever: Any) -> dict[str, Any]:
    """The retriever's parts: ``selector``, ``retrievers``, ``metadatas``."""
    return {"selector": retriever._selector, "retrievers": list(retriever._retrievers),
            "metadatas": list(retriever._metadatas)}


ROUTER_RETRIEVER_MIRRORED = mirrored(
    _ROUTER_RETRIEVER, "RouterRetriever", ("retrieve", "aretrieve", "_retrieve", "_aretrieve",
                                           "_handle_recursive_retrieval"),
    why="the selector's decode goes through Ayo's engine, then the chosen retrievers (lowered) run at once")

# -- ToolRetrieverRouterQueryEngine ------------------------------------------------------------------

declare(f"{_ROUTER}.ToolRetrieverRouterQueryEngine._retriever/_summarizer", framework=CORE, checked=CORE_CHECKED,
        why="capture reads the engine's tool retriever (an ObjectRetriever) and its summarizer",
        check=assigns(_ROUTER, "ToolRetrieverRouterQueryEngine", "_retriever", "_summarizer"))


def tool_router_parts(engine: Any) -> dict[str, Any]:
    """The engine's parts: ``retriever`` (of query engine tools), ``summarizer``."""
    return {"retriever": engine._retriever, "summarizer": engine._summarizer}


TOOL_ROUTER_MIRRORED = mirrored(_ROUTER, "ToolRetrieverRouterQueryEngine", ("query", "aquery", "_query", "_aquery"),
                                why="the engine's control flow (retrieve tools, run their engines, combine) is a graph")

# -- RetrieverRouterQueryEngine (deprecated) ------------------------------------------------------

declare(f"{_ROUTER}.RetrieverRouterQueryEngine._retriever/_node_to_query_engine_fn", framework=CORE,
        checked=CORE_CHECKED,
        why="capture reads the engine's retriever (of nodes describing engines) and its node-to-engine function",
        check=assigns(_ROUTER, "RetrieverRouterQueryEngine", "_retriever", "_node_to_query_engine_fn"))


def retriever_router_parts(engine: Any) -> dict[str, Any]:
    """The engine's parts: ``retriever`` (of nodes that each stand for a query engine), ``node_to_query_engine``
    (the user's function from such a node to its engine)."""
    return {"retriever": engine._retriever, "node_to_query_engine": engine._node_to_query_engine_fn}


RETRIEVER_ROUTER_MIRRORED = mirrored(
    _ROUTER, "RetrieverRouterQueryEngine", ("query", "aquery", "_query", "_aquery"),
    why="the engine's control flow (retrieve one node, map it to an engine, query that engine) is a graph")

# -- RecursiveRetriever ----------------------------------------------------------------------------

_RECURSIVE = "llama_index.core.retrievers.recursive_retriever"

declare(f"{_RECURSIVE}.RecursiveRetriever._root_id/_retriever_dict/_query_engine_dict/_query_response_tmpl",
        framework=CORE, checked=CORE_CHECKED,
        why="capture reads the root retriever; the lowered recursion formats a query engine's answer as stock's",
        check=assigns(_RECURSIVE, "RecursiveRetriever", "_root_id", "_retriever_dict", "_query_engine_dict",
                      "_query_response_tmpl"))


def recursive_parts(retriever: Any) -> dict[str, Any]:
    """The retriever's ``root`` (its root retriever) and ``response_tmpl`` (how a query engine's answer
    becomes a node)."""
    return {"root": retriever._retriever_dict[retriever._root_id], "root_id": retriever._root_id,
            "response_tmpl": retriever._query_response_tmpl}


declare(f"{_RECURSIVE}.RecursiveRetriever._get_object/_deduplicate_nodes", framework=CORE, checked=CORE_CHECKED,
        why="the lowered recursion finds each linked object and deduplicates with the retriever's own code",
        check=has_attr(_RECURSIVE, "RecursiveRetriever", "_get_object", "_deduplicate_nodes"))


def recursive_object(retriever: Any, query_id: str) -> Any:
    """The retriever, query engine or node ``query_id`` links to (the retriever's own lookup and error)."""
    return retriever._get_object(query_id)


def recursive_deduplicate(retriever: Any, nodes: list[Any]) -> list[Any]:
    return retriever._deduplicate_nodes(nodes)


RECURSIVE_MIRRORED = mirrored(_RECURSIVE, "RecursiveRetriever", (
    "retrieve", "_retrieve", "_retrieve_rec", "_query_retrieved_nodes", "_get_object", "_deduplicate_nodes",
    "_handle_recursive_retrieval"),
    why="the recursion runs each level's linked retrievers and query engines at once (stock: one after another)")
