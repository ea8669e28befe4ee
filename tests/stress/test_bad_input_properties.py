"""Bad input, property-based: random pipelines of recognized and unrecognized parts, fed bad inputs.

For every drawn pipeline and input: ``optimize()`` never raises where stock runs, and the optimized
pipeline returns what stock returns, or raises what stock raises (same type, same message).

Parts: prompts (chat / plain, some asking for a variable the input lacks), custom retrievers and
lambdas Ayo does not recognize, the recognized model and parsers, parsers and postprocessors that
raise; inputs: empty, ordinary, non-UTF-8 (lone surrogates from ``surrogateescape``), control
characters, huge (~100k tokens). The LangChain side runs on the in-memory OpenAI-compatible fake
(tests/ayo_langchain/lc_helpers.py; stock and Ayo send real request bodies to it), the LlamaIndex
side on a fake LLM and a mock embedding, so the examples stay fast and offline; the real-engine
sweeps are tests/ayo_*/test_unseen_*.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.ayo_langchain.lc_helpers import FakeOpenAIServer, fake_chat  # noqa: E402
from tests.ayo_llamaindex.li_helpers import FakeLLM  # noqa: E402

pytestmark = pytest.mark.timeout(300)
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

HUGE = "json " * 100_000  # ~100k tokens
TEXTS = st.sampled_from([
    "", "How do I parse JSON?", "   ", "\x00\x01 control\x7f", "caf\u00e9 \u2603 \U0001F600",
    b"bad \xff\xfe bytes".decode("utf-8", "surrogateescape"), "{question} {{braces}}", HUGE,
])


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """("ok", value) or ("raised", (type, message)): what a call did, comparable across stock and Ayo."""
    try:
        return "ok", fn(*args)
    except UnicodeEncodeError as exc:
        # Text that is not valid Unicode fails where the request body is encoded; the position in
        # the message is an offset into that body, which Ayo lays out differently from the SDK.
        return "raised", (type(exc), exc.encoding, exc.reason)
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome being compared
        return "raised", (type(exc), str(exc))


def plain(value: Any) -> Any:
    """A LlamaIndex Response as (text, source contents and scores); anything else as is."""
    if hasattr(value, "source_nodes"):
        return str(value), [(n.node.get_content(), None if n.score is None else round(n.score, 5)) for n in value.source_nodes]  # per-call ids are fresh
    return value


# ---- LangChain ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake server; Ayo's LLMEngine for FAKE_URL talks to it too (as tests/ayo_langchain's fixture)."""
    from ayo_core.engines import llm_client

    server = FakeOpenAIServer()
    original = llm_client.LLMEngine._client

    def client(self: Any) -> httpx.AsyncClient:
        if not self.base_url.startswith("http://fake-openai.test"):
            return original(self)
        return httpx.AsyncClient(transport=server.transport())

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(llm_client.LLMEngine, "_client", client)
        yield server


def _keyword_retriever() -> Any:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class KeywordRetriever(BaseRetriever):  # a user's own retriever: not recognized, called as is
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list:
            if "\x00" in query:
                raise ValueError("the search backend rejects NUL bytes")
            return [Document(page_content=f"doc about {w}") for w in query.split()[:2]]

    return KeywordRetriever()


def _failing_parser(text: str) -> str:
    if "json" in text.lower():
        raise ValueError(f"parser rejected {len(text)} chars")
    return text.upper()


@st.composite
def lc_pipelines(draw: st.DrawFn) -> tuple[Any, Any]:
    """(the parts of a LangChain chain, its input); the model joins in the test (it needs the fake server)."""
    from langchain_core.output_parsers import JsonOutputParser, StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    wants_context = draw(st.booleans())
    template = "Q: {question}" + ("\nContext: {context}" if wants_context else "")
    prompt = draw(st.sampled_from([ChatPromptTemplate.from_template(template), PromptTemplate.from_template(template)]))
    head = draw(st.sampled_from(["dict", "retriever", "lambda", "missing"]))
    if head == "retriever" and wants_context:
        first: Any = {"context": _keyword_retriever() | RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs)),
                      "question": RunnablePassthrough()}
    elif head == "lambda":
        first = RunnableLambda(lambda q: {"question": q, "context": q[::-1]})
    elif head == "missing":  # the prompt's variables are not all there: stock raises KeyError
        first = RunnableLambda(lambda q: {"query": q})
    else:
        first = RunnableLambda(lambda q: {"question": q, "context": "none"})
    tail = draw(st.sampled_from(["str", "json", "raising", "lambda"]))
    parser = {"str": StrOutputParser(), "json": JsonOutputParser(),
              "raising": StrOutputParser() | RunnableLambda(_failing_parser),
              "lambda": RunnableLambda(lambda m: getattr(m, "content", m))}[tail]
    max_tokens = draw(st.sampled_from([1, 8, 40]))
    return (first, prompt, parser, max_tokens), draw(TEXTS)


