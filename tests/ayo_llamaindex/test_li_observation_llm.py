"""Every observation API against stock's, for each pattern the adapter lowers, on the real vLLM server
(issue 30 item 2's matrix): in one run of each side, the instrumentation dispatcher's span tree with the
events sent inside each span (what OpenTelemetry, Phoenix or Langfuse build their traces from), and
every ``CallbackManager`` event with its parent and its start and end payloads as a handler reads them
(the query, the retrieved nodes with ids, scores and text, the messages sent, the model's response,
the final response with its source nodes and metadata keys), under ``query()`` and ``aquery()``; for
chat engines under ``chat``, ``achat`` and ``stream_chat``; a streamed response token by token; the composed
engines (SubQuestion, a Router with a single and a multi selector) over three query-engine tools. The
``aquery()`` and ``achat`` runs are marked ``long`` (``make test-long``): CI's time. Also opt-in: HyDE and
the citation engine (``query()`` and ``aquery()``), a Workflow whose step awaits a query engine and a
model, and the other modules the adapter lowers (``MultiStepQueryEngine``, ``RetryQueryEngine``,
``RetrySourceQueryEngine``, a ``CustomQueryEngine``, ``ToolRetrieverRouterQueryEngine``, a local
postprocessor, ``AutoMergingRetriever``, ``RecursiveRetriever`` linking query engines).

The offline suites (``test_spans.py``, ``test_chat_spans.py``, the conformance suite's payload check)
check these APIs against a fake server; here the answers are the real model's, so refine's and
tree_summarize's later calls read the real first answers, and LLMRerank and the fusion retriever parse
what the model actually wrote. Siblings in the span tree are compared as a multiset (Ayo runs
independent calls at once; stock's ``aquery`` does too), as offline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher

import ayo_llamaindex
from tests.adapters.li_case import EventRecorder
from tests.ayo_langchain.lc_helpers import MODEL
from tests.ayo_langchain.test_event_stream import _UUID
from tests.ayo_llamaindex.li_helpers import QUESTIONS, TEXTS
from tests.ayo_llamaindex.test_events_retries_lifecycle import make_engine, make_llm
from tests.ayo_llamaindex.test_spans import KINDS, EventLog, SpanTree, span_tree
from tests.ayo_llamaindex.test_sub_question import TOOLS, sub_question_engine
from tests.server_streams import assert_same_stream

pytestmark = [pytest.mark.llm, pytest.mark.timeout(600)]
TOKENS = 48  # the model's answers run on past a sentence; 64-256 tokens: test_li_long_answers.py
RECORDER = EventRecorder()


@pytest.fixture(scope="module")
def observed_index(llm_url: str, embed_model: Any) -> Iterator[VectorStoreIndex]:
    """An index; span and event recorders on the root dispatcher, a callback recorder in ``Settings``
    (objects built while it is set report to it, as users set it up), the real model in ``Settings``."""
    dispatcher, old_llm, old_callbacks = get_dispatcher(), Settings._llm, Settings._callback_manager  # noqa: SLF001
    spans, log = SpanTree(), EventLog()
    dispatcher.add_span_handler(spans)
    dispatcher.add_event_handler(log)
    Settings.llm = real_llm(llm_url)
    Settings.callback_manager = CallbackManager([RECORDER])
    yield VectorStoreIndex.from_documents([Document(text=t, id_=f"d{i}") for i, t in enumerate(TEXTS)],
                                          embed_model=embed_model)
    dispatcher.span_handlers.remove(spans)
    dispatcher.event_handlers.remove(log)
    Settings._llm, Settings._callback_manager = old_llm, old_callbacks  # noqa: SLF001 - restored


def real_llm(url: str) -> Any:
    return make_llm(url, model=MODEL, max_tokens=TOKENS)


def observe(run: Callable[[], Any]) -> tuple[Any, list[Any], list[tuple], Any]:
    """One run's span tree, callback events (paths from the root), callback payloads, and its answer."""
    RECORDER.reset()
    answer: list[Any] = []
    tree = span_tree(lambda: answer.append(run()))
    return tree, RECORDER.paths(), sorted(RECORDER.payloads, key=repr), answer[0]


def _ids_masked(observed: tuple[Any, list[Any], list[tuple], Any]) -> tuple[Any, list[Any], list[tuple], Any]:
    """Node ids made per run (a SubQuestion engine's answer nodes: new ``TextNode``s, random in stock too)."""
    tree, events, payloads, answer = observed
    return tree, events, sorted(_UUID.sub("<id>", repr(p)) for p in payloads), answer


