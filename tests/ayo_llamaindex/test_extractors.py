"""Metadata extractors inside an optimized doc-QA call, on the real vLLM server: the same metadata,
answers and LLM events as stock, their model calls sent by Ayo's engine, and no stale-loop retries
when the function is called from worker threads (how a sync app serves users)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.extractors import DocumentContextExtractor, KeywordExtractor
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore

import ayo_llamaindex
from tests.ayo_llamaindex.test_equivalence_llm import make_llm

pytestmark = pytest.mark.llm

DOCS = [
    Document(text="The Nile flows north through eleven countries. Its two main tributaries are the White Nile and "
             "the Blue Nile, which meet at Khartoum. The Aswan High Dam, finished in 1970, controls its floods.",
             id_="nile", metadata={"title": "Nile"}),
    Document(text="Mount Kilimanjaro is a dormant volcano in Tanzania. Its highest peak, Uhuru, stands 5,895 metres "
             "above sea level. Its glaciers have shrunk by more than eighty percent since 1912.",
             id_="kili", metadata={"title": "Kilimanjaro"}),
]
QUESTION = "Where do the two Niles meet?"


def context_extractor(llm: Any, docstore: SimpleDocumentStore) -> Any:
    return DocumentContextExtractor(docstore=docstore, llm=llm, max_context_length=2000, max_output_tokens=16,
                                    num_workers=4, show_progress=False)


def keyword_extractor(llm: Any, docstore: SimpleDocumentStore) -> Any:
    return KeywordExtractor(llm=llm, keywords=2, show_progress=False)


def make_answer(llm: Any, embed_model: Any, callback_manager: CallbackManager | None = None,
                extractor: Any = context_extractor) -> Any:
    splitter = SentenceSplitter(chunk_size=40, chunk_overlap=0)

    def answer(question: str, documents: list[Document]) -> tuple[str, list[tuple[str, str]]]:
        docstore = SimpleDocumentStore()
        docstore.add_documents(documents)
        index = VectorStoreIndex.from_documents(
            documents, storage_context=StorageContext.from_defaults(docstore=docstore), embed_model=embed_model,
            transformations=[splitter, extractor(llm, docstore)], callback_manager=callback_manager)
        response = index.as_query_engine(llm=llm, similarity_top_k=2).query(question)
        # what each retrieved chunk was indexed with: its text and the metadata the extractor wrote
        return str(response), sorted((n.node.get_content(), repr(sorted(n.node.metadata.items())))
                                     for n in response.source_nodes)

    return answer


def _llm_events(handler: LlamaDebugHandler) -> list[tuple[int, int]]:
    """Per LLM event pair: (messages, response text length): payloads, not timing."""
    pairs = handler.get_event_pairs(CBEventType.LLM)
    return sorted((len(start.payload["messages"]), len(str(end.payload["response"].message.content)))
                  for start, end in pairs)


@pytest.mark.parametrize("extractor", [context_extractor, keyword_extractor])
def test_metadata_answers_and_events_match_stock_and_go_through_ayo(llm_url: str, embed_model: Any,
                                                                     extractor: Any) -> None:
    handlers = LlamaDebugHandler(), LlamaDebugHandler()
    stock, fast = (make_answer(make_llm(llm_url, max_tokens=16, callback_manager=CallbackManager([h])), embed_model,
                               CallbackManager([h]), extractor) for h in handlers)
    fast = ayo_llamaindex.optimize(fast)
    expected, got = stock(QUESTION, DOCS), fast(QUESTION, DOCS)
    assert got == expected
    assert all("context" in meta or "excerpt_keywords" in meta for _, meta in got[1]), got[1]
    assert _llm_events(handlers[1]) == _llm_events(handlers[0])
    assert len(_llm_events(handlers[0])) > len(got[1])  # the extractor's calls are among them
    text = str(fast.explain())
    assert "Extractor[llm=" in text and "through Ayo's LLM engine" in text


def test_calls_from_worker_threads_never_retry_on_a_closed_loop(llm_url: str, embed_model: Any,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Each call in a fresh worker thread runs the extractor on a new event loop; stock's cached SDK
    client then holds connections of a closed loop. Ayo's engine lives on its own loop: no retry."""
    llm = make_llm(llm_url, max_tokens=16)
    stock, fast = make_answer(llm, embed_model), ayo_llamaindex.optimize(make_answer(llm, embed_model))
    expected = ThreadPoolExecutor(1).submit(stock, QUESTION, DOCS).result()
    with caplog.at_level(logging.INFO, logger="openai"):
        for _ in range(2):
            with ThreadPoolExecutor(1) as pool:  # a new thread per call, as asyncio.to_thread may give
                assert pool.submit(fast, QUESTION, DOCS).result() == expected
    retries = [r.getMessage() for r in caplog.records if "Retrying request" in r.getMessage()]
    assert not retries, retries


def test_an_unrecognized_llm_runs_the_extractor_stock(embed_model: Any) -> None:
    """A custom LLM class is not sent by Ayo: the extractor's calls stay its own (explain says nothing)."""
    from tests.ayo_llamaindex.conftest import FakeLLM

    llm = FakeLLM()
    fast = ayo_llamaindex.optimize(make_answer(llm, embed_model))
    assert fast(QUESTION, DOCS) == make_answer(llm, embed_model)(QUESTION, DOCS)
    assert "Extractor[llm=" not in str(fast.explain())