@SETTINGS
@given(case=lc_pipelines())
def test_langchain_random_pipelines_equal_stock(fake_openai: FakeOpenAIServer, case: tuple[Any, str]) -> None:
    import ayo_langchain

    (first, prompt, parser, max_tokens), question = case
    chain = first | prompt | fake_chat(fake_openai, max_tokens=max_tokens) | parser
    fast = ayo_langchain.optimize(chain)  # never raises
    stock_out = outcome(chain.invoke, question)
    assert outcome(fast.invoke, question) == stock_out
    assert outcome(fast.batch, [question, "ok"]) == outcome(chain.batch, [question, "ok"])


# ---- LlamaIndex -----------------------------------------------------------------------------
def _postprocessor(kind: str) -> Any:
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    class RejectEmpty(BaseNodePostprocessor):
        def _postprocess_nodes(self, nodes: list, query_bundle: Any = None) -> list:
            if not nodes or not (query_bundle and query_bundle.query_str.strip()):
                raise ValueError("nothing to rerank")
            return nodes[:1]

    return {"none": None, "similarity": SimilarityPostprocessor(similarity_cutoff=-1.0), "raising": RejectEmpty()}[kind]


@st.composite
def li_pipelines(draw: st.DrawFn) -> tuple[dict[str, Any], str, list[str]]:
    docs = draw(st.lists(TEXTS, min_size=0, max_size=3))
    spec = {"mode": draw(st.sampled_from(["compact", "refine", "tree_summarize", "simple_summarize", "no_text"])),
            "top_k": draw(st.integers(1, 3)), "post": draw(st.sampled_from(["none", "similarity", "raising"])),
            "retriever": draw(st.sampled_from(["index", "custom"]))}
    return spec, draw(TEXTS), docs


def _doc_qa(spec: dict[str, Any]) -> Any:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore

    llm, embed = FakeLLM(), MockEmbedding(embed_dim=8)

    class FirstNodes(BaseRetriever):  # a user's own retriever
        def __init__(self, index: Any) -> None:
            super().__init__()
            self._nodes = list(index.docstore.docs.values())

        def _retrieve(self, query_bundle: Any) -> list:
            return [NodeWithScore(node=n, score=1.0) for n in self._nodes[: spec["top_k"]]]

    def answer(question: str, texts: list[str]) -> Any:
        documents = [Document(text=t, id_=f"d{i}") for i, t in enumerate(texts)]
        index = VectorStoreIndex.from_documents(documents, embed_model=embed,
                                                transformations=[SentenceSplitter(chunk_size=512, chunk_overlap=0)])
        post = _postprocessor(spec["post"])
        kwargs = {"llm": llm, "response_mode": spec["mode"], "node_postprocessors": [post] if post else []}
        if spec["retriever"] == "custom":
            return RetrieverQueryEngine.from_args(FirstNodes(index), **kwargs).query(question)
        return index.as_query_engine(similarity_top_k=spec["top_k"], **kwargs).query(question)

    return answer


@SETTINGS
@given(case=li_pipelines())
def test_llamaindex_random_doc_qa_equal_stock(case: tuple[dict[str, Any], str, list[str]]) -> None:
    import ayo_llamaindex

    spec, question, docs = case
    stock = _doc_qa(spec)
    fast = ayo_llamaindex.optimize(stock)  # never raises
    stock_out = outcome(lambda: plain(stock(question, docs)))
    assert outcome(lambda: plain(fast(question, docs))) == stock_out