def assert_observed_as_stock(build: Callable[[], Any], run: Callable[[Any], Any], calls_model: bool = True,
                             random_node_ids: bool = False) -> None:
    want = observe(lambda: run(build()))
    got = observe(lambda: run(ayo_llamaindex.optimize(build())))
    if random_node_ids:
        want, got = _ids_masked(want), _ids_masked(got)
    if isinstance(want[3], list):  # a stream: the text, cut where stock's is but for a server's merged events
        assert_same_stream(got[3], want[3])
    else:
        assert got[3] == want[3]
    assert got[1] == want[1], f"got {got[1]}\nwant {want[1]}"  # callback events, each under its parent
    assert got[2] == want[2]  # their payloads
    assert got[0] == want[0]  # the span tree with each span's events
    assert any("OpenAILike." in key for key in want[0]) == calls_model, "the recorders did not see stock's model spans"


@pytest.mark.parametrize("use_async", [False, pytest.param(True, marks=pytest.mark.long)])  # CI's time
@pytest.mark.parametrize("kind", KINDS)
def test_query_engine_observed_as_stock(observed_index: Any, llm_url: str, kind: str, use_async: bool) -> None:
    def run(engine: Any) -> str:
        response = asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0])
        return str(response)

    assert_observed_as_stock(lambda: make_engine(kind, observed_index, real_llm(llm_url)), run, kind != "no_text")


def test_streamed_response_observed_as_stock(observed_index: Any, llm_url: str) -> None:
    def run(engine: Any) -> list[str]:
        return list(engine.query(QUESTIONS[0]).response_gen)

    assert_observed_as_stock(
        lambda: observed_index.as_query_engine(llm=real_llm(llm_url), similarity_top_k=2, streaming=True), run)


@pytest.mark.parametrize("style", ["chat", pytest.param("achat", marks=pytest.mark.long), "stream_chat"])
@pytest.mark.parametrize("mode", ["context", "condense_plus_context"])
def test_chat_engine_observed_as_stock(observed_index: Any, llm_url: str, mode: str, style: str) -> None:
    def run(engine: Any) -> Any:
        engine.reset()
        if style == "chat":
            return str(engine.chat(QUESTIONS[0]))
        if style == "achat":
            return str(asyncio.run(engine.achat(QUESTIONS[0])))
        return list(engine.stream_chat(QUESTIONS[0]).response_gen)

    assert_observed_as_stock(
        lambda: observed_index.as_chat_engine(chat_mode=mode, llm=real_llm(llm_url), similarity_top_k=2), run)


@pytest.fixture(scope="module")
def observed_tools(observed_index: Any, llm_url: str, embed_model: Any) -> list[Any]:
    """Three query-engine tools (``test_sub_question.TOOLS``), built while the recorders are set."""
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.tools import QueryEngineTool

    tools = []
    for name, description, picks in TOOLS:
        index = VectorStoreIndex.from_documents([Document(text=TEXTS[i], id_=f"doc{i}") for i in picks],
                                                embed_model=embed_model)
        engine = RetrieverQueryEngine.from_args(index.as_retriever(similarity_top_k=1), llm=real_llm(llm_url))
        tools.append(QueryEngineTool.from_defaults(engine, name=name, description=description))
    return tools


@pytest.mark.parametrize("composed", ["sub_question", "router", "router_multi"])
def test_composed_engine_observed_as_stock(observed_tools: Any, llm_url: str, composed: str) -> None:
    from tests.ayo_llamaindex.test_router import router
    from tests.ayo_llamaindex.test_sub_question import QUESTIONS as COMPOSED_QUESTIONS

    def build() -> Any:
        if composed == "sub_question":  # use_async=True: from_defaults' default
            return sub_question_engine(llm_url, observed_tools)
        return router(llm_url, observed_tools, multi=composed == "router_multi")

    assert_observed_as_stock(build, lambda engine: str(engine.query(COMPOSED_QUESTIONS[0])),
                             random_node_ids=composed == "sub_question")


def _hyde(index: Any, url: str) -> Any:
    from llama_index.core.indices.query.query_transform import HyDEQueryTransform
    from llama_index.core.query_engine import TransformQueryEngine

    return TransformQueryEngine(index.as_query_engine(llm=real_llm(url), similarity_top_k=2),
                                HyDEQueryTransform(llm=real_llm(url)))


def _citation(index: Any, url: str) -> Any:
    from llama_index.core.query_engine import CitationQueryEngine

    return CitationQueryEngine.from_args(index, llm=real_llm(url), similarity_top_k=2, citation_chunk_size=64)


