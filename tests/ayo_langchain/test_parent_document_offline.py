"""``ParentDocumentRetriever`` / ``MultiVectorRetriever`` offline (real embeddings + Chroma, fake OpenAI server):
the chunks' search lowered (the query embedded on Ayo's engine, the search through the user's Chroma), the
parents from the retriever's own docstore; the same documents, runs and chain answers as stock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_classic.retrievers import MultiVectorRetriever, ParentDocumentRetriever
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.stores import InMemoryStore
from langchain_text_splitters import RecursiveCharacterTextSplitter
from lc_helpers import check_equivalent, fake_chat, format_docs, plain

import ayo_langchain

PARENTS = [
    "The json module encodes Python objects as JSON strings with json.dumps. It decodes them with json.loads. "
    "Both accept options for indentation and key sorting.",
    "pathlib.Path joins path components with the / operator. Path.read_text reads a whole file. "
    "os.path.join does the same joining for plain strings.",
    "The bisect module keeps a list sorted. insort inserts an item at its sorted position. "
    "bisect_left finds where an item would go.",
]
QUESTIONS = ["How do I serialize to JSON?", "How can I join paths?", "How can a list stay sorted?"]


def parent_retriever(tmp_path: Any, embeddings: Any, **kwargs: Any) -> ParentDocumentRetriever:
    import chromadb
    from langchain_chroma import Chroma

    client = chromadb.PersistentClient(path=str(tmp_path / "chunks"))
    store = Chroma(collection_name="chunks", embedding_function=embeddings, client=client)
    retriever = ParentDocumentRetriever(vectorstore=store, docstore=InMemoryStore(),
                                        child_splitter=RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=0),
                                        **kwargs)
    retriever.add_documents([Document(page_content=t, metadata={"n": i}) for i, t in enumerate(PARENTS)],
                            ids=[f"p{i}" for i in range(len(PARENTS))])
    return retriever


@pytest.mark.parametrize("search", [{}, {"search_type": "mmr", "search_kwargs": {"k": 3, "fetch_k": 6}}])
def test_parent_documents_as_stock(tmp_path: Any, embeddings: Any, search: dict) -> None:
    retriever = parent_retriever(tmp_path, embeddings, **search)
    fast = ayo_langchain.optimize(retriever)
    for q in QUESTIONS:
        want = retriever.invoke(q)
        assert want and all(d.page_content in PARENTS for d in want)
        assert plain(fast.invoke(q)) == plain(want)
        assert plain(asyncio.run(fast.ainvoke(q))) == plain(asyncio.run(retriever.ainvoke(q)))
    text = str(fast.explain())
    assert "Retrieval[ParentDocumentRetriever]" in text and "opaque (0)" in text


def test_in_a_chain_and_runs_as_stock(fake_server: Any, tmp_path: Any, embeddings: Any) -> None:
    from test_callbacks_and_api import Recorder

    retriever = parent_retriever(tmp_path, embeddings)
    llm = fake_chat(fake_server)
    prompt = ChatPromptTemplate.from_messages([("human", "Question: {question}\nContext: {context}\nAnswer:")])
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS[:2])
    stock_rec, fast_rec = Recorder(), Recorder()
    assert fast.invoke(QUESTIONS[0], {"callbacks": [fast_rec]}) == chain.invoke(QUESTIONS[0], {"callbacks": [stock_rec]})
    assert set(fast_rec.events) == set(stock_rec.events)


def test_score_threshold_search_stays_opaque(tmp_path: Any, embeddings: Any) -> None:
    from langchain_classic.retrievers.multi_vector import SearchType

    retriever = parent_retriever(tmp_path, embeddings, search_type=SearchType.similarity_score_threshold,
                                 search_kwargs={"score_threshold": 0.1})
    fast = ayo_langchain.optimize(retriever)
    assert plain(fast.invoke(QUESTIONS[0])) == plain(retriever.invoke(QUESTIONS[0]))
    assert "search_type" in str(fast.explain())


def test_a_multi_vector_retriever_over_summaries(tmp_path: Any, embeddings: Any) -> None:
    """The docs' other use: one summary vector per parent, the parents kept in a docstore."""
    import chromadb
    from langchain_chroma import Chroma

    store = Chroma(collection_name="summaries", embedding_function=embeddings,
                   client=chromadb.PersistentClient(path=str(tmp_path / "summaries")))
    retriever = MultiVectorRetriever(vectorstore=store, docstore=InMemoryStore(), search_kwargs={"k": 2})
    ids = [f"p{i}" for i in range(len(PARENTS))]
    store.add_documents([Document(page_content=t.split(".")[0], metadata={"doc_id": i}) for t, i in zip(PARENTS, ids, strict=True)])
    retriever.docstore.mset(list(zip(ids, [Document(page_content=t) for t in PARENTS], strict=True)))
    fast = ayo_langchain.optimize(retriever)
    for q in QUESTIONS:
        assert plain(fast.invoke(q)) == plain(retriever.invoke(q))
