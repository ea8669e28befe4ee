"""Document compression and ``RunnableEach`` offline (fake OpenAI server, real embeddings + Chroma): same
outputs and errors as stock, and ``explain()`` names what runs concurrently."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import LLMChainExtractor, LLMChainFilter
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from lc_helpers import check_equivalent, fake_chat, format_docs, plain

import ayo_langchain

PROMPT = ChatPromptTemplate.from_messages([("human", "Question: {question}\nContext: {context}\nAnswer:")])
QUESTIONS = ["How do I serialize to JSON?", "How can I join paths?"]


def test_extractor_chain(fake_server: Any, vectorstore: Any) -> None:
    llm = fake_chat(fake_server)
    retriever = ContextualCompressionRetriever(base_compressor=LLMChainExtractor.from_llm(llm),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 3}))
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    assert asyncio.run(fast.ainvoke(QUESTIONS[0])) == asyncio.run(chain.ainvoke(QUESTIONS[0]))
    text = str(fast.explain())
    assert "DocumentCompression[ContextualCompressionRetriever]" in text and "opaque (0)" in text
    assert "LLMChainExtractor's chain runs once per retrieved document, all at once" in text


def _pipeline_retriever(llm: Any, vectorstore: Any, embeddings: Any) -> ContextualCompressionRetriever:
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline, EmbeddingsFilter
    from langchain_text_splitters import CharacterTextSplitter

    stages = [CharacterTextSplitter(chunk_size=60, chunk_overlap=0, separator=" "),
              EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.1), LLMChainExtractor.from_llm(llm)]
    return ContextualCompressionRetriever(base_compressor=DocumentCompressorPipeline(transformers=stages),
                                          base_retriever=vectorstore.as_retriever(search_kwargs={"k": 3}))


def test_compressor_pipeline(fake_server: Any, vectorstore: Any, embeddings: Any) -> None:
    """Splitter, embeddings filter (the user's objects in their nodes), then the extractor lowered per document."""
    llm = fake_chat(fake_server)
    retriever = _pipeline_retriever(llm, vectorstore, embeddings)
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    assert asyncio.run(fast.ainvoke(QUESTIONS[1])) == asyncio.run(chain.ainvoke(QUESTIONS[1]))
    assert plain(ayo_langchain.optimize(retriever).invoke(QUESTIONS[0])) == plain(retriever.invoke(QUESTIONS[0]))
    text = str(fast.explain())
    assert "opaque (0)" in text
    assert "CharacterTextSplitter runs as the user's object" in text and "EmbeddingsFilter runs as" in text
    assert "LLMChainExtractor's chain runs once per retrieved document, all at once" in text


def test_a_local_compressor_after_the_lowered_retriever(vectorstore: Any, embeddings: Any) -> None:
    from langchain_classic.retrievers.document_compressors import EmbeddingsFilter

    retriever = ContextualCompressionRetriever(
        base_compressor=EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.2),
        base_retriever=vectorstore.as_retriever(search_kwargs={"k": 4}))
    fast = ayo_langchain.optimize(retriever)
    for q in QUESTIONS:
        assert plain(fast.invoke(q)) == plain(retriever.invoke(q))
        assert plain(asyncio.run(fast.ainvoke(q))) == plain(asyncio.run(retriever.ainvoke(q)))
    assert "opaque (0)" in str(fast.explain())


def test_filter_parse_error_is_stocks(fake_server: Any, vectorstore: Any) -> None:
    """The fake model never says YES or NO: BooleanOutputParser's own error, from stock and from Ayo."""
    retriever = ContextualCompressionRetriever(base_compressor=LLMChainFilter.from_llm(fake_chat(fake_server)),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 2}))
    with pytest.raises(ValueError) as stock_error:
        retriever.invoke(QUESTIONS[0])
    with pytest.raises(ValueError) as fast_error:
        ayo_langchain.optimize(retriever).invoke(QUESTIONS[0])
    assert type(fast_error.value) is type(stock_error.value) and str(fast_error.value) == str(stock_error.value)


def test_map_in_a_chain(fake_server: Any) -> None:
    each = (ChatPromptTemplate.from_messages([("human", "Explain {topic}")]) | fake_chat(fake_server)
            | StrOutputParser()).map()
    chain = RunnableLambda(lambda text: [{"topic": t} for t in text.split(",")]) | each
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, ["json,paths,regex", "dates"])
    text = str(fast.explain())
    assert "Map[RunnableEach]" in text and "runs once per element" in text and "opaque (0)" in text
    assert plain(fast.invoke("")) == plain(chain.invoke(""))
    assert plain(asyncio.run(fast.ainvoke("json,paths"))) == plain(asyncio.run(chain.ainvoke("json,paths")))


@pytest.mark.parametrize("kind", ["compression", "pipeline", "map", "map_root"])
def test_runs_are_stocks(fake_server: Any, vectorstore: Any, embeddings: Any, kind: str) -> None:
    """Every run Ayo reports is one stock reports (name, tags), under one root; the same model outputs."""
    from test_callbacks_and_api import Recorder

    llm = fake_chat(fake_server)
    if kind == "compression":
        chain = ContextualCompressionRetriever(base_compressor=LLMChainExtractor.from_llm(llm),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 3}))
        question: Any = QUESTIONS[0]
    elif kind == "pipeline":
        chain, question = _pipeline_retriever(llm, vectorstore, embeddings), QUESTIONS[1]
    else:
        chain = (ChatPromptTemplate.from_messages([("human", "Explain {topic}")]) | llm | StrOutputParser()).map()
        question = [{"topic": t} for t in ("json", "paths", "regex")]
        if kind == "map":
            chain = RunnableLambda(lambda text: [{"topic": t} for t in text.split(",")]) | chain
            question = "json,paths,regex"
    fast = ayo_langchain.optimize(chain)
    stock_rec, fast_rec = Recorder(), Recorder()
    want = chain.invoke(question, config={"callbacks": [stock_rec], "tags": ["user-tag"]})
    got = fast.invoke(question, config={"callbacks": [fast_rec], "tags": ["user-tag"]})
    assert plain(got) == plain(want)
    ours, theirs = set(fast_rec.events), set(stock_rec.events)
    assert ours <= theirs, ours - theirs
    assert {e for e in theirs if e[0] == "llm_end"} == {e for e in ours if e[0] == "llm_end"}
    assert sum(1 for p in fast_rec.parents.values() if p is None) == 1