@pytest.mark.long  # CI's time (make test-long); the offline suites compare their spans (test_composed_spans.py)
@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("kind", ["hyde", "citation"])
def test_transform_and_citation_engines_observed_as_stock(observed_index: Any, llm_url: str, kind: str,
                                                          use_async: bool) -> None:
    """HyDE (its decode in the transform's ``_run`` span, then the inner engine's own spans) and the
    citation engine (its citation chunks in the payloads) on the model's real answers."""
    build = {"hyde": _hyde, "citation": _citation}[kind]

    def run(engine: Any) -> str:
        return str(asyncio.run(engine.aquery(QUESTIONS[0])) if use_async else engine.query(QUESTIONS[0]))

    # citation nodes get new ids per query (stock's own uuid4s)
    assert_observed_as_stock(lambda: build(observed_index, llm_url), run, random_node_ids=kind == "citation")


@pytest.mark.long  # CI's time (make test-long); test_workflows.py compares its event stream on the real server
def test_workflow_observed_as_stock(observed_index: Any, llm_url: str) -> None:
    """A Workflow whose step awaits a query engine and then its model on the real answer: the run and
    step spans hold the engine's and the model's, the engine's callback events nest as stock's."""
    from tests.ayo_llamaindex.test_composed_spans import AskThenRewrite

    class RealAskThenRewrite(AskThenRewrite):
        def __init__(self, **kw: Any) -> None:
            super().__init__(observed_index, llm_url, **kw)
            self.engine = observed_index.as_query_engine(llm=real_llm(llm_url), similarity_top_k=2)
            self.llm = real_llm(llm_url)

    def run(workflow: Any) -> str:
        async def go() -> Any:
            return await workflow.run(question=QUESTIONS[0])

        return str(asyncio.run(go()))

    assert_observed_as_stock(lambda: RealAskThenRewrite(timeout=120), run)


def _auto_merging(url: str, embed_model: Any) -> Any:
    from llama_index.core import StorageContext
    from llama_index.core.node_parser import HierarchicalNodeParser, get_leaf_nodes
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import AutoMergingRetriever

    nodes = HierarchicalNodeParser.from_defaults(chunk_sizes=[160, 40], chunk_overlap=0).get_nodes_from_documents(
        [Document(text=" ".join(TEXTS * 3), id_="all")])
    storage = StorageContext.from_defaults()
    storage.docstore.add_documents(nodes)
    index = VectorStoreIndex(get_leaf_nodes(nodes), storage_context=storage, embed_model=embed_model)
    retriever = AutoMergingRetriever(index.as_retriever(similarity_top_k=8), storage, simple_ratio_thresh=0.3)
    return RetrieverQueryEngine.from_args(retriever, llm=real_llm(url))


def _zoo() -> dict[str, Callable[[Any, str, Any], Any]]:
    """The other modules the adapter lowers, built as ``test_li_module_zoo_llm.py`` builds them (64-token answers)."""
    from llama_index.core.evaluation import RelevancyEvaluator
    from llama_index.core.postprocessor import LongContextReorder
    from llama_index.core.query_engine import RetryQueryEngine, RetrySourceQueryEngine

    from tests.ayo_llamaindex import test_li_module_zoo_llm as zoo

    return {
        "multistep": lambda index, url, emb: zoo.multistep(index, url),
        "retry": lambda index, url, emb: RetryQueryEngine(zoo.rag(index, url), RelevancyEvaluator(llm=real_llm(url)),
                                                          max_retries=1),
        "retry_source": lambda index, url, emb: RetrySourceQueryEngine(
            zoo.rag(index, url), RelevancyEvaluator(llm=real_llm(url)), llm=real_llm(url), max_retries=1),
        "custom": lambda index, url, emb: zoo.Answering(engine=zoo.rag(index, url)),
        "tool_router": zoo.tool_router,
        "long_context_reorder": lambda index, url, emb: zoo.rag(index, url, top_k=4,
                                                                node_postprocessors=[LongContextReorder()]),
        "auto_merging": lambda index, url, emb: _auto_merging(url, emb),
        "recursive": lambda index, url, emb: zoo.recursive(url, emb),
    }


ZOO = ["multistep", "retry", "retry_source", "custom", "tool_router", "long_context_reorder", "auto_merging",
       "recursive"]


@pytest.mark.long  # CI's time: each is answered at 64 tokens, several calls a side (make test-long)
@pytest.mark.parametrize("kind", ZOO)
def test_module_zoo_observed_as_stock(observed_index: Any, llm_url: str, embed_model: Any, kind: str) -> None:
    """Wrapping engines (their loop the user's code), a custom engine, the tool router, a local
    postprocessor and the retrievers that follow links or merge: spans, callback events and payloads as
    stock's on the model's real answers (node ids a build or a retry makes anew masked, random in stock too)."""
    build = _zoo()[kind]
    assert_observed_as_stock(lambda: build(observed_index, llm_url, embed_model),
                             lambda engine: str(engine.query(QUESTIONS[0])),
                             random_node_ids=kind in ("multistep", "retry", "retry_source", "recursive", "auto_merging"))
